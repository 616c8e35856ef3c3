"""escpod demux detect / fingerprint / classify: the stages chained give the fused pipeline's
calls, write one boundaries row per input read, are identical for any thread count, and follow
the CSV reader rules of docs/formats.md §3."""
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


def run_stages(escpod, model, files, out, threads="2", fingerprints="fp.csv", flags=()):
    out.mkdir(parents=True, exist_ok=True)
    b, fp, calls = out / "boundaries.csv", out / fingerprints, out / "calls.csv"
    det = run([escpod, "demux", "detect", *files, "--model", model, "-o", b, "-t", threads, *flags])
    fpr = run([escpod, "demux", "fingerprint", *files, "--boundaries", b, "--model", model, "-o", fp,
               "-t", threads, *flags])
    cls = run([escpod, "demux", "classify", fp, "--model", model, "-o", calls, "-t", threads])
    return (b, fp, calls), (det.stderr, fpr.stderr, cls.stderr)


@pytest.fixture(scope="module")
def chained(escpod, wdx4, sample_files, tmp_path_factory):
    out = tmp_path_factory.mktemp("stages")
    paths, logs = run_stages(escpod, wdx4, sample_files, out)
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
    with open(fused) as f:
        fused_header = f.readline().strip().split(",")
    # One classifications table: the fused run's header, the head's probabilities after the
    # common columns.
    assert header == fused_header
    assert header[:7] == ["read_id", "barcode", "confidence", "adapter_start", "adapter_end", "detector", "reason"]
    assert all(re.fullmatch(r"p(\d\d|-1)", c) for c in header[7:]) and len(header) > 8
    stage = {r["read_id"]: r for r in read_csv(calls)}
    fused_rows = read_csv(fused)
    both = 0
    for f in fused_rows:
        s = stage.get(f["read_id"])
        if s is not None:
            assert re.fullmatch(r"BC\d\d|unclassified", s["barcode"]), s
            assert (s["reason"] == "") == (s["barcode"] != "unclassified"), s
            assert (s["adapter_start"], s["adapter_end"], s["detector"]) == ("", "", ""), s
        if s is None or f["barcode"] == "unclassified" or s["barcode"] == "unclassified":
            continue
        both += 1
        assert s["barcode"] == f["barcode"], (s, f)
        assert abs(float(s["confidence"]) - float(f["confidence"])) < 1e-3, (s, f)
    n_fused = sum(1 for f in fused_rows if f["barcode"] != "unclassified")
    assert n_fused > 0 and both >= 0.99 * n_fused, f"{both} of {n_fused} fused calls reproduced"
    assert "reads/s" in cls_log


def test_stages_through_parquet_give_the_fused_rows_cell_for_cell(escpod, wdx4, sample_files, chained, tmp_path):
    """Stages are the fused run cut at its tables: with a Parquet fingerprint table (every bit of
    each feature kept) every classified-stage row equals the fused run's row in every cell but the
    boundaries the classify stage does not see, for every read that reached the classifier."""
    _, _, fused = chained
    (_, _, calls), _ = run_stages(escpod, wdx4, sample_files, tmp_path, fingerprints="fp.parquet")
    fused_rows = {r["read_id"]: r for r in read_csv(fused)}
    rows = read_csv(calls)
    reached = [f for f in fused_rows.values() if not f["reason"].startswith(FAILED_BEFORE_CLASSIFIER)]
    assert len(rows) == len(reached) > 500
    for s in rows:
        f = dict(fused_rows[s["read_id"]], adapter_start="", adapter_end="", detector="")
        assert s == f, (s, f)
    assert sum(s["barcode"] != "unclassified" for s in rows) > 300


@pytest.mark.parametrize("model", ["escapepod/gbm/model.json", "seqtagger/b04_RNA004"])
def test_every_model_the_fused_run_takes_each_stage_takes_where_its_table_applies(escpod, shared_data, tmp_path, model):
    """A GBM model (no signal-processing block: the RNA004 defaults, as in the fused run) runs every
    stage; a CRF model folder runs detect with the fused run's boundaries, and the fingerprint and
    classify stages say which stage its head needs instead of failing to parse it."""
    path = shared_data / model
    reads = shared_data / "escapepod/drna/yeast_trna_reads.pod5"
    fused = tmp_path / "fused.csv"
    run([escpod, "demux", reads, "--model", path, "--method", "llr", "--classifications", fused])
    b = tmp_path / "b.csv"
    run([escpod, "demux", "detect", reads, "--model", path, "--method", "llr", "-o", b])
    fused_rows = {r["read_id"]: r for r in read_csv(fused)}
    for r in read_csv(b):
        if not r["reason"]:
            f = fused_rows[r["read_id"]]
            assert (r["adapter_start"], r["adapter_end"]) == (f["adapter_start"], f["adapter_end"]), (r, f)
    fp = tmp_path / "fp.parquet"
    fpr = run([escpod, "demux", "fingerprint", reads, "--boundaries", b, "--model", path, "--method", "llr",
               "-o", fp], check=False)
    if model.startswith("seqtagger"):
        assert fpr.returncode == 1 and "demux basecall" in fpr.stderr and "not valid JSON" not in fpr.stderr, fpr
        cls = run([escpod, "demux", "classify", tmp_path / "none.csv", "--model", path, "-o", tmp_path / "c.csv"],
                  check=False)
        assert cls.returncode == 1 and "demux basecall" in cls.stderr, cls
        return
    assert fpr.returncode == 0, fpr.stderr
    calls = tmp_path / "calls.csv"
    run([escpod, "demux", "classify", fp, "--model", path, "-o", calls])
    rows = read_csv(calls)
    assert rows
    for s in rows:  # the GBM test model takes 6 features: every read unclassified, the fused reason
        f = fused_rows[s["read_id"]]
        assert s["barcode"] == f["barcode"] == "unclassified" and s["reason"] == f["reason"], (s, f)
        assert "GBM model expects 6 features, the fingerprint has 25" in s["reason"]


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
    assert (tmp_path / "e.csv").read_text() == \
        "read_id,barcode,confidence,adapter_start,adapter_end,detector,reason,p03,p04,p05,p07,p-1\n"


def test_outputs_are_not_overwritten_without_force(escpod, wdx4, sample_files, tmp_path):
    out = tmp_path / "b.csv"
    out.write_text("keep\n")
    r = run([escpod, "demux", "detect", sample_files[0], "--model", wdx4, "-o", out], check=False)
    assert r.returncode != 0 and out.read_text() == "keep\n"
    run([escpod, "demux", "detect", sample_files[0], "--model", wdx4, "-o", out, "-f"])
    assert out.read_text().startswith("read_id,")


def test_parquet_fingerprints_with_dwell(escpod, wdx4, sample_files, chained, tmp_path):
    """The .parquet table holds what the CSV holds (full precision, zstd, float64 columns) and
    --emit-dwell appends each fingerprint event's length in samples."""
    import pyarrow.parquet as pq

    (b, fp_csv, _), _, fused = chained
    pq_path, dwell_csv = tmp_path / "fp.parquet", tmp_path / "fp_dwell.csv"
    for out in (pq_path, dwell_csv):
        run([escpod, "demux", "fingerprint", *sample_files, "--boundaries", b, "--model", wdx4,
             "--emit-dwell", "-o", out, "-t", "2"])
    table = pq.read_table(pq_path)
    names = ["read_id"] + [f"fp_{k}" for k in range(25)] + [f"dwell_{k}" for k in range(25)]
    assert table.column_names == names
    assert str(table.schema.field("read_id").type) == "string"
    assert all(str(table.schema.field(n).type) == "double" for n in names[1:])
    meta = pq.ParquetFile(pq_path).metadata
    assert meta.row_group(0).column(1).compression == "ZSTD"
    csv_rows = read_csv(fp_csv)
    dwell_rows = read_csv(dwell_csv)
    assert table.num_rows == len(csv_rows) == len(dwell_rows) > 100
    cols = table.to_pydict()
    assert cols["read_id"] == [r["read_id"] for r in csv_rows]
    for i in range(0, len(csv_rows), 7):
        for k in range(25):
            # CSV has 6 decimals of the same double; the fp columns of both runs agree.
            assert abs(cols[f"fp_{k}"][i] - float(csv_rows[i][f"fp_{k}"])) <= 5.1e-7
            assert dwell_rows[i][f"fp_{k}"] == csv_rows[i][f"fp_{k}"]
            d = cols[f"dwell_{k}"][i]
            assert d == int(d) and d >= 1, (i, k, d)
            assert float(dwell_rows[i][f"dwell_{k}"]) == d
    # Event lengths are bounded by the fingerprint window (adapter + 2 x 100 samples of padding).
    bounds = {r["read_id"]: r for r in read_csv(b)}
    for i in range(0, len(csv_rows), 11):
        r = bounds[cols["read_id"][i]]
        total = sum(cols[f"dwell_{k}"][i] for k in range(25))
        assert total <= int(r["adapter_end"]) - int(r["adapter_start"]) + 200

    # Classifying the Parquet table (full-precision fingerprints) gives the fused calls exactly.
    calls = tmp_path / "calls.csv"
    run([escpod, "demux", "classify", pq_path, "--model", wdx4, "-o", calls])
    fused_rows = {r["read_id"]: r for r in read_csv(fused)}
    rows = read_csv(calls)
    assert len(rows) == table.num_rows
    for s in rows:
        f = fused_rows[s["read_id"]]
        assert s["barcode"] == f["barcode"], (s, f)
        assert s["confidence"] == f["confidence"], (s, f)


def test_classify_reads_parquet_written_by_others(escpod, wdx4, chained, tmp_path):
    """LargeUtf8 ids, float32 features, a barcode column, several row groups (as polars or
    pandas may write them) are read; a missing feature column is a clear error."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    (_, fp_csv, calls_csv), _, _ = chained
    rows = read_csv(fp_csv)
    data = {"barcode": pa.array(["x"] * len(rows)),
            "read_id": pa.array([r["read_id"] for r in rows], type=pa.large_string())}
    for k in range(25):
        data[f"fp_{k}"] = pa.array([float(r[f"fp_{k}"]) for r in rows], type=pa.float64())
    theirs = tmp_path / "theirs.parquet"
    pq.write_table(pa.table(data), theirs, row_group_size=37)
    out = tmp_path / "calls.csv"
    run([escpod, "demux", "classify", theirs, "--model", wdx4, "-o", out])
    # The same values as the CSV table: the same calls as classifying the CSV.
    mine = read_csv(calls_csv)
    got = read_csv(out)
    assert [r["read_id"] for r in got] == [r["read_id"] for r in mine]
    assert [(r["barcode"], r["confidence"]) for r in got] == \
        [(r["barcode"], r["confidence"]) for r in mine]

    data32 = dict(data)
    for k in range(25):
        data32[f"fp_{k}"] = data[f"fp_{k}"].cast(pa.float32())
    f32 = tmp_path / "f32.parquet"
    pq.write_table(pa.table(data32), f32)
    run([escpod, "demux", "classify", f32, "--model", wdx4, "-o", tmp_path / "c32.csv"])
    assert len(read_csv(tmp_path / "c32.csv")) == len(rows)

    del data["fp_24"]
    short = tmp_path / "short.parquet"
    pq.write_table(pa.table(data), short)
    r = run([escpod, "demux", "classify", short, "--model", wdx4, "-o", tmp_path / "x.csv"], check=False)
    assert r.returncode != 0 and "fp_24" in r.stderr and "short.parquet" in r.stderr, r.stderr
    assert not (tmp_path / "x.csv").exists()
    junk = tmp_path / "junk.parquet"
    junk.write_bytes(b"not parquet at all")
    r = run([escpod, "demux", "classify", junk, "--model", wdx4, "-o", tmp_path / "x.csv"], check=False)
    assert r.returncode != 0 and "junk.parquet" in r.stderr, r.stderr


def test_detect_emit_llr_delta(escpod, wdx4, sample_files, chained, tmp_path):
    """--emit-llr-delta keeps the CNN's columns and appends the LLR detector's adapter (the same
    as a --method llr run gives) and cnn_end - llr_end, empty unless both ends are found."""
    (b, _, _), _, _ = chained
    delta, llr = tmp_path / "delta.csv", tmp_path / "llr.csv"
    r = run([escpod, "demux", "detect", *sample_files, "--model", wdx4, "--emit-llr-delta",
             "-o", delta, "-t", "2"])
    assert "CNN - LLR adapter end" in r.stderr
    run([escpod, "demux", "detect", *sample_files, "--model", wdx4, "--method", "llr", "-o", llr])
    with open(delta) as f:
        header = f.readline().strip().split(",")
    base = read_csv(b)
    assert header == list(base[0].keys()) + ["llr_adapter_start", "llr_adapter_end", "end_delta"]
    rows = read_csv(delta)
    llr_rows = read_csv(llr)
    assert len(rows) == len(base) == len(llr_rows)
    n_both = 0
    for d, cnn, l in zip(rows, base, llr_rows):
        assert all(d[k] == cnn[k] for k in cnn), (d, cnn)
        assert d["read_id"] == l["read_id"]
        ok = l["reason"] == ""
        assert d["llr_adapter_end"] == (l["adapter_end"] if ok else "0"), (d, l)
        assert d["llr_adapter_start"] == (l["adapter_start"] if ok else "0"), (d, l)
        cnn_end, llr_end = int(d["adapter_end"]), int(d["llr_adapter_end"])
        if cnn_end > 0 and llr_end > 0:
            assert int(d["end_delta"]) == cnn_end - llr_end
            n_both += 1
        else:
            assert d["end_delta"] == ""
    assert n_both > 100
    r = run([escpod, "demux", "detect", *sample_files, "--model", wdx4, "--method", "llr",
             "--emit-llr-delta", "-o", tmp_path / "x.csv"], check=False)
    assert r.returncode != 0 and "--emit-llr-delta" in r.stderr
    assert not (tmp_path / "x.csv").exists()


def test_damaged_parquet_is_an_error_or_a_table_never_a_crash(escpod, wdx4, sample_files, chained,
                                                              tmp_path):
    """Truncated and bit-flipped Parquet fingerprint tables: a clear error naming the file, or
    (when a flip only changes values) a complete calls table; never a crash or a sanitizer report."""
    import random

    (b, _, _), _, _ = chained
    good = tmp_path / "fp.parquet"
    run([escpod, "demux", "fingerprint", *sample_files, "--boundaries", b, "--model", wdx4,
         "-o", good])
    data = good.read_bytes()
    rng = random.Random(3)
    cases = [data[:n] for n in (0, 4, 100, len(data) // 2, len(data) - 9, len(data) - 1)]
    for _ in range(20):
        flipped = bytearray(data)
        for _ in range(rng.randint(1, 8)):
            i = rng.randrange(len(flipped))
            flipped[i] ^= 1 << rng.randrange(8)
        cases.append(bytes(flipped))
    n_errors = 0
    for k, case in enumerate(cases):
        damaged = tmp_path / "damaged.parquet"
        damaged.write_bytes(case)
        out = tmp_path / "calls.csv"
        out.unlink(missing_ok=True)
        r = run([escpod, "demux", "classify", damaged, "--model", wdx4, "-o", out], check=False)
        assert r.returncode in (0, 1, 2), (k, r.returncode, r.stderr[-2000:])
        assert "Sanitizer" not in r.stderr and "runtime error" not in r.stderr, (k, r.stderr[-2000:])
        if r.returncode == 0:
            assert out.read_text().startswith("read_id,barcode,")
        else:
            n_errors += 1
            assert "damaged.parquet" in r.stderr, (k, r.stderr)
            assert not out.exists()
    assert n_errors >= 6  # every truncation at least


def test_dtw_precision_float64_matches_float32_calls(escpod, wdx4, sample_files, chained, tmp_path):
    """--dtw-precision float64 (dtaidistance's distances exactly) and the float32 default give
    the same calls, with probabilities within the golden tolerance (2e-6, plus the CSV's 1e-6
    rounding), in the fused pipeline and in `demux classify`; a bad value is refused."""
    (_, fp, calls32), _, fused32 = chained
    fused64 = tmp_path / "fused64.csv"
    run([escpod, "demux", *sample_files, "--model", wdx4, "--classifications", fused64, "-t", "2",
         "--dtw-precision", "float64"])
    calls64 = tmp_path / "calls64.csv"
    run([escpod, "demux", "classify", fp, "--model", wdx4, "-o", calls64,
         "--dtw-precision", "float64"])
    for a_path, b_path, label in ((fused32, fused64, "barcode"), (calls32, calls64, "barcode")):
        a, b = read_csv(a_path), read_csv(b_path)
        assert [r["read_id"] for r in a] == [r["read_id"] for r in b]
        assert [r[label] for r in a] == [r[label] for r in b], a_path.name
        n_prob = 0
        for x, y in zip(a, b):
            for col in (c for c in x if re.fullmatch(r"p(\d\d|-1)", c)):
                if x[col] and y[col]:
                    assert abs(float(x[col]) - float(y[col])) <= 3.01e-6, (col, x, y)
                    n_prob += 1
        assert n_prob > 0, f"no probabilities compared in {a_path.name}"
    r = run([escpod, "demux", "classify", fp, "--model", wdx4, "-o", tmp_path / "x.csv",
             "--dtw-precision", "float16"], check=False)
    assert r.returncode != 0 and "dtw-precision" in r.stderr
    assert not (tmp_path / "x.csv").exists()
