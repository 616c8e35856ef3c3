"""A plain pysam reference for `escpod bam-demux` (docs/formats.md, "Barcodes on basecalled
records"): read the calls tables, join each record with its read's call, and say which tags the
record gets and which @RG lines the output header has. Slow and obvious on purpose; the
conformance tests (test_bam_demux.py) and the benchmark (bench/tools/bam_demux_bench.py) use it.

Readings of the specification where it leaves a choice (kept in one place, here):
- `eh` and `ec` come with a call: a record with no call gets neither; a duplex record whose parents
  disagree gets `eh` (both calls came from the tables) but no `ec` (there is no one call).
- a call whose label is the noise class (`unclassified`, `noise`, `-1`) is a call: the record is
  `unclassified` with `ec`/`eh` and without `er`.
- a label names a barcode when it is `BC`, `barcode` (any case) or nothing followed by a number
  1..999: written `BC%02d`; anything else that is a safe file-name part is kept as it is.
- the table's source (`eh`): a header starting with `#` is WarpDemuX's; else a `predicted_barcode`
  label column is escapepod's; else a `barcode` table with any CRF-head column is `escpod-crf`;
  else `escpod`.
"""
import csv
import gzip
import io
import re
from dataclasses import dataclass
from typing import Optional

import pysam

DOC_TAGS = ("BC", "RG", "ec", "eh", "er")
UNCLASSIFIED = "unclassified"
NO_CALL = "no call"
DISAGREE = "duplex parents disagree"
NOISE_LABELS = {"unclassified", "noise", "-1"}
BARCODE_LABEL = re.compile(r"(?:bc|barcode)?0*([1-9][0-9]{0,2})", re.IGNORECASE)
READ_ID = re.compile(r"[0-9a-fA-F]{8}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{12}")
CRF_COLUMNS = {
    # fused demux with the CRF head (crf_head.md "Output columns") and `demux basecall`
    "window_start", "edit_dist", "second_dist", "call_len", "mean_post", "gate", "baseq",
    "crf_logp", "crf_margin", "crf_best", "mean_logpost",
    "best_dist", "second_best_dist", "adapter_end", "decoded_len", "decoded_seq",
}


class BadInput(ValueError):
    """Bad input data (escpod exits 1 and writes nothing)."""


@dataclass(frozen=True)
class Call:
    label: str
    confidence: Optional[float]
    source: str


@dataclass(frozen=True)
class Tags:
    """The documented tags of one output record; None = absent."""
    BC: str
    RG: Optional[str]
    ec: Optional[float]
    eh: Optional[str]
    er: Optional[str]


# Other labels (CRF reference names) name output files: letters, digits and ._+- only.
SAFE_NAME = re.compile(r"[A-Za-z0-9._+-]+")


def normalize_label(text: str) -> Optional[str]:
    """The label as escpod writes it, or None when it is not a usable label."""
    text = text.strip()
    if text.lower() in NOISE_LABELS:
        return UNCLASSIFIED
    m = BARCODE_LABEL.fullmatch(text)
    if m:
        return f"BC{int(m.group(1)):02d}"
    if text == "":
        return UNCLASSIFIED  # an empty cell: no barcode, as escpod's label readers take it
    if len(text) > 200 or text.startswith(".") or not SAFE_NAME.fullmatch(text):
        return None
    return text


def _open_text(path):
    with open(path, "rb") as f:
        gz = f.read(2) == b"\x1f\x8b"
    return gzip.open(path, "rt", newline="") if gz else open(path, "r", newline="")


def read_table(path, earlier=()) -> dict:
    """One calls table: {read_id: Call}; a read id listed twice here or in `earlier` (the shards
    read before) is an error. BadInput names the file and line."""
    calls = {}
    with _open_text(path) as f:
        rows = csv.reader(f)
        header = next(rows, None)
        if not header:
            raise BadInput(f"{path}:1: empty table")
        hashed = header[0].startswith("#")
        header = [header[0].lstrip("#")] + header[1:]
        cols = {name.strip(): i for i, name in enumerate(header)}
        label_col = "barcode" if "barcode" in cols else "predicted_barcode" if "predicted_barcode" in cols else None
        if "read_id" not in cols or label_col is None:
            raise BadInput(f"{path}:1: header must name the columns read_id and barcode or predicted_barcode")
        conf_col = "confidence" if "confidence" in cols else "confidence_score" if "confidence_score" in cols else None
        if hashed:
            source = "warpdemux"
        elif label_col == "predicted_barcode":
            source = "escapepod"
        elif CRF_COLUMNS & set(cols):
            source = "escpod-crf"
        else:
            source = "escpod"
        for line, row in enumerate(rows, start=2):
            if not row or (len(row) == 1 and not row[0].strip()):
                continue
            if len(row) < len(header):
                raise BadInput(f"{path}:{line}: {len(row)} cells, the header has {len(header)}")
            read_id = row[cols["read_id"]].strip()
            label = normalize_label(row[cols[label_col]])
            if label is None:
                raise BadInput(f"{path}:{line}: label '{row[cols[label_col]]}' is not a barcode or a file-name part")
            if read_id in calls or read_id in earlier:
                raise BadInput(f"{path}:{line}: read {read_id} listed twice")
            cell = row[cols[conf_col]].strip() if conf_col else ""
            calls[read_id] = Call(label, float(cell) if cell else None, source)
    return calls


def load_calls(paths) -> dict:
    """All shards together; a read id in two shards is an error naming the second."""
    calls = {}
    for path in paths:
        calls.update(read_table(path, calls))
    return calls


def record_reads(name: str, pi: Optional[str], where: str = "") -> list:
    """The read ids a record stands for: its pi, else its name, a duplex name's two parents."""
    reads = [pi] if pi is not None else name.split(";")
    if len(reads) > 2 or not all(READ_ID.fullmatch(r) for r in reads):
        raise BadInput(f"{where}: record {name}: {'pi ' + pi if pi is not None else 'name'} is not a read id")
    return reads


def join(reads: list, calls: dict):
    """(label, confidence, source, reason) of the record whose reads these are."""
    got = [calls.get(r) for r in reads]
    if any(c is None for c in got):
        return UNCLASSIFIED, None, None, NO_CALL
    if len({c.label for c in got}) > 1:
        return UNCLASSIFIED, None, got[0].source, DISAGREE
    confs = [c.confidence for c in got]
    return got[0].label, (None if None in confs else min(confs)), got[0].source, None


def new_read_group(rg: Optional[str], label: str) -> Optional[str]:
    if label == UNCLASSIFIED:
        return rg
    return f"{rg}_{label}" if rg else label


def record_tags(rec: pysam.AlignedSegment, calls: dict, where: str = "") -> Tags:
    pi = rec.get_tag("pi") if rec.has_tag("pi") else None
    rg = rec.get_tag("RG") if rec.has_tag("RG") else None
    label, conf, source, reason = join(record_reads(rec.query_name, pi, where), calls)
    return Tags(label, new_read_group(rg, label), conf, source, reason)


def header_lines(text: str, kind: str) -> list:
    """The `@kind` lines of a SAM header text as dicts of their fields."""
    out = []
    for line in text.splitlines():
        fields = line.split("\t")
        if fields[0] == f"@{kind}":
            out.append(dict(f.split(":", 1) for f in fields[1:]))
    return out


def expected_read_groups(input_rg: list, used: set) -> list:
    """The output's @RG lines: the input's, plus one per (original RG or None, label) in use by
    a classified record: ID, BC and the declared original line's other fields."""
    declared = {d["ID"]: d for d in input_rg}
    lines = [dict(d) for d in input_rg]
    for rg, label in sorted(used, key=lambda x: (x[0] or "", x[1])):
        if label == UNCLASSIFIED:
            continue
        line = {"ID": new_read_group(rg, label), "BC": label}
        line.update({k: v for k, v in declared.get(rg, {}).items() if k not in ("ID", "BC")})
        lines.append(line)
    return lines


@dataclass
class Expected:
    records: list          # [(input AlignedSegment, Tags)] in input order
    read_groups: list      # the output header's @RG lines (dicts)
    input_header: str      # the input's header text
    missing_ids: set       # reads of records without a call
    calls_without_record: set


def expected(path, calls: dict, reference=None, keep_records=True) -> Expected:
    """Everything escpod bam-demux should write for this input (BAM, SAM or CRAM); without
    keep_records only the header and the id sets (one streaming pass)."""
    records, used, seen, missing = [], set(), set(), set()
    with pysam.AlignmentFile(str(path), "r", reference_filename=reference and str(reference),
                             check_sq=False) as f:
        text = str(f.header)
        for rec in f.fetch(until_eof=True):
            tags = record_tags(rec, calls, str(path))
            pi = rec.get_tag("pi") if rec.has_tag("pi") else None
            reads = record_reads(rec.query_name, pi, str(path))
            seen.update(reads)
            if tags.er == NO_CALL:
                missing.update(r for r in reads if r not in calls)
            used.add((rec.get_tag("RG") if rec.has_tag("RG") else None, tags.BC))
            if keep_records:
                records.append((rec, tags))
    rgs = expected_read_groups(header_lines(text, "RG"), used)
    return Expected(records, rgs, text, missing, set(calls) - seen)


def apply_tags(rec: pysam.AlignedSegment, tags: Tags) -> None:
    for name in DOC_TAGS:
        value = getattr(tags, name)
        rec.set_tag(name, value, "f" if name == "ec" else "Z")  # None removes


def header_with_read_groups(text: str, read_groups: list, cl: str = "") -> str:
    """The input header, its @RG lines replaced by `read_groups`, plus escpod's @PG line."""
    lines = [ln for ln in text.splitlines() if not ln.startswith("@RG\t")]
    pgs = header_lines(text, "PG")
    lines += ["@RG\t" + "\t".join(f"{k}:{v}" for k, v in d.items()) for d in read_groups]
    pg = ["@PG", "ID:escpod", "PN:escpod"] + ([f"PP:{pgs[-1]['ID']}"] if pgs else []) + ([f"CL:{cl}"] if cl else [])
    return "\n".join(lines + ["\t".join(pg)]) + "\n"


def write_tagged(in_path, out_path, calls: dict, threads: int = 1, reference=None) -> int:
    """What `bam-demux -o OUT.bam` does, in pysam, two passes as the spec says. Returns records."""
    opts = dict(reference_filename=reference and str(reference), check_sq=False, threads=threads)
    used = set()
    with pysam.AlignmentFile(str(in_path), "r", **opts) as f:
        text = str(f.header)
        for rec in f.fetch(until_eof=True):
            used.add((rec.get_tag("RG") if rec.has_tag("RG") else None, record_tags(rec, calls, str(in_path)).BC))
    header = pysam.AlignmentHeader.from_text(
        header_with_read_groups(text, expected_read_groups(header_lines(text, "RG"), used)))
    n = 0
    with pysam.AlignmentFile(str(in_path), "r", **opts) as f, \
            pysam.AlignmentFile(str(out_path), "wb", header=header, threads=threads) as out:
        for rec in f.fetch(until_eof=True):
            apply_tags(rec, record_tags(rec, calls, str(in_path)))
            out.write(rec)
            n += 1
    return n


if __name__ == "__main__":
    import sys
    if len(sys.argv) < 3:
        sys.exit("usage: bam_demux_reference.py IN.bam CALLS.csv... (prints the expected tags)")
    exp = expected(sys.argv[1], load_calls(sys.argv[2:]))
    for rec, tags in exp.records:
        print(rec.query_name, tags)
    for rg in exp.read_groups:
        print("@RG", rg)
    print(f"{len(exp.missing_ids)} reads without a call, {len(exp.calls_without_record)} calls without a record")
