"""escpod bam-filter against a plain pysam check of the same criteria, its output read by the
official pod5 package: exactly the expected reads, every field and the signal equal to the
input's, stored signal bytes copied as they are."""
import re
import shutil
import uuid

import pod5
import pysam
import pytest

from conftest import run
from pod5_compare import assert_rows_equal, official_rows

ALA = "tRNA-Ala-AGC-1-1-uncharged"
TRP = "tRNA-Trp-CCA-1-1-uncharged"
MET = "tRNA-iMet-CAT-1-1-uncharged"


@pytest.fixture(scope="module")
def drna(shared_data):
    d = shared_data / "escapepod/drna"
    for name in ("yeast_trna_reads.pod5", "yeast_trna_mappings.bam", "yeast_trna_mappings.bam.bai"):
        assert (d / name).is_file(), f"shared test data missing: {d / name}"
    return d


@pytest.fixture(scope="module")
def pod5_file(drna):
    return drna / "yeast_trna_reads.pod5"


@pytest.fixture(scope="module")
def input_rows(pod5_file):
    return official_rows(pod5_file)


def fetch_args(region):
    """samtools region text (1-based inclusive; "chr:beg" runs to the end) as pysam arguments."""
    m = re.fullmatch(r"(.*):(\d+)(?:-(\d+))?", region)
    if not m:
        return {"contig": region}
    args = {"contig": m.group(1), "start": int(m.group(2)) - 1}
    if m.group(3):
        args["stop"] = int(m.group(3))
    return args


def expected_ids(bam, mapped=False, region=None, quality=None):
    """The reads `samtools view [-F4] [-q Q] BAM [REGION]` names, split reads by their parent."""
    ids = set()
    with pysam.AlignmentFile(str(bam), "rb") as f:
        records = f.fetch(**fetch_args(region)) if region else f.fetch(until_eof=True)
        for rec in records:
            if mapped and rec.is_unmapped:
                continue
            if quality is not None and rec.mapping_quality < quality:
                continue
            name = rec.get_tag("pi") if rec.has_tag("pi") else rec.query_name
            ids.update(name.split(";"))
    return ids


def stored_bytes(path):
    with pod5.Reader(path) as r:
        return {str(x.read_id): x.byte_count for x in r.reads()}


def bam_filter(escpod, bam, out, inputs, *args, check=True):
    return run([escpod, "bam-filter", "-b", bam, "-o", out, *args, *inputs], check=check)


def assert_output(out, want, input_rows, input_path):
    got = official_rows(out)
    assert set(got) == want
    assert_rows_equal({rid: input_rows[rid] for rid in want}, got, f"bam-filter {out.name}")
    src = stored_bytes(input_path)
    assert all(src[rid] == n for rid, n in stored_bytes(out).items())


CASES = [
    [],
    ["--mapped"],
    ["--region", ALA],
    ["--region", f"{TRP}:30-60"],
    ["--region", f"{MET}:1-20"],
    ["--region", f"{ALA}:100"],
    ["--region", f"{{{ALA}}}:1-140"],
    ["--quality", "10"],
    ["--quality", "11"],
    ["--quality", "15"],
    ["--quality", "20"],
    ["--quality", "46"],
    ["--quality", "60"],
    ["--region", ALA, "--quality", "15"],
    ["--mapped", "--region", f"{TRP}:50-90", "--quality", "12"],
]


def criteria(args):
    kw = {}
    i = 0
    while i < len(args):
        if args[i] == "--mapped":
            kw["mapped"] = True
            i += 1
        else:
            kw[args[i].lstrip("-")] = int(args[i + 1]) if args[i] == "--quality" else args[i + 1]
            i += 2
    return kw


@pytest.mark.parametrize("args", CASES, ids=lambda a: " ".join(a) or "no-criterion")
def test_real_bam_matches_pysam(escpod, drna, pod5_file, input_rows, tmp_path, args):
    bam = drna / "yeast_trna_mappings.bam"
    want = expected_ids(bam, **{k: v.replace("{", "").replace("}", "") if k == "region" else v
                                for k, v in criteria(args).items()})
    out = tmp_path / "out.pod5"
    r = bam_filter(escpod, bam, out, [pod5_file], *args)
    assert "in no POD5 input" not in r.stderr
    assert_output(out, want, input_rows, pod5_file)
    if args in ([], ["--mapped"]):
        assert len(want) == 180
    if "--quality" in args and args[-1] in ("46", "60"):
        assert len(want) == (3 if args[-1] == "46" else 0)


@pytest.fixture(scope="module")
def mixed_bam(tmp_path_factory, drna):
    """The real BAM with a third of its records unmapped (left in place, as aligners place an
    unmapped mate), every fifth record also present as a split read (fresh name, pi tag), and two
    reads that are in no POD5; coordinate order kept, no index."""
    d = tmp_path_factory.mktemp("mixed")
    path = d / "mixed.bam"
    absent = [str(uuid.UUID(int=k + 1, version=4)) for k in range(2)]
    with pysam.AlignmentFile(str(drna / "yeast_trna_mappings.bam"), "rb") as src, \
         pysam.AlignmentFile(str(path), "wb", template=src) as dst:
        for k, rec in enumerate(src.fetch(until_eof=True)):
            if k % 5 == 0:
                split = pysam.AlignedSegment.fromstring(rec.to_string(), src.header)
                split.query_name = str(uuid.uuid4())
                split.set_tag("pi", rec.query_name, "Z")
                split.mapping_quality = 40
            else:
                split = None
            if k % 3 == 0:
                rec.is_unmapped = True
                rec.mapping_quality = 0
            dst.write(rec)
            if split is not None:
                dst.write(split)
        for rid in absent:
            a = pysam.AlignedSegment(dst.header)
            a.query_name = rid
            a.flag = 4
            a.reference_id = -1
            a.reference_start = -1
            dst.write(a)
    return path, absent


MIXED_CASES = [
    [],
    ["--mapped"],
    ["--quality", "40"],
    ["--mapped", "--quality", "12"],
    ["--region", f"{ALA}:10-40"],
    ["--mapped", "--region", TRP],
]


@pytest.mark.parametrize("args", MIXED_CASES, ids=lambda a: " ".join(a) or "no-criterion")
def test_split_and_unmapped_reads_match_pysam(escpod, mixed_bam, pod5_file, input_rows, tmp_path,
                                              args):
    src, absent = mixed_bam
    bam = tmp_path / "m.bam"  # a fresh copy without an index for every case
    shutil.copy(src, bam)
    check = tmp_path / "check.bam"  # pysam's copy, indexed by pysam for its own region queries
    shutil.copy(src, check)
    pysam.index(str(check))
    want = expected_ids(check, **criteria(args))
    out = tmp_path / "out.pod5"
    missing = tmp_path / "missing.txt"
    r = bam_filter(escpod, bam, out, [pod5_file], *args, "--missing-ids", missing)
    want_absent = want & set(absent)
    assert_output(out, want - want_absent, input_rows, pod5_file)
    assert sorted(missing.read_text().split()) == sorted(want_absent)
    if want_absent:
        assert f"{len(want_absent)} of {len(want)} selected reads are in no POD5 input" in r.stderr
    if not args:
        assert want_absent == set(absent) and len(want) == 182
    if args == ["--mapped"]:
        # Every read with a split record stays selected through it even when its own is unmapped.
        assert 120 < len(want) < 180


def test_missing_index_is_built_atomically(escpod, drna, pod5_file, input_rows, tmp_path):
    bam = tmp_path / "copy.bam"
    shutil.copy(drna / "yeast_trna_mappings.bam", bam)
    out = tmp_path / "out.pod5"
    r = bam_filter(escpod, bam, out, [pod5_file], "--region", f"{ALA}:20-30")
    assert "indexed" in r.stderr
    # Exactly the BAM, its index and the output: no staging file left behind.
    assert sorted(p.name for p in tmp_path.iterdir()) == ["copy.bam", "copy.bam.bai", "out.pod5"]
    # The index is a valid BAI that pysam uses, and selects what the shipped index selects.
    want = expected_ids(drna / "yeast_trna_mappings.bam", region=f"{ALA}:20-30")
    assert expected_ids(bam, region=f"{ALA}:20-30") == want
    assert_output(out, want, input_rows, pod5_file)
    # The second run finds the index and writes none.
    r = bam_filter(escpod, bam, tmp_path / "again.pod5", [pod5_file], "--region", TRP, "-q")
    assert r.stderr == ""

    # --no-index-build scans instead, leaving the folder as it was.
    d2 = tmp_path / "noidx"
    d2.mkdir()
    shutil.copy(drna / "yeast_trna_mappings.bam", d2 / "x.bam")
    bam_filter(escpod, d2 / "x.bam", d2 / "o.pod5", [pod5_file], "--region", f"{ALA}:20-30",
               "--no-index-build")
    assert sorted(p.name for p in d2.iterdir()) == ["o.pod5", "x.bam"]
    assert set(official_rows(d2 / "o.pod5")) == want


@pytest.mark.parametrize("args,code,message", [
    (["--region", "chrNope:1-10"], 2, "no such contig"),
    (["--region", f"{ALA}:x-y"], 2, "not a region"),
    (["--region", f"{ALA}:50-10"], 2, "not a region"),
    (["--quality", "300"], 2, "--quality"),
])
def test_bad_criteria_fail_without_output(escpod, drna, pod5_file, tmp_path, args, code, message):
    out = tmp_path / "out.pod5"
    r = bam_filter(escpod, drna / "yeast_trna_mappings.bam", out, [pod5_file], *args, check=False)
    assert r.returncode == code, r.stderr
    assert message in r.stderr
    assert list(tmp_path.iterdir()) == []


def test_bad_bam_files_fail_naming_the_file(escpod, drna, pod5_file, tmp_path):
    out = tmp_path / "out.pod5"
    r = bam_filter(escpod, tmp_path / "absent.bam", out, [pod5_file], check=False)
    assert r.returncode == 1 and "absent.bam does not exist" in r.stderr
    r = bam_filter(escpod, pod5_file, out, [pod5_file], check=False)
    assert r.returncode == 1 and "yeast_trna_reads.pod5 is not a BAM file" in r.stderr
    data = (drna / "yeast_trna_mappings.bam").read_bytes()
    cut = tmp_path / "cut.bam"
    cut.write_bytes(data[:60000])
    flipped = tmp_path / "flipped.bam"
    flipped.write_bytes(data[:60000] + bytes(b ^ 0x5A for b in data[60000:60040]) + data[60040:])
    for threads in ("1", "2"):
        r = bam_filter(escpod, cut, out, [pod5_file], "-t", threads, check=False)
        assert r.returncode == 1 and "cut.bam: truncated BAM" in r.stderr
        r = bam_filter(escpod, flipped, out, [pod5_file], "-t", threads, check=False)
        assert r.returncode == 1 and "flipped.bam: damaged or truncated BAM" in r.stderr
    assert not out.exists()
    r = run([escpod, "bam-filter", "-o", out, pod5_file], check=False)
    assert r.returncode == 2 and "--bam" in r.stderr
