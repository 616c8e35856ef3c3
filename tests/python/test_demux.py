"""The demultiplexer from Python gives the CLI's calls on the same reads."""
import csv
import subprocess
import uuid

import numpy as np
import pytest

import escpod


def _csv(path):
    with open(path) as f:
        return list(csv.DictReader(f))


def test_demux_equals_cli(shared_data, escpod_bin, tmp_path):
    model = shared_data / "warpdemux/WDX4_rna004_v1_0.json"
    inputs = sorted((shared_data / "warpdemux/sample").glob("*.pod5"))[:2]
    calls_csv = tmp_path / "cli.csv"
    subprocess.run([str(escpod_bin), "demux", *map(str, inputs), "--model", str(model),
                    "--classifications", str(calls_csv), "-t", "2"], check=True, capture_output=True)
    cli = _csv(calls_csv)
    report = {}
    ours = escpod.demux.demux(inputs, model=model, threads=2, report=report)
    assert report["n_reads"] == len(cli) == 400
    cols = list(cli[0].keys())
    assert list(ours.keys()) == cols
    for name in cols:
        expected = [row[name] for row in cli]
        got = ours[name]
        if got.dtype.kind == "f":
            want = np.array([float(x) if x != "" else np.nan for x in expected])
            assert np.array_equal(got, want, equal_nan=True), name
        else:
            assert [str(x) for x in got.tolist()] == expected, name
    assert sum(report["reads_per_label"].values()) == 400


def test_crf_model_folder_demux_equals_cli_with_its_options(shared_data, escpod_bin, tmp_path):
    """A SeqTagger folder through the Python API: the CLI's calls, with the CRF head's options
    given as keyword arguments (here every gate opened, so calls go through), parsed as the CLI
    parses them."""
    model = shared_data / "seqtagger/b04_RNA004"
    reads = shared_data / "escapepod/drna/yeast_trna_reads.pod5"
    calls_csv = tmp_path / "cli.csv"
    subprocess.run([str(escpod_bin), "demux", str(reads), "--model", str(model), "--min-baseq", "0",
                    "--min-mean-post", "0", "--classifications", str(calls_csv), "-t", "2"],
                   check=True, capture_output=True)
    cli = _csv(calls_csv)
    ours = escpod.demux.demux([reads], model=model, threads=2, min_baseq=0, min_mean_post=0)
    assert list(ours.keys()) == list(cli[0].keys())
    assert "baseq" in ours  # beam search, the SeqTagger default
    for name in ("read_id", "barcode", "reason"):
        assert [str(x) for x in ours[name].tolist()] == [row[name] for row in cli], name
    assert any(b != "unclassified" for b in ours["barcode"].tolist())
    gated = escpod.demux.demux([reads], model=model, threads=2)  # default gates: all rejected
    assert set(gated["barcode"].tolist()) == {"unclassified"}
    # The CRF head's options with a model of another kind are refused, not ignored (as the CLI's).
    with pytest.raises(ValueError, match="--decoder applies to CTC-CRF model folders"):
        escpod.demux.demux([reads], model=shared_data / "warpdemux/WDX4_rna004_v1_0.json", decoder="beam")
    with pytest.raises(ValueError, match="--decoder: 'viterbi' is not a decoder"):
        escpod.demux.demux([reads], model=model, decoder="viterbi")
    with pytest.raises(ValueError, match="--encoder-precision"):
        escpod.demux.demux([reads], model=model, encoder_precision="fp16")
    assert "CTC-CRF SeqTagger" in escpod.demux.describe(model)


def test_concurrent_crf_runs_keep_their_own_options(shared_data):
    """The CRF head's options travel with each run (HeadOptions::crf), not through process state:
    threads running escpod.demux.demux at once with different gates (the GIL is released for the
    run) each get exactly what they get alone. Under the old process-wide registry a run loaded
    the head with whichever options were registered last."""
    import threading

    model = shared_data / "seqtagger/b04_RNA004"
    reads = shared_data / "escapepod/drna/yeast_trna_reads.pod5"
    options = [{}, {"min_baseq": 0, "min_mean_post": 0}]
    alone = [escpod.demux.demux([reads], model=model, threads=1, **o)["barcode"].tolist() for o in options]
    assert alone[0] != alone[1] and set(alone[0]) == {"unclassified"}
    results, errors = {}, []
    start = threading.Barrier(6)

    def run(i):
        try:
            start.wait()
            results[i] = escpod.demux.demux([reads], model=model, threads=1, **options[i % 2])["barcode"].tolist()
        except Exception as e:  # noqa: BLE001 - reported by the assertion below
            errors.append(e)

    threads = [threading.Thread(target=run, args=(i,)) for i in range(6)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors, errors
    for i in range(6):
        assert results[i] == alone[i % 2], f"run {i} got the other run's calls"


def test_crf_basecall_equals_cli(shared_data, escpod_bin, tmp_path):
    """`escpod demux basecall` through the Python API: boundaries from detect() (a table) or a CSV
    path, the CLI's rows and columns (sequence, distances, baseq, lattice scores) with the same
    head options, the counts in `report`, and bad options refused as the CLI refuses them."""
    model = shared_data / "seqtagger/b04_RNA004"
    wdx = shared_data / "warpdemux/WDX4_rna004_v1_0.json"
    reads = shared_data / "escapepod/drna/yeast_trna_reads.pod5"
    b_csv, cli_csv = tmp_path / "b.csv", tmp_path / "bc.csv"
    run = lambda *a: subprocess.run([str(escpod_bin), "demux", *map(str, a)], check=True, capture_output=True)
    run("detect", reads, "--method", "llr", "--model", wdx, "-o", b_csv)
    run("basecall", reads, "--boundaries", b_csv, "--model", model, "--min-baseq", "0", "--min-mean-post", "0",
        "--ref-scores", "-o", cli_csv)
    cli = _csv(cli_csv)
    report = {}
    ours = escpod.demux.basecall(reads, b_csv, model, threads=2, report=report, min_baseq=0, min_mean_post=0,
                                 ref_scores=True)
    assert list(ours.keys()) == list(cli[0].keys())
    assert "baseq" in ours and "crf_logp" in ours and list(ours.keys())[-1] == "decoded_seq"
    for name in ("read_id", "barcode", "decoded_seq", "crf_best"):
        assert [str(x) for x in ours[name].tolist()] == [row[name] for row in cli], name
    # Numeric columns (empty cells: NaN), printed to 6 decimals: the module may be another build
    # than the CLI (CI tests an AddressSanitizer one), whose float32 rounding can move the last
    # printed digits.
    for name in ("edit_dist", "baseq", "crf_logp"):
        want = np.array([float(row[name]) if row[name] else np.nan for row in cli])
        assert np.allclose(np.asarray(ours[name], dtype=float), want, rtol=0, atol=2.5e-4, equal_nan=True), name
    assert report["n_rows"] == len(cli) and report["n_classified"] == sum(r["barcode"] != "unclassified" for r in cli)
    assert report["n_classified"] > 0
    bounds = escpod.demux.detect(reads, model=wdx, method="llr", threads=2)
    from_table = escpod.demux.basecall([reads], bounds, model, min_baseq=0, min_mean_post=0, ref_scores=True)
    assert from_table["decoded_seq"].tolist() == ours["decoded_seq"].tolist()
    gated = escpod.demux.basecall(reads, b_csv, model)  # default gates: barcode-free reads rejected
    assert set(gated["barcode"].tolist()) == {"unclassified"}
    with pytest.raises(ValueError, match="--decoder"):
        escpod.demux.basecall(reads, b_csv, model, decoder="viterbi")


def test_stages_equal_cli(shared_data, escpod_bin, tmp_path):
    model = shared_data / "warpdemux/WDX4_rna004_v1_0.json"
    inp = sorted((shared_data / "warpdemux/sample").glob("*.pod5"))[0]
    b_csv, fp_csv, calls_csv = tmp_path / "b.csv", tmp_path / "fp.csv", tmp_path / "calls.csv"
    run = lambda *a: subprocess.run([str(escpod_bin), "demux", *map(str, a)], check=True, capture_output=True)
    run("detect", inp, "-m", model, "-o", b_csv)
    run("fingerprint", inp, "--boundaries", b_csv, "--model", model, "-o", fp_csv)
    run("classify", fp_csv, "-m", model, "-o", calls_csv)
    bounds = escpod.demux.detect(inp, model=model, threads=2)
    assert [str(x) for x in bounds["adapter_end"].tolist()] == [r["adapter_end"] for r in _csv(b_csv)]
    fps = escpod.demux.fingerprint(inp, bounds, model=model, threads=2)
    cli_fp = _csv(fp_csv)
    assert fps["read_id"].tolist() == [r["read_id"] for r in cli_fp]
    assert np.array_equal(fps["fp_0"], np.array([float(r["fp_0"]) for r in cli_fp]))
    calls = escpod.demux.classify(fps, model=model, threads=2)
    cli_calls = _csv(calls_csv)
    assert calls["barcode"].tolist() == [r["barcode"] for r in cli_calls]
    assert len(cli_calls) > 100
    desc = escpod.demux.describe(model)
    assert "model:          WDX4_rna004_v1_0" in desc and "detector: boundary CNN" in desc, desc



def test_warpdemux_joblib_model_equals_cli_and_its_export(shared_data, escpod_bin, tmp_path):
    """A WarpDemuX .joblib model from Python, its config given as `config` (the CLI's --config):
    the CLI's calls; export_model() gives JSON whose calls are the same."""
    lonely = tmp_path / "WDX6_rna002_v0_4_4.joblib"  # no config.toml beside it
    lonely.write_bytes((shared_data / "warpdemux/joblib/rna002/WDX6_rna002_v0_4_4.joblib").read_bytes())
    config = shared_data / "warpdemux/joblib/rna002/rna002_70bps@v0.4.4.toml"
    inp = sorted((shared_data / "warpdemux/sample").glob("*.pod5"))[0]
    calls_csv = tmp_path / "cli.csv"
    subprocess.run([str(escpod_bin), "demux", str(inp), "--model", str(lonely), "--config", str(config),
                    "--classifications", str(calls_csv)], check=True, capture_output=True)
    cli = _csv(calls_csv)
    ours = escpod.demux.demux(inp, model=lonely, config=config, threads=2)
    assert ours["barcode"].tolist() == [r["barcode"] for r in cli]
    assert sum(b != "unclassified" for b in ours["barcode"].tolist()) > 50
    with pytest.raises(Exception, match="--config"):
        escpod.demux.demux(inp, model=lonely, threads=1)
    exported = tmp_path / "WDX6.json"
    exported.write_text(escpod.demux.export_model(lonely, config=config))
    again = escpod.demux.demux(inp, model=exported, threads=2)
    assert again["barcode"].tolist() == ours["barcode"].tolist()
    assert "rna002_70bps@v0.4.4.toml (--config)" in escpod.demux.describe(lonely, config=config)


INTERRUPT = r"""
import os, pathlib, signal, sys, threading, time
import escpod
model, out, *inputs = sys.argv[1:]
# Python's Ctrl-C handler, even where this process inherited SIGINT ignored (a shell starts
# background jobs so, and Python then leaves it ignored): the test is of escpod, not of its caller.
signal.signal(signal.SIGINT, signal.default_int_handler)
# The interrupt lands while the run is writing: a watcher waits for the run's first staged output
# file to appear (a state, not a clock), then sends SIGINT to the process.
def interrupt_once_writing():
    while not (pathlib.Path(out).is_dir() and any(pathlib.Path(out).glob(".escpod-tmp*"))):
        time.sleep(0.001)
    os.kill(os.getpid(), signal.SIGINT)
threading.Thread(target=interrupt_once_writing, daemon=True).start()
try:
    escpod.demux.demux(inputs, model=model, out_dir=out, threads=1)
    print("FINISHED")
except KeyboardInterrupt:
    print("INTERRUPTED")
"""


def test_ctrl_c_interrupts_demux_and_leaves_no_output(shared_data, tmp_path):
    import subprocess, sys
    model = shared_data / "warpdemux/WDX4_rna004_v1_0.json"
    import shutil
    inputs = []
    for k in range(3):  # distinct copies (duplicate paths are dropped)
        (tmp_path / f"in{k}").mkdir()
        for f in sorted((shared_data / "warpdemux/sample").glob("*.pod5")):
            inputs.append(shutil.copy(f, tmp_path / f"in{k}" / f.name))
    out = tmp_path / "split"
    r = subprocess.run([sys.executable, "-c", INTERRUPT, str(model), str(out), *map(str, inputs)],
                       capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr[-2000:]
    assert r.stdout.split() == ["INTERRUPTED"], r.stdout
    assert not out.exists() or not any(p.suffix == ".pod5" or p.name.startswith(".escpod-tmp") for p in out.iterdir())


def _signals_of(path):
    with escpod.Reader(path) as r:
        recs = list(r.reads())
        sample_rate = recs[0].run_info.sample_rate
        return ([rec.signal.copy() for rec in recs],
                [(rec.calibration.offset, rec.calibration.scale) for rec in recs],
                [rec.read_id for rec in recs], sample_rate)


def test_signals_in_memory_equal_the_file(shared_data):
    """numpy in: the reads of a real POD5, passed as arrays with their calibration, get the
    boundaries, fingerprints and calls the file gets."""
    model = shared_data / "warpdemux/WDX4_rna004_v1_0.json"
    inp = sorted((shared_data / "warpdemux/sample").glob("*.pod5"))[0]
    signals, cal, ids, rate = _signals_of(inp)
    assert len(signals) > 100
    from_file = escpod.demux.detect(inp, model=model, threads=2)
    from_arrays = escpod.demux.detect_signals(signals, cal, model=model, read_ids=ids, sample_rate=rate, threads=2)
    assert list(from_arrays) == list(from_file)
    for name in from_file:
        a, b = from_arrays[name], from_file[name]
        assert (np.array_equal(a, b, equal_nan=True) if a.dtype.kind == "f" else a.tolist() == b.tolist()), name
    fps = escpod.demux.fingerprint_signals(signals, cal, from_arrays, model=model, read_ids=ids,
                                           sample_rate=rate, threads=2)
    fps_file = escpod.demux.fingerprint(inp, from_file, model=model, threads=2)
    assert fps["read_id"].tolist() == fps_file["read_id"].tolist()
    assert np.array_equal(fps["fp_0"], fps_file["fp_0"], equal_nan=True)
    calls = escpod.demux.demux_signals(signals, cal, model=model, read_ids=ids, sample_rate=rate, threads=2)
    calls_file = escpod.demux.demux(inp, model=model, threads=2)
    assert calls["read_id"].tolist() == calls_file["read_id"].tolist()
    assert calls["barcode"].tolist() == calls_file["barcode"].tolist()


def test_signals_in_memory_default_ids_are_positions(shared_data):
    model = shared_data / "warpdemux/WDX4_rna004_v1_0.json"
    inp = sorted((shared_data / "warpdemux/sample").glob("*.pod5"))[0]
    signals, cal, ids, rate = _signals_of(inp)
    bounds = escpod.demux.detect_signals(signals[:5], cal[:5], model=model, sample_rate=rate)
    assert sorted(uuid.UUID(x).int for x in bounds["read_id"].tolist()) == [0, 1, 2, 3, 4]


def test_signals_in_memory_refuse_bad_input(shared_data):
    import pytest
    model = shared_data / "warpdemux/WDX4_rna004_v1_0.json"
    with pytest.raises(TypeError, match="int16"):
        escpod.demux.detect_signals([np.zeros(10, dtype=np.float32)], (0.0, 1.0), model=model)
    with pytest.raises(ValueError, match="calibration"):
        escpod.demux.detect_signals([np.zeros(10, dtype=np.int16)] * 2, [(0.0, 1.0)] * 3, model=model)
    with pytest.raises(ValueError, match="twice"):
        escpod.demux.detect_signals([np.zeros(10, dtype=np.int16)] * 2, (0.0, 1.0), model=model,
                                    read_ids=[uuid.UUID(int=1)] * 2)


def test_bam_demux_equals_cli(shared_data, escpod_bin, tmp_path):
    """escpod.demux.bam_demux: the CLI's tagged BAM and per-label files, and its counts."""
    import pysam

    bam = shared_data / "escapepod/drna/yeast_trna_mappings.bam"
    names = sorted({r.query_name for r in pysam.AlignmentFile(str(bam))})
    calls = tmp_path / "calls.csv"
    calls.write_text("read_id,barcode,confidence\n" +
                     "".join(f"{n},BC0{i % 3 + 1},0.9\n" for i, n in enumerate(names) if i % 4))
    subprocess.run([str(escpod_bin), "bam-demux", "-b", str(bam), "--classifications", str(calls),
                    "-o", str(tmp_path / "cli.bam")], check=True, capture_output=True)
    rep = escpod.demux.bam_demux(bam, classifications=calls, output=tmp_path / "py.bam",
                                 out_dir=tmp_path / "per", threads=2)
    records = lambda p: [r.to_string() for r in pysam.AlignmentFile(str(p))]
    assert records(tmp_path / "py.bam") == records(tmp_path / "cli.bam")
    assert rep["n_records"] == 180 and sum(rep["records_per_label"].values()) == 180
    assert rep["n_reads_without_call"] == len(names) - sum(1 for i in range(len(names)) if i % 4)
    assert sorted(p.name for p in (tmp_path / "per").glob("*.bam")) == [
        "barcode_BC01.bam", "barcode_BC02.bam", "barcode_BC03.bam", "barcode_unclassified.bam"]
    with pytest.raises(Exception, match="one of the two"):
        escpod.demux.bam_demux(bam, output=tmp_path / "z.bam")


def test_bfloat16_cnn_equals_cli_and_bad_names_are_value_errors(shared_data, escpod_bin, tmp_path):
    model = shared_data / "warpdemux/WDX4_rna004_v1_0.json"
    inp = shared_data / "escapepod/drna/yeast_trna_reads.pod5"
    b_csv, calls_csv = tmp_path / "b.csv", tmp_path / "calls.csv"
    run = lambda *a: subprocess.run([str(escpod_bin), "demux", *map(str, a)], check=True, capture_output=True)
    run("detect", inp, "-m", model, "--cnn-precision", "bfloat16", "-o", b_csv)
    run(inp, "-m", model, "--cnn-precision", "bfloat16", "--classifications", calls_csv)
    bounds = escpod.demux.detect(inp, model=model, cnn_precision="bfloat16")
    assert [str(x) for x in bounds["adapter_end"].tolist()] == [r["adapter_end"] for r in _csv(b_csv)]
    calls = escpod.demux.demux(inp, model=model, cnn_precision="bfloat16")
    assert calls["barcode"].tolist() == [r["barcode"] for r in _csv(calls_csv)]
    with pytest.raises(ValueError, match="bfloat17"):
        escpod.demux.detect(inp, model=model, cnn_precision="bfloat17")
