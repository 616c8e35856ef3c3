"""escpod bam-demux (docs/formats.md, "Barcodes on basecalled records") against the pysam reference
in bam_demux_reference.py, on dorado's real records and on synthetic BAM/CRAM written with htslib:
every output record is the input's but for BC/RG/ec/eh/er, those tags are the reference's, the
header declares the reference's read groups, -d DIR splits as samtools split does on the read
groups, memory and open files stay bounded with thousands of labels, and bad data writes nothing.
"""
import array
import gzip
import hashlib
import os
import random
import re
import shutil
import subprocess
import sys
import uuid
from collections import Counter, defaultdict

import pysam
import pytest

import bam_demux_reference as ref
from conftest import run

BGZF_EOF = bytes.fromhex("1f8b08040000000000ff0600424302001b0003000000000000000000")
SAMTOOLS = shutil.which("samtools") or "/usr/bin/samtools"


# ---- running and reading back ----------------------------------------------------------------


def bam_demux(escpod, bam, *args, check=True, **kwargs):
    return run([escpod, "bam-demux", "-b", bam, *args], check=check, **kwargs)


def _value(v):
    return (v.typecode, tuple(v)) if isinstance(v, array.array) else v


def core(rec, ordered=True):
    """Everything bam-demux must leave as it is: fields, sequence/qualities (as a digest, the big
    synthetic records are long), every other tag with its type (in order unless `ordered` is off)."""
    qual = rec.query_qualities
    body = (rec.query_sequence or "*").encode() + b"|" + (b"*" if qual is None else bytes(qual))
    tags = tuple((t, _value(v), ty) for t, v, ty in rec.get_tags(with_value_type=True) if t not in ref.DOC_TAGS)
    return (rec.query_name, rec.flag, rec.reference_name, rec.reference_start, rec.mapping_quality,
            rec.cigarstring, rec.next_reference_name, rec.next_reference_start, rec.template_length,
            hashlib.blake2b(body, digest_size=16).hexdigest(), tags if ordered else tuple(sorted(tags, key=repr)))


def doc_tags(rec):
    """(BC, RG, ec, eh, er) of an output record; ec rounded (float32 on disk), types checked."""
    got = {}
    for t, v, ty in rec.get_tags(with_value_type=True):
        if t in ref.DOC_TAGS:
            assert t not in got, f"{rec.query_name}: tag {t} twice"
            assert ty == ("f" if t == "ec" else "Z"), f"{rec.query_name}: {t} has type {ty}"
            got[t] = round(v, 6) if t == "ec" else v
    return tuple(got.get(t) for t in ref.DOC_TAGS)


def want_tags(tags: ref.Tags):
    return (tags.BC, tags.RG, None if tags.ec is None else round(tags.ec, 6), tags.eh, tags.er)


def out_views(path, ordered=True):
    with pysam.AlignmentFile(str(path), "rb", check_sq=False) as f:
        return [core(r, ordered) + doc_tags(r) for r in f.fetch(until_eof=True)]


def want_views(exp, ordered=True):
    return [core(rec, ordered) + want_tags(tags) for rec, tags in exp.records]


def is_sorted(header_text):
    hd = ref.header_lines(header_text, "HD")
    return bool(hd) and hd[0].get("SO") == "coordinate"


def rg_multiset(lines):
    return Counter(frozenset(d.items()) for d in lines)


def check_file(path, exp):
    """samtools accepts it; the header is the input's with escpod's @PG and the reference's read
    groups (a per-label file may declare only its own new ones); sorted input => a working .bai."""
    assert run([SAMTOOLS, "quickcheck", "-vvv", path], check=False).returncode == 0, f"quickcheck {path}"
    assert run([SAMTOOLS, "view", "-H", "--no-PG", path]).stdout.startswith("@HD")
    with pysam.AlignmentFile(str(path), "rb", check_sq=False) as f:
        text = str(f.header)
    lines = [ln for ln in text.splitlines() if ln]
    inp = [ln for ln in exp.input_header.splitlines() if ln]
    assert [ln for ln in lines if ln.startswith("@HD")] == [ln for ln in inp if ln.startswith("@HD")], path
    assert [ln for ln in lines if ln.startswith("@SQ")] == [ln for ln in inp if ln.startswith("@SQ")], path
    assert [ln for ln in lines if ln.startswith("@CO")] == [ln for ln in inp if ln.startswith("@CO")], path
    in_pg, out_pg = ref.header_lines(exp.input_header, "PG"), ref.header_lines(text, "PG")
    assert out_pg[:len(in_pg)] == in_pg, f"{path}: the input's @PG lines changed"
    mine = [pg for pg in out_pg if pg["ID"] == "escpod"]
    assert len(mine) == 1 and len(out_pg) == len(in_pg) + 1, f"{path}: @PG lines {out_pg}"
    assert mine[0].get("PP") == (in_pg[-1]["ID"] if in_pg else None), f"{path}: escpod's PP {mine[0]}"
    got_rg, want_rg = rg_multiset(ref.header_lines(text, "RG")), rg_multiset(exp.read_groups)
    if path.parent.name == "by_label":  # a per-label file: its own lines at least, no foreign ones
        assert not got_rg - want_rg, f"{path}: unexpected @RG lines {got_rg - want_rg}"
        assert not rg_multiset(ref.header_lines(exp.input_header, "RG")) - got_rg, f"{path}: lost input @RG"
    else:
        assert got_rg == want_rg, f"{path}: @RG lines\n got {sorted(map(sorted, got_rg))}\nwant {sorted(map(sorted, want_rg))}"
    bai = path.parent / (path.name + ".bai")
    if is_sorted(exp.input_header):
        assert bai.is_file(), f"no index for {path}"
        with pysam.AlignmentFile(str(path), "rb", check_sq=False) as f:
            n_mapped = sum(1 for r in f.fetch(until_eof=True) if not r.is_unmapped)
        with pysam.AlignmentFile(str(path), "rb", index_filename=str(bai)) as f:
            n_idx = sum(f.count(contig=c) for c in f.references)
        assert n_idx == n_mapped, f"{path}: index finds {n_idx} records, {n_mapped} are placed"
    else:
        assert not bai.exists() and not (path.with_suffix(".bai")).exists(), f"index for unsorted {path}"


def assert_demux(escpod, bam, calls_args, calls, tmp_path, *extra, reference=None, prefix="barcode", ordered=True):
    """Runs bam-demux with -o and -d and checks both against the reference; returns (exp, result)."""
    exp = ref.expected(bam, calls, reference)
    out, by_label = tmp_path / "out" / "tagged.bam", tmp_path / "out" / "by_label"
    out.parent.mkdir(parents=True, exist_ok=True)
    args = [*calls_args, "-o", out, "-d", by_label, *extra]
    if reference:
        args += ["--reference", reference]
    if prefix != "barcode":
        args += ["--prefix", prefix]
    r = bam_demux(escpod, bam, *args)
    want = want_views(exp, ordered)
    got = out_views(out, ordered)
    assert len(got) == len(want), f"{len(got)} records written, {len(want)} read"
    for i, (g, w) in enumerate(zip(got, want)):
        assert g == w, f"record {i} ({w[0]}):\n got {g}\nwant {w}"
    check_file(out, exp)
    labels = [tags.BC for _, tags in exp.records]
    files = {f"{prefix}_{label}.bam" for label in labels}
    if is_sorted(exp.input_header):
        files |= {f + ".bai" for f in files}
    assert {p.name for p in by_label.iterdir()} == files
    for label in set(labels):
        path = by_label / f"{prefix}_{label}.bam"
        assert out_views(path, ordered) == [w for w, l in zip(want, labels) if l == label], path
        check_file(path, exp)
    return exp, r


# ---- calls tables -----------------------------------------------------------------------------


def write_table(path, header, rows, gz=False):
    text = header + "\n" + "".join(",".join(map(str, row)) + "\n" for row in rows)
    if gz:
        with gzip.open(path, "wt") as f:
            f.write(text)
    else:
        path.write_text(text)
    return path


def hashed_calls(read_ids, salt="calls"):
    """Deterministic calls for real reads: BC01..BC04 by hash, some `unclassified`, about one in
    seven left without a call. {read_id: (label, confidence text)}."""
    calls = {}
    for rid in sorted(read_ids):
        h = int(hashlib.sha256((salt + rid).encode()).hexdigest(), 16)
        k = h % 7
        if k == 0:
            continue
        label = "unclassified" if k == 6 else f"BC{(k - 1) % 4 + 1:02d}"
        calls[rid] = (label, f"{(h >> 16) % 1000 / 1000:.3f}")
    return calls


# ---- synthetic records ------------------------------------------------------------------------

SQ = (("chr1", 60000), ("chr2", 40000), ("chr3", 25000))
RG_LINES = (
    "@RG\tID:rgA\tSM:sampleA\tPL:ONT\tDS:basecall_model=rna004_130bps_sup@v5.1.0 runid=run1",
    "@RG\tID:rgB\tSM:sampleB\tPL:ONT\tLB:lib2\tPU:flowcell2",
    "@RG\tID:rgC\tSM:unused",
)
UNDECLARED_RG = "rgZ"
FORMS = {"BC01": ["BC01", "1", "barcode01"], "BC02": ["BC02", "2"], "BC03": ["barcode03", "BC03"],
         "unclassified": ["unclassified", "noise", "-1"]}


def new_id(rng):
    return str(uuid.UUID(int=rng.getrandbits(128), version=4))


def header_text(rg_lines=RG_LINES, sq=SQ):
    return "\n".join([
        "@HD\tVN:1.6\tSO:unknown", *(f"@SQ\tSN:{n}\tLN:{n_}" for n, n_ in sq), *rg_lines,
        "@PG\tID:basecaller\tPN:dorado\tVN:0.9.1\tCL:dorado basecaller sup pod5/",
        "@PG\tID:aligner\tPN:minimap2\tPP:basecaller\tVN:2.28-r1209",
        "@CO\tsynthetic records for escpod bam-demux"]) + "\n"


class Records:
    """Builds dorado-like records: long random sequences sliced from one pool (fast), a move
    table, float/int/string tags, optional stale BC/ec/eh/er tags that bam-demux must replace."""

    def __init__(self, header, rng, seq_len=(80, 400)):
        self.header, self.rng, self.seq_len = header, rng, seq_len
        self.pool = "".join(rng.choice("ACGT") for _ in range(1 << 16))
        self.qpool = array.array("B", (rng.randint(2, 50) for _ in range(1 << 16)))
        self.items = []

    def add(self, name, *, pi=None, rg=None, flag=0, mapped=True, seq=True, stale=False, length=None):
        rng, a = self.rng, pysam.AlignedSegment(self.header)
        n = length or rng.randint(*self.seq_len)
        o = rng.randrange(len(self.pool) - n)
        a.query_name = name
        a.flag = flag | (0 if mapped else 4)
        if seq:
            a.query_sequence = self.pool[o:o + n]
            a.query_qualities = self.qpool[o:o + n]
        if mapped:
            a.reference_id = rng.randrange(self.header.nreferences)
            a.reference_start = rng.randrange(self.header.get_reference_length(a.reference_name) - n)
            a.mapping_quality = rng.randint(0, 60)
            clip = rng.randint(0, min(20, n // 4))
            a.cigarstring = f"{clip}S{n - clip}M" if clip else f"{n}M"
            if rng.random() < 0.4:
                a.flag |= 16
        else:
            a.reference_id, a.reference_start, a.mapping_quality = -1, -1, 0
        a.set_tag("qs", round(rng.uniform(7, 25), 4), "f")
        a.set_tag("ns", rng.randint(1000, 60000), "i")
        a.set_tag("st", "2025-09-30T13:09:37.411+00:00", "Z")
        a.set_tag("mv", array.array("b", [5] + [rng.randint(0, 1) for _ in range(24)]))
        if rg:
            a.set_tag("RG", rg, "Z")
        if pi:
            a.set_tag("pi", pi, "Z")
        a.set_tag("dx", -1 if ";" not in name else 1, "i")
        if stale:
            a.set_tag("BC", "BC99", "Z")
            a.set_tag("ec", 0.5, "f")
            a.set_tag("eh", "stale", "Z")
            a.set_tag("er", "stale", "Z")
        self.items.append(a)
        return a


def write_bam(path, header, records, sort=False):
    """Writes the records (SO:unknown); sorted: samtools sort of that (SO:coordinate)."""
    raw = path.with_name(path.stem + ".unsorted.bam") if sort else path
    with pysam.AlignmentFile(str(raw), "wb", header=header) as f:
        for a in records:
            f.write(a)
    if sort:
        pysam.sort("-o", str(path), str(raw))
        raw.unlink()
    return path


def build_synthetic(path, seed=7, n_parents=240, sort=False):
    """Split reads (pi), duplex `a;b` records (agreeing, disagreeing, one or both without a call,
    both noise), unmapped, secondary (no SEQ) and supplementary records, reads without a call,
    declared RGs with extra fields, an undeclared RG, records without RG, stale tags, and calls
    without any record. Returns (bam, calls) with calls {read_id: (label as written, confidence)}."""
    rng = random.Random(seed)
    header = pysam.AlignmentHeader.from_text(header_text())
    parents = [new_id(rng) for _ in range(n_parents)]
    calls, truth = {}, {}
    for i, p in enumerate(parents):
        k = i % 6
        if k == 5:
            continue  # no call
        label = ["BC01", "BC02", "BC03", "BC01", "unclassified"][k]
        truth[p] = label
        calls[p] = (rng.choice(FORMS[label]), f"{rng.randint(1, 999) / 1000:.3f}")
    recs = Records(header, rng)
    rgs = ["rgA", "rgB", UNDECLARED_RG, None]
    for i, p in enumerate(parents):
        rg, kind, stale = rgs[(i // 6) % 4], (i // 24) % 5, i % 7 == 3
        if kind == 0:
            recs.add(p, rg=rg, stale=stale)
        elif kind == 1:
            recs.add(p, rg=rg, mapped=False, stale=stale)
        elif kind == 2:  # dorado split read: fresh names pointing at the parent, maybe not its own
            if i % 2:
                recs.add(p, rg=rg)
            for j in range(2 + i % 2):
                recs.add(new_id(rng), pi=p, rg=rg, mapped=j != 1, stale=stale)
        elif kind == 3:
            recs.add(p, rg=rg, stale=stale)
            recs.add(p, rg=rg, flag=0x100, seq=False)
            recs.add(p, rg=rg, flag=0x800)
        else:
            child = new_id(rng)
            recs.add(child, pi=p, rg=rg)
            recs.add(child, pi=p, rg=rg, flag=0x100, seq=False)
    by_label = defaultdict(list)
    for p in parents:
        by_label[truth.get(p)].append(p)
    pairs = [(by_label["BC01"][k], by_label["BC01"][k + 1]) for k in range(0, 8, 2)]   # agree
    pairs += [(by_label["BC02"][k], by_label["BC03"][k]) for k in range(4)]            # disagree
    pairs += [(by_label["BC01"][10 + k], by_label[None][k]) for k in range(3)]          # one no call
    pairs += [(by_label[None][5], by_label[None][6])]                                     # neither
    pairs += [(by_label["unclassified"][0], by_label["unclassified"][1])]                 # both noise
    pairs += [(by_label["BC02"][8], by_label["unclassified"][2])]                         # BC vs noise
    for k, (a, b) in enumerate(pairs):
        recs.add(f"{a};{b}", rg=rgs[k % 4], mapped=k % 3 != 2, stale=k % 2 == 0)
    rng.shuffle(recs.items)
    for _ in range(5):  # calls with no record
        calls[new_id(rng)] = ("BC02", "0.700")
    return write_bam(path, header, recs.items, sort), calls


def calls_csv(path, calls, layout="escpod", gz=False):
    """The calls in one of the table layouts bam-demux reads."""
    items = sorted(calls.items())
    if layout == "escpod":
        return write_table(path, "read_id,barcode,confidence", [(r, l, c) for r, (l, c) in items], gz)
    if layout == "escpod-noconf":
        return write_table(path, "read_id,barcode", [(r, l) for r, (l, c) in items], gz)
    if layout == "escpod-crf":
        return write_table(path, "read_id,barcode,confidence,crf_logp,crf_margin,crf_best,mean_logpost",
                           [(r, l, c, "-3.5", "2.1", l, "-0.02") for r, (l, c) in items], gz)
    if layout == "escapepod":
        norm = {r: ref.normalize_label(l) for r, (l, c) in items}
        return write_table(path, "read_id,predicted_barcode,confidence,is_confident",
                           [(r, norm[r], c, "true" if norm[r] != "unclassified" else "false") for r, (l, c) in items], gz)
    if layout == "warpdemux":
        def number(label):
            n = ref.normalize_label(label)
            return -1 if n == "unclassified" else int(n[2:])
        return write_table(path, "#read_id,predicted_barcode,confidence_score,p01,p02,p03,p-1",
                           [(r, number(l), c, "0.1", "0.2", "0.3", "0.4") for r, (l, c) in items], gz)
    raise ValueError(layout)


def samtools_split_by_label(out_bam, work):
    """samtools split on the read groups; each file's records go to its @RG line's BC label,
    records of an original (BC-less) or undeclared read group, or without one, to unclassified."""
    work.mkdir()
    run([SAMTOOLS, "split", "--no-PG", "-u", work / "unaccounted.bam", "-f", f"{work}/rg_%!.%.", out_bam])
    with pysam.AlignmentFile(str(out_bam), "rb", check_sq=False) as f:
        lines = ref.header_lines(str(f.header), "RG")
    label_of = {}
    for d in lines:
        label = d.get("BC", "unclassified")
        if "BC" in d:
            assert d["ID"] == label or d["ID"].endswith("_" + label), d
        label_of[d["ID"]] = label
    groups = defaultdict(Counter)
    for p in work.iterdir():
        label = "unclassified" if p.name == "unaccounted.bam" else label_of[p.name[3:-4]]
        groups[label].update(out_views(p))
    return {k: v for k, v in groups.items() if v}


def assert_split_agrees(out_dir, prefix="barcode"):
    split = samtools_split_by_label(out_dir / "tagged.bam", out_dir / "split")
    ours = {p.name[len(prefix) + 1:-4]: Counter(out_views(p))
            for p in (out_dir / "by_label").glob(f"{prefix}_*.bam")}
    assert set(split) == set(ours)
    for label in ours:
        assert split[label] == ours[label], f"label {label}: samtools split and -d DIR disagree"


def output_files(root):
    return sorted(str(p) for p in root.rglob("*") if p.is_file()) if root.exists() else []


# ---- a. dorado's real records -----------------------------------------------------------------


@pytest.fixture(scope="module")
def drna_bam(shared_data):
    path = shared_data / "escapepod/drna/yeast_trna_mappings.bam"
    assert path.is_file(), f"shared test data missing: {path}"
    return path


@pytest.fixture(scope="module")
def drna_ids(drna_bam):
    with pysam.AlignmentFile(str(drna_bam)) as f:
        return sorted({r.query_name for r in f.fetch(until_eof=True)})


def test_real_dorado_records_are_tagged_as_the_reference_says(escpod, drna_bam, drna_ids, tmp_path):
    calls = hashed_calls(drna_ids)
    table = calls_csv(tmp_path / "calls.csv", calls)
    loaded = ref.load_calls([table])
    exp, _ = assert_demux(escpod, drna_bam, ["--classifications", table], loaded, tmp_path, "-t", "2")
    # The data exercises what it should: 180 sorted records, one undeclared RG, every label used.
    assert len(exp.records) == 180 and is_sorted(exp.input_header)
    assert not ref.header_lines(exp.input_header, "RG")
    got = Counter(tags.BC for _, tags in exp.records)
    assert set(got) == {"BC01", "BC02", "BC03", "BC04", "unclassified"} and min(got.values()) >= 5, got
    assert sum(tags.er == ref.NO_CALL for _, tags in exp.records) >= 10
    # Barcoded read groups: the undeclared original stays undeclared, its barcoded IDs declared.
    orig = exp.records[0][0].get_tag("RG")
    assert sorted(d["ID"] for d in exp.read_groups) == [f"{orig}_BC0{k}" for k in range(1, 5)]
    assert_split_agrees(tmp_path / "out")


# ---- b./c. synthetic records: split, duplex, secondary, read groups, sorted and not ------------


@pytest.mark.parametrize("sort", [False, True], ids=["unsorted", "sorted"])
def test_synthetic_split_duplex_and_read_groups(escpod, tmp_path, sort):
    bam, calls = build_synthetic(tmp_path / "in.bam", sort=sort)
    table = calls_csv(tmp_path / "calls.csv", calls)
    exp, _ = assert_demux(escpod, bam, ["--classifications", table], ref.load_calls([table]), tmp_path)
    reasons = Counter(tags.er for _, tags in exp.records)
    assert reasons[ref.DISAGREE] >= 4 and reasons[ref.NO_CALL] >= 20, reasons
    duplex = [tags for rec, tags in exp.records if ";" in rec.query_name]
    assert sum(t.BC == "BC01" for t in duplex) >= 4  # agreeing parents take their label
    assert any(rec.has_tag("pi") and tags.BC != "unclassified" for rec, tags in exp.records)
    assert any(rec.is_secondary for rec, _ in exp.records) and any(rec.is_supplementary for rec, _ in exp.records)
    # The declared read group's barcoded lines carry its other fields; rgZ stays undeclared.
    ids = {d["ID"]: d for d in exp.read_groups}
    assert ids["rgA_BC01"]["SM"] == "sampleA" and ids["rgA_BC01"]["BC"] == "BC01"
    assert "rgZ_BC02" in ids and "rgZ" not in ids and ids["BC03"] == {"ID": "BC03", "BC": "BC03"}
    assert_split_agrees(tmp_path / "out")


def build_many_labels(path, n_labels=3000, per_label=4, seq_len=800, sort=False, seed=11):
    """n_labels CRF reference names (`tRNA-0001-uncharged`, ...), per_label reads each (one in five
    split in two), plus reads without a call; long records, so that the input, decoded, is far
    bigger than the memory budget. A label's reads share a read group, so the output header
    depends on n_labels only. Returns (bam, calls, decoded bytes)."""
    rng = random.Random(seed)
    header = pysam.AlignmentHeader.from_text(header_text())
    recs = Records(header, rng, seq_len=(seq_len, seq_len))
    rgs = ["rgA", "rgB", UNDECLARED_RG, None]
    calls = {}
    reads = [(new_id(rng), k) for k in range(1, n_labels + 1) for _ in range(per_label)]
    reads += [(new_id(rng), None) for _ in range(n_labels // 10)]
    rng.shuffle(reads)
    for k, (rid, label) in enumerate(reads):
        if label:
            calls[rid] = (f"tRNA-{label:04d}-uncharged", f"{rng.randint(1, 999) / 1000:.3f}")
        rg = rgs[(label or k) % 4]
        if k % 5 == 0:
            for j in range(2):
                recs.add(new_id(rng), pi=rid, rg=rg, length=seq_len // 2, mapped=j == 0)
        else:
            recs.add(rid, rg=rg, mapped=k % 9 != 0)
    size = sum(len(a.query_sequence) * 2 + 200 for a in recs.items)
    return write_bam(path, header, recs.items, sort), calls, size


PEAK_RSS = """import resource, subprocess, sys
soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
resource.setrlimit(resource.RLIMIT_NOFILE, (min(256, hard), hard))
r = subprocess.run(sys.argv[1:])
print(resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss)
sys.exit(r.returncode)
"""


def peak_rss_kib(cmd):
    """Peak RSS (KiB) of a command run with at most 256 open files."""
    r = run([sys.executable, "-c", PEAK_RSS, *cmd])
    return int(r.stdout.split()[-1])


@pytest.mark.parametrize("sort", [False, True], ids=["unsorted", "sorted"])
def test_thousands_of_labels_one_file_each_with_bounded_memory_and_files(escpod, tmp_path, sort):
    bam, calls, decoded = build_many_labels(tmp_path / "in.bam", sort=sort)
    assert decoded > 20 << 20  # 20x the 1 MiB budget
    table = calls_csv(tmp_path / "calls.csv", calls, layout="escpod-crf")
    loaded = ref.load_calls([table])
    assert len({c.label for c in loaded.values()}) == 3000 and all(c.source == "escpod-crf" for c in loaded.values())
    # The same labels and read groups (so the same output header) with a quarter of the records.
    small, small_calls, small_decoded = build_many_labels(tmp_path / "small.bam", per_label=1, sort=sort, seed=12)
    small_table = calls_csv(tmp_path / "small.csv", small_calls, layout="escpod-crf")
    assert decoded - small_decoded > 12 << 20
    # -d with 3000 labels and a 1 MiB budget, under 256 open files: memory must not follow the records.
    by_label = tmp_path / "by_label"
    rss = {name: peak_rss_kib([escpod, "bam-demux", "-b", path, "--classifications", csv_path,
                               "-d", out, "--memory-mib", "1", "-t", "2"])
           for name, path, csv_path, out in (("all", bam, table, by_label),
                                             ("quarter", small, small_table, tmp_path / "small_by_label"))}
    # Under AddressSanitizer the peak is its quarantine and shadow memory, not ours: the Release
    # run of this test is the one that measures.
    if not os.environ.get("ESCPOD_SANITIZE"):
        assert rss["all"] <= rss["quarter"] + 16 * 1024, \
            f"peak RSS {rss} KiB grows with the records ({decoded >> 20} vs {small_decoded >> 20} MiB decoded)"
    assert len(list((tmp_path / "small_by_label").glob("*.bam"))) == 3001
    run([escpod, "bam-demux", "-b", bam, "--classifications", table, "-o", tmp_path / "all.bam", "-t", "2"])
    exp = ref.expected(bam, loaded)
    want = want_views(exp)
    assert out_views(tmp_path / "all.bam") == want
    labels = [tags.BC for _, tags in exp.records]
    names = {f"barcode_{label}.bam" for label in labels}
    assert len(names) == 3001
    if sort:
        names |= {n + ".bai" for n in names}
    assert {p.name for p in by_label.iterdir()} == names
    rows = defaultdict(list)
    for w, label in zip(want, labels):
        rows[label].append(w)
    for label, expected_rows in rows.items():
        assert out_views(by_label / f"barcode_{label}.bam") == expected_rows, label
    for label in ("tRNA-0001-uncharged", "tRNA-3000-uncharged", "unclassified"):
        check_file(by_label / f"barcode_{label}.bam", exp)


# ---- d. CRAM ----------------------------------------------------------------------------------


def build_cram(tmp_path, seed=5):
    """A small reference and a coordinate-sorted CRAM of reads drawn from it (mismatches, soft
    clips, both strands, unmapped ones at the end), no MD/NM."""
    rng = random.Random(seed)
    contigs = {"ctgA": 6000, "ctgB": 4000}
    seqs = {n: "".join(rng.choice("ACGT") for _ in range(n_)) for n, n_ in contigs.items()}
    fasta = tmp_path / "ref.fa"
    fasta.write_text("".join(f">{n}\n" + "\n".join(s[i:i + 60] for i in range(0, len(s), 60)) + "\n"
                             for n, s in seqs.items()))
    pysam.faidx(str(fasta))
    text = header_text(sq=tuple(contigs.items())).replace("SO:unknown", "SO:coordinate")
    header = pysam.AlignmentHeader.from_text(text)
    placed = []
    for _ in range(150):
        name = list(contigs)[rng.randrange(2)]
        n = rng.randint(60, 300)
        placed.append((name, rng.randrange(contigs[name] - n), n))
    placed.sort(key=lambda x: (list(contigs).index(x[0]), x[1]))
    parents = [new_id(rng) for _ in range(120)]
    rgs = ["rgA", UNDECLARED_RG, None]
    records = []
    for k, (name, pos, n) in enumerate(placed + [(None, -1, 200)] * 20):
        a = pysam.AlignedSegment(header)
        p = parents[k % len(parents)]
        if k % 4 == 1:
            a.query_name = new_id(rng)
            a.set_tag("pi", p, "Z")
        else:
            a.query_name = p if k < len(parents) else f"{parents[k % 50]};{parents[k % 50 + 60]}"
        if name:
            s = list(seqs[name][pos:pos + n])
            for _ in range(n // 30):
                s[rng.randrange(n)] = rng.choice("ACGT")
            clip = rng.randint(0, 10)
            a.query_sequence = "".join(rng.choice("ACGT") for _ in range(clip)) + "".join(s)
            a.reference_id, a.reference_start, a.mapping_quality = list(contigs).index(name), pos, 60
            a.cigarstring = f"{clip}S{n}M" if clip else f"{n}M"
            a.flag = 16 if k % 3 == 0 else 0
        else:
            a.query_sequence = "".join(rng.choice("ACGT") for _ in range(n))
            a.flag, a.reference_id, a.reference_start = 4, -1, -1
        a.query_qualities = array.array("B", (rng.randint(2, 40) for _ in range(len(a.query_sequence))))
        a.set_tag("qs", round(rng.uniform(7, 25), 3), "f")
        a.set_tag("mv", array.array("b", [5, 1, 0, 1, 1, 0]))
        if rgs[k % 3]:
            a.set_tag("RG", rgs[k % 3], "Z")
        records.append(a)
    cram = tmp_path / "in.cram"
    with pysam.AlignmentFile(str(cram), "wc", header=header, reference_filename=str(fasta)) as f:
        for a in records:
            f.write(a)
    calls = {}
    for i, p in enumerate(parents):
        if i % 5:
            calls[p] = (f"BC{i % 3 + 1:02d}", f"{i / 200:.3f}")
    return cram, fasta, calls


def test_cram_input_with_its_reference(escpod, tmp_path):
    cram, fasta, calls = build_cram(tmp_path)
    assert cram.read_bytes()[:4] == b"CRAM"
    table = calls_csv(tmp_path / "calls.csv", calls)
    exp, _ = assert_demux(escpod, cram, ["--classifications", table], ref.load_calls([table]), tmp_path,
                          reference=fasta, prefix="bc", ordered=False)
    assert len(exp.records) == 170 and is_sorted(exp.input_header)
    assert {p.name for p in (tmp_path / "out/by_label").glob("*.bam")} >= {"bc_BC01.bam", "bc_unclassified.bam"}


# ---- e. bad input writes nothing ----------------------------------------------------------------


def assert_refused(escpod, bam, calls_args, tmp_path, names, line=None, extra=()):
    out = tmp_path / "out"
    out.mkdir(exist_ok=True)
    r = bam_demux(escpod, bam, *calls_args, "-o", out / "x.bam", "-d", out / "dd", *extra, check=False)
    assert r.returncode == 1, f"exit {r.returncode}\n{r.stderr}"
    for name in names:
        assert str(name) in r.stderr, f"{name!r} not named in:\n{r.stderr}"
    if line is not None:
        assert re.search(rf"{re.escape(str(names[0]))}(:| line ){line}\b", r.stderr), r.stderr
    assert output_files(out) == [], f"files left after a refused run: {output_files(out)}"


@pytest.fixture
def small(tmp_path):
    """A synthetic BAM of several BGZF blocks and a valid calls table for it."""
    bam, calls = build_synthetic(tmp_path / "in.bam", n_parents=600)
    assert bam.stat().st_size > 150_000
    return bam, calls, calls_csv(tmp_path / "calls.csv", calls)


def test_a_bam_cut_short_is_refused(escpod, small, tmp_path):
    bam, _, table = small
    cut = tmp_path / "cut.bam"
    cut.write_bytes(bam.read_bytes()[: bam.stat().st_size * 3 // 5])
    assert_refused(escpod, cut, ["--classifications", table], tmp_path, [cut.name])


def test_a_bam_without_its_eof_block_is_refused(escpod, small, tmp_path):
    bam, _, table = small
    data = bam.read_bytes()
    assert data.endswith(BGZF_EOF)
    cut = tmp_path / "noeof.bam"
    cut.write_bytes(data[:-len(BGZF_EOF)])
    assert_refused(escpod, cut, ["--classifications", table], tmp_path, [cut.name])


@pytest.mark.parametrize("where", ["name", "pi"])
def test_a_record_that_is_not_a_read_id_is_refused(escpod, tmp_path, where):
    rng = random.Random(3)
    header = pysam.AlignmentHeader.from_text(header_text())
    recs = Records(header, rng)
    good = [new_id(rng) for _ in range(50)]
    for rid in good:
        recs.add(rid, rg="rgA")
    if where == "name":
        recs.add("read_17_not_a_uuid", rg="rgA")
    else:
        recs.add(new_id(rng), pi="read_17_not_a_uuid", rg="rgA")
    bam = write_bam(tmp_path / "in.bam", header, recs.items)
    table = write_table(tmp_path / "calls.csv", "read_id,barcode", [(r, "BC01") for r in good])
    with pytest.raises(ref.BadInput):
        ref.expected(bam, ref.load_calls([table]))
    assert_refused(escpod, bam, ["--classifications", table], tmp_path, [bam.name])
    r = bam_demux(escpod, bam, "--classifications", table, "-o", tmp_path / "y.bam", check=False)
    bad = recs.items[-1]
    assert r.returncode == 1 and not (tmp_path / "y.bam").exists()
    assert "read_17_not_a_uuid" in r.stderr or bad.query_name in r.stderr, r.stderr


def test_a_read_id_listed_twice_is_refused_naming_file_and_line(escpod, small, tmp_path):
    bam, calls, _ = small
    items = sorted(calls.items())
    rows = [(r, l, c) for r, (l, c) in items] + [(items[3][0], "BC02", "0.100")]
    dup = write_table(tmp_path / "dup.csv", "read_id,barcode,confidence", rows)
    with pytest.raises(ref.BadInput):
        ref.load_calls([dup])
    assert_refused(escpod, bam, ["--classifications", dup], tmp_path, [dup.name], line=len(rows) + 1)
    # Across shards: the second table's line.
    a = write_table(tmp_path / "a.csv", "read_id,barcode,confidence", rows[:100])
    b = write_table(tmp_path / "b.csv.gz", "read_id,barcode,confidence", rows[99:-1], gz=True)
    assert_refused(escpod, bam, ["--classifications", a, "--classifications", b], tmp_path, [b.name], line=2)


@pytest.mark.parametrize("header", ["read_id,label,confidence", "id,barcode,confidence", "barcode,confidence"])
def test_a_table_without_read_id_or_label_column_is_refused(escpod, small, tmp_path, header):
    bam, calls, _ = small
    bad = write_table(tmp_path / "bad.csv", header, [(r, l, c)[-len(header.split(",")):] for r, (l, c) in calls.items()])
    with pytest.raises(ref.BadInput):
        ref.load_calls([bad])
    assert_refused(escpod, bam, ["--classifications", bad], tmp_path, [bad.name])


@pytest.mark.parametrize("label", ["a/b", "..", "bc 4"])
def test_a_bad_label_is_refused_naming_file_and_line(escpod, small, tmp_path, label):
    bam, calls, _ = small
    rows = [(r, l, c) for r, (l, c) in sorted(calls.items())]
    rows[7] = (rows[7][0], label, rows[7][2])
    bad = write_table(tmp_path / "bad.csv", "read_id,barcode,confidence", rows)
    with pytest.raises(ref.BadInput):
        ref.load_calls([bad])
    assert_refused(escpod, bam, ["--classifications", bad], tmp_path, [bad.name], line=9)


def test_usage_errors_exit_2(escpod, small, tmp_path):
    bam, _, table = small
    for args in ([], ["--classifications", table],  # no calls; no output
                 ["--classifications", table, "--pod5", bam, "-o", tmp_path / "x.bam"]):
        r = bam_demux(escpod, bam, *args, check=False)
        assert r.returncode == 2, (args, r.returncode, r.stderr)
    assert not (tmp_path / "x.bam").exists()


# ---- f. missing ids and the summary -------------------------------------------------------------


def test_missing_ids_and_calls_without_a_record(escpod, tmp_path):
    bam, calls = build_synthetic(tmp_path / "in.bam")
    table = calls_csv(tmp_path / "calls.csv", calls)
    loaded = ref.load_calls([table])
    missing = tmp_path / "out" / "missing.txt"
    exp, r = assert_demux(escpod, bam, ["--classifications", table], loaded, tmp_path, "--missing-ids", missing)
    assert len(exp.missing_ids) >= 20 and len(exp.calls_without_record) == 5
    got = [ln.strip() for ln in missing.read_text().splitlines() if ln.strip()]
    assert set(got) == exp.missing_ids
    n = len(exp.calls_without_record)
    assert n != len(exp.missing_ids)
    assert any(re.search(rf"\b{n}\b", ln) and "without" in ln and "record" in ln for ln in r.stderr.splitlines()), r.stderr


# ---- g. WarpDemuX's predictions and the other table layouts ----------------------------------------


def test_warpdemux_predictions_shards(escpod, drna_bam, drna_ids, tmp_path):
    calls = hashed_calls(drna_ids, salt="wdx")
    ids = sorted(calls)
    shards = [calls_csv(tmp_path / f"barcode_predictions_{k}.csv.gz", {r: calls[r] for r in ids[k::2]},
                        layout="warpdemux", gz=True) for k in range(2)]
    assert shards[0].read_bytes()[:2] == b"\x1f\x8b"
    with gzip.open(shards[0], "rt") as f:
        assert f.readline().startswith("#read_id,predicted_barcode,confidence_score,p01")
    loaded = ref.load_calls(shards)
    args = [a for s in shards for a in ("--classifications", s)]
    exp, _ = assert_demux(escpod, drna_bam, args, loaded, tmp_path)
    called = [tags for _, tags in exp.records if tags.er is None]
    assert called and all(t.eh == "warpdemux" and t.ec is not None for t in called)
    assert {t.BC for t in called} == {"BC01", "BC02", "BC03", "BC04", "unclassified"}


@pytest.mark.parametrize("layout", ["escpod-noconf", "escpod-crf", "escapepod"])
def test_other_table_layouts(escpod, tmp_path, layout):
    bam, calls = build_synthetic(tmp_path / "in.bam", seed=13, n_parents=120)
    table = calls_csv(tmp_path / "calls.csv", calls, layout=layout)
    loaded = ref.load_calls([table])
    exp, _ = assert_demux(escpod, bam, ["--classifications", table], loaded, tmp_path)
    called = [tags for _, tags in exp.records if tags.eh]
    assert called and {t.eh for t in called} == {layout.split("-noconf")[0]}
    assert all((t.ec is None) == (layout == "escpod-noconf") for t in called if t.er is None)


def test_label_spellings(escpod, drna_bam, drna_ids, tmp_path):
    spellings = {"BC04": "BC04", "4": "BC04", "barcode04": "BC04", "BC11": "BC11", "-1": "unclassified",
                 "noise": "unclassified", "unclassified": "unclassified", "tRNA-Ala-AGC-1-1-uncharged":
                 "tRNA-Ala-AGC-1-1-uncharged"}
    calls = {rid: (list(spellings)[k % len(spellings)], "0.500") for k, rid in enumerate(drna_ids)}
    table = calls_csv(tmp_path / "calls.csv", calls)
    loaded = ref.load_calls([table])
    assert all(loaded[r].label == spellings[calls[r][0]] for r in calls)
    assert_demux(escpod, drna_bam, ["--classifications", table], loaded, tmp_path)


# ---- the .p5s sidecar's label column -------------------------------------------------------------


def test_pod5_sidecar_labels(escpod, shared_data, drna_bam, drna_ids, tmp_path):
    pod5_file = tmp_path / "reads.pod5"
    shutil.copy(shared_data / "escapepod/drna/yeast_trna_reads.pod5", pod5_file)
    os.chmod(pod5_file, 0o644)
    calls = hashed_calls(drna_ids, salt="sidecar")
    write_table(tmp_path / "b.csv", "read_id,barcode", [(r, l) for r, (l, c) in sorted(calls.items())])
    run([escpod, "annotate", pod5_file, "--from", tmp_path / "b.csv", "--name", "barcode"])
    cond = {r: ("ctrl" if k % 3 else "treated") for k, r in enumerate(drna_ids) if k % 4}
    write_table(tmp_path / "c.csv", "read_id,condition", sorted(cond.items()))
    run([escpod, "annotate", pod5_file, "--from", tmp_path / "c.csv", "--name", "condition"])
    sidecar = {r: ref.Call(ref.normalize_label(l), None, "sidecar") for r, (l, c) in calls.items()}
    exp, _ = assert_demux(escpod, drna_bam, ["--pod5", pod5_file], sidecar, tmp_path / "a")
    assert all(t.ec is None and t.eh in (None, "sidecar") for _, t in exp.records)
    by_cond = {r: ref.Call(l, None, "sidecar") for r, l in cond.items()}
    exp, _ = assert_demux(escpod, drna_bam, ["--pod5", pod5_file, "--label-column", "condition"], by_cond,
                          tmp_path / "b")
    assert {t.BC for _, t in exp.records} == {"ctrl", "treated", "unclassified"}


# ---- Ctrl-C -----------------------------------------------------------------------------------


def test_ctrl_c_while_writing_exits_130_and_leaves_nothing(escpod, drna_bam, tmp_path):
    """SIGINT once the outputs are being written (their staging files exist): exit 130, no
    output and no staging file left, no crash (the thread pool outlives the files that use it)."""
    import signal
    import time

    big = tmp_path / "big.bam"
    with pysam.AlignmentFile(str(drna_bam)) as src, pysam.AlignmentFile(str(big), "wb", template=src) as out:
        records = list(src)
        for i in range(400):
            for r in records:
                r.query_name = str(uuid.UUID(int=random.Random(i * 1000 + len(r.query_name)).getrandbits(128)))
                out.write(r)
    calls = tmp_path / "calls.csv"
    calls.write_text("read_id,barcode\n")
    out_dir = tmp_path / "per"
    p = subprocess.Popen([str(escpod), "bam-demux", "-b", str(big), "--classifications", str(calls),
                          "-o", str(tmp_path / "all.bam"), "-d", str(out_dir), "-t", "2"],
                         stderr=subprocess.PIPE, text=True)
    # Wait for the writing pass (a staging file in the output folder), not for a time.
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline and p.poll() is None and not any(out_dir.glob(".*")):
        time.sleep(0.01)
    assert p.poll() is None, "finished before it could be interrupted: make the input bigger"
    p.send_signal(signal.SIGINT)
    _, err = p.communicate(timeout=120)
    assert p.returncode == 130, err
    assert not (tmp_path / "all.bam").exists()
    assert not list(tmp_path.glob(".*")) and not list(out_dir.iterdir()), list(out_dir.iterdir())


def test_flags_that_would_be_ignored_are_refused(escpod, drna_bam, drna_ids, tmp_path):
    calls = tmp_path / "calls.csv"
    calls.write_text("read_id,barcode\n" + "".join(f"{i},BC01\n" for i in sorted(drna_ids)))
    for extra in (["--prefix", "x"], ["--memory-mib", "8"], ["--reference", calls]):
        r = bam_demux(escpod, drna_bam, "--classifications", calls, "-o", tmp_path / "o.bam", *extra, check=False)
        assert r.returncode == 2 and str(extra[0]) in r.stderr, (extra, r.stderr)
        assert not (tmp_path / "o.bam").exists()
