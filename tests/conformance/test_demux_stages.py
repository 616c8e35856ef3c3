"""escpod demux detect / fingerprint / classify: the stages chained give the fused pipeline's
calls, write one boundaries row per input read, are identical for any thread count, and follow
the CSV reader rules of escapepod-behaviour.md 2.1-2.3."""
import csv
import gzip
import re

import pytest

from conftest import run

FAILED_BEFORE_CLASSIFIER = ("read has no signal", "signal could not be decoded",
                            "boundary detection failed", "no fingerprint")


@pytest.fixture(scope="module")
def wdx4(shared_data):
    return shared_data / "warpdemux/WDX4_rna004_v1_0.json"


@pytest.fixture(scope="module")
def sample_files(shared_data):
    files = sorted((shared_data / "warpdemux/sample").glob("*.pod5"))
    assert files, f"no sample POD5 files under {shared_data / 'warpdemux/sample'}"
    return files


def read_csv(path):
    with open(path, newline="") as f:
        return list(csv.DictReader(f))


def input_ids(escpod, files):
    ids = []
    for f in files:
        ids += run([escpod, "view", f, "--include", "read_id", "--no-header"]).stdout.split()
    return ids


def run_stages(escpod, model, files, out, threads="2", probabilities=False):
    out.mkdir(parents=True, exist_ok=True)
    b, fp, calls = out / "boundaries.csv", out / "fp.csv", out / "calls.csv"
    det = run([escpod, "demux", "detect", *files, "--model", model, "-o", b, "-t", threads])
    fpr = run([escpod, "demux", "fingerprint", *files, "--boundaries", b, "--model", model, "-o", fp,
               "-t", threads])
    extra = ["--probabilities"] if probabilities else []
    cls = run([escpod, "demux", "classify", fp, "--model", model, "-o", calls, "-t", threads, *extra])
    return (b, fp, calls), (det.stderr, fpr.stderr, cls.stderr)


@pytest.fixture(scope="module")
def chained(escpod, wdx4, sample_files, tmp_path_factory):
    out = tmp_path_factory.mktemp("stages")
    paths, logs = run_stages(escpod, wdx4, sample_files, out, probabilities=True)
    fused = out / "fused.csv"
    run([escpod, "demux", *sample_files, "--model", wdx4, "--classifications", fused, "-t", "2"])
    return paths, logs, fused


def test_detect_writes_one_row_per_input_read_in_input_order(escpod, sample_files, chained):
    (b, _, _), _, _ = chained
    with open(b) as f:
        header = f.readline().strip()
    assert header == "read_id,num_samples,adapter_start,adapter_end,polya_end,detector,reason"
    rows = read_csv(b)
    assert [r["read_id"] for r in rows] == input_ids(escpod, sample_files)
    for r in rows:
        assert re.fullmatch(r"[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}", r["read_id"])
        if r["reason"]:
            assert (r["adapter_start"], r["adapter_end"]) == ("0", "0"), r
        else:
            assert 0 <= int(r["adapter_start"]) < int(r["adapter_end"]) <= int(r["num_samples"]), r
            assert r["detector"] in ("cnn", "llr_short", "llr"), r


def test_boundaries_agree_with_the_fused_pipeline(chained):
    (b, _, _), _, fused = chained
    fused_rows = {r["read_id"]: r for r in read_csv(fused)}
    rows = read_csv(b)
    assert len(rows) == len(fused_rows)
    for r in rows:
        f = fused_rows[r["read_id"]]
        if r["reason"]:
            assert f["barcode"] == "unclassified" and f["reason"].startswith(r["reason"][:20]), (r, f)
        else:
            assert (r["adapter_start"], r["adapter_end"], r["detector"]) == \
                (f["adapter_start"], f["adapter_end"], f["detector"]), (r, f)


def test_fingerprint_table_format_and_failures(chained):
    (b, fp, _), (_, fp_log, _), fused = chained
    with open(fp) as f:
        header = f.readline().strip().split(",")
    assert header == ["read_id"] + [f"fp_{k}" for k in range(25)]
    rows = read_csv(fp)
    for r in rows[:50]:
        for k in range(25):
            assert re.fullmatch(r"-?\d+\.\d{6}", r[f"fp_{k}"]), r
    # Exactly the reads the fused pipeline got a fingerprint for.
    expected = [r["read_id"] for r in read_csv(fused)
                if not r["reason"].startswith(FAILED_BEFORE_CLASSIFIER)]
    assert [r["read_id"] for r in rows] == expected
    assert "fingerprinted" in fp_log


def test_chained_stages_give_the_fused_calls(chained):
    (_, _, calls), (_, _, cls_log), fused = chained
    with open(calls) as f:
        header = f.readline().strip().split(",")
    assert header[:4] == ["read_id", "predicted_barcode", "confidence", "is_confident"]
    assert all(re.fullmatch(r"p(\d\d|-1)", c) for c in header[4:]) and len(header) > 5
    stage = {r["read_id"]: r for r in read_csv(calls)}
    fused_rows = read_csv(fused)
    both = 0
    for f in fused_rows:
        s = stage.get(f["read_id"])
        if s is not None:
            assert re.fullmatch(r"BC\d\d|unclassified", s["predicted_barcode"]), s
            assert s["is_confident"] == ("true" if s["predicted_barcode"] != "unclassified" else "false")
        if s is None or f["barcode"] == "unclassified" or s["predicted_barcode"] == "unclassified":
            continue
        both += 1
        assert s["predicted_barcode"] == f["barcode"], (s, f)
        assert abs(float(s["confidence"]) - float(f["confidence"])) < 1e-3, (s, f)
    n_fused = sum(1 for f in fused_rows if f["barcode"] != "unclassified")
    assert n_fused > 0 and both >= 0.99 * n_fused, f"{both} of {n_fused} fused calls reproduced"
    assert "reads/s" in cls_log


def test_stage_outputs_identical_for_1_and_2_threads(escpod, wdx4, sample_files, tmp_path):
    files = sample_files[:2]
    one, _ = run_stages(escpod, wdx4, files, tmp_path / "t1", threads="1")
    two, _ = run_stages(escpod, wdx4, files, tmp_path / "t2", threads="2")
    for a, b in zip(one, two):
        assert a.read_bytes() == b.read_bytes(), f"{a.name} differs between 1 and 2 threads"


def test_boundaries_reader_rules(escpod, wdx4, sample_files, chained, tmp_path):
    """'#' header, comment lines, float positions, gzip, and rows without an adapter dropped."""
    (b, fp, _), _, _ = chained
    rows = read_csv(b)
    ok = [r for r in rows if not r["reason"]][:20]
    lines = ["#read_id,signal_len,adapter_start,adapter_end", "# a comment"]
    for r in ok:
        lines.append(f"{r['read_id'].replace('-', '').upper()},{r['num_samples']},"
                     f"{r['adapter_start']}.0,{r['adapter_end']}.9")
    lines.append(f"{rows[0]['read_id']},100,50,50")  # adapter_end <= adapter_start: dropped
    alt = tmp_path / "alt.csv.gz"
    with gzip.open(alt, "wt") as f:
        f.write("\n".join(lines) + "\n")
    out = tmp_path / "fp_alt.csv"
    run([escpod, "demux", "fingerprint", *sample_files, "--boundaries", alt, "--model", wdx4, "-o", out])
    want = {r["read_id"]: r for r in read_csv(fp)}
    got = read_csv(out)
    assert got and {r["read_id"] for r in got} <= {r["read_id"] for r in ok}
    for r in got:
        assert r == want[r["read_id"]]


def test_classify_errors_and_empty_table(escpod, wdx4, tmp_path):
    bad = tmp_path / "bad.csv"
    bad.write_text("read_id,fp_0,fp_1\n00000000-0000-0000-0000-000000000001,0.1,0.2\n")
    r = run([escpod, "demux", "classify", bad, "--model", wdx4, "-o", tmp_path / "c.csv"], check=False)
    assert r.returncode != 0 and "fp_2" in r.stderr
    assert not (tmp_path / "c.csv").exists()
    empty = tmp_path / "empty.csv"
    empty.write_text("read_id," + ",".join(f"fp_{k}" for k in range(25)) + ",barcode\n")
    run([escpod, "demux", "classify", empty, "--model", wdx4, "-o", tmp_path / "e.csv"])
    assert (tmp_path / "e.csv").read_text().startswith("read_id,predicted_barcode,confidence,is_confident\n")


def test_outputs_are_not_overwritten_without_force(escpod, wdx4, sample_files, tmp_path):
    out = tmp_path / "b.csv"
    out.write_text("keep\n")
    r = run([escpod, "demux", "detect", sample_files[0], "--model", wdx4, "-o", out], check=False)
    assert r.returncode != 0 and out.read_text() == "keep\n"
    run([escpod, "demux", "detect", sample_files[0], "--model", wdx4, "-o", out, "-f"])
    assert out.read_text().startswith("read_id,")
