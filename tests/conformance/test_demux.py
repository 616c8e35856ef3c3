"""escpod demux end to end: model info, conservation, determinism across thread counts, bad
inputs, and memory that stays flat when the number of labels grows (demux split)."""
import csv
import os
import subprocess
import uuid

import pod5
import pytest

from conftest import run


@pytest.fixture(scope="module")
def wdx4(shared_data):
    return shared_data / "warpdemux/WDX4_rna004_v1_0.json"


@pytest.fixture(scope="module")
def rna_file(shared_data):
    return shared_data / "escapepod/drna/yeast_trna_reads.pod5"


def ids_and_hashes(escpod, path):
    out = run([escpod, "view", path, "--include", "read_id,signal_hash", "--no-header"]).stdout
    return sorted(out.split("\n")[:-1])


def test_info_needs_nothing_but_the_model(escpod, wdx4):
    out = run([escpod, "demux", "--model", wdx4, "--info"]).stdout
    assert "CNN file:" in out and "adapted_cnn_rna004_130bps@v0.2.4.onnx" in out
    assert "BC03" in out and "BC07" in out
    assert "DTW arithmetic: float32 by default" in out


def test_every_read_ends_in_exactly_one_output(escpod, wdx4, rna_file, tmp_path):
    out = tmp_path / "out"
    calls = tmp_path / "calls.csv"
    r = run([escpod, "demux", rna_file, "--model", wdx4, "-d", out, "--classifications", calls])
    assert "total" in r.stderr
    with open(calls) as f:
        rows = list(csv.DictReader(f))
    with pod5.Reader(rna_file) as reader:
        input_ids = sorted(str(x.read_id) for x in reader.reads())
    assert sorted(row["read_id"] for row in rows) == input_ids
    for row in rows:
        if row["barcode"] == "unclassified":
            assert row["reason"], f"unclassified read {row['read_id']} without a reason"
        else:
            assert row["barcode"].startswith("BC") and row["reason"] == ""
            assert 0.0 <= float(row["confidence"]) <= 1.0
    seen = []
    for f in sorted(out.glob("*.pod5")):
        assert f.name.startswith("barcode_")
        label = f.name[len("barcode_"):-len(".pod5")]
        with pod5.Reader(f) as reader:
            ids = [str(x.read_id) for x in reader.reads()]
        assert ids, f"{f} was created but holds no read"
        want = sorted(row["read_id"] for row in rows if row["barcode"] == label)
        assert sorted(ids) == want
        seen += ids
    assert sorted(seen) == input_ids


def test_identical_outputs_for_1_and_2_threads(escpod, wdx4, shared_data, tmp_path):
    inputs = sorted((shared_data / "warpdemux/sample").glob("*.pod5"))[:2]
    results = []
    for t in ["1", "2"]:
        out = tmp_path / f"t{t}"
        calls = tmp_path / f"calls{t}.csv"
        run([escpod, "demux", *inputs, "--model", wdx4, "-d", out, "--classifications", calls, "-t", t])
        files = {f.name: ids_and_hashes(escpod, f) for f in sorted(out.glob("*.pod5"))}
        results.append((calls.read_text(), files))
    assert results[0][0] == results[1][0], "classifications differ between 1 and 2 threads"
    assert results[0][1] == results[1][1], "per-barcode files differ between 1 and 2 threads"


def _calls(path):
    with open(path, newline="") as f:
        return [(r["read_id"], r["barcode"], r["confidence"]) for r in csv.DictReader(f)]


def test_bfloat16_cnn_gives_the_float32_calls_and_the_stage_gives_the_fused_boundaries(
        escpod, wdx4, rna_file, tmp_path):
    """--cnn-precision bfloat16 (float32 where the CPU lacks AVX512_BF16): on the 180 real RNA004
    reads every call (label and confidence) is float32's; the detect stage's boundaries are the
    fused run's, at 1 and 2 threads."""
    f32, bf16, bf16_t2 = tmp_path / "f32.csv", tmp_path / "bf16.csv", tmp_path / "bf16_t2.csv"
    run([escpod, "demux", rna_file, "-m", wdx4, "--classifications", f32, "-t", "1"])
    run([escpod, "demux", rna_file, "-m", wdx4, "--cnn-precision", "bfloat16", "--classifications", bf16, "-t", "1"])
    run([escpod, "demux", rna_file, "-m", wdx4, "--cnn-precision", "bfloat16", "--classifications", bf16_t2,
         "-t", "2"])
    assert len(_calls(f32)) == 180
    assert _calls(bf16) == _calls(f32)
    assert bf16.read_text() == bf16_t2.read_text()
    stage = tmp_path / "b.csv"
    run([escpod, "demux", "detect", rna_file, "-m", wdx4, "--cnn-precision", "bfloat16", "-o", stage, "-t", "2"])
    with open(stage, newline="") as f, open(bf16, newline="") as g:
        detected = {r["read_id"]: r for r in csv.DictReader(f)}
        fused = list(csv.DictReader(g))
    passed = [r for r in fused if not r["reason"].startswith("boundary detection failed")]
    assert passed, "no read passed detection"
    for r in passed:
        assert detected[r["read_id"]]["adapter_end"] == r["adapter_end"], r["read_id"]


def test_bfloat16_cnn_without_avx512_bf16_says_it_runs_float32(escpod, wdx4, rna_file, tmp_path):
    """Where the CPU, or its ISA cap (here AVX2), has no AVX512_BF16, --cnn-precision bfloat16
    runs float32 and says so; where it has one, nothing is said."""
    def demux_bf16(env):
        return run([escpod, "demux", rna_file, "-m", wdx4, "--cnn-precision", "bfloat16",
                    "--classifications", tmp_path / "c.csv", "-f", "-t", "1"], env=env)
    capped = demux_bf16(dict(os.environ, ONEDNN_MAX_CPU_ISA="AVX2"))
    assert "no AVX512_BF16" in capped.stderr and "run in float32" in capped.stderr, capped.stderr
    has_bf16 = "convolutions AVX512_BF16" in run([escpod, "--version"]).stdout
    plain = demux_bf16(os.environ)
    assert ("no AVX512_BF16" in plain.stderr) == (not has_bf16), plain.stderr


@pytest.mark.parametrize("command", [["demux"], ["demux", "detect", "-o", "b.csv"]])
def test_cnn_precision_is_refused_where_no_cnn_runs(escpod, wdx4, rna_file, tmp_path, command):
    r = subprocess.run([escpod, *command, rna_file, "-m", wdx4, "--method", "llr", "--cnn-precision", "bfloat16"],
                       capture_output=True, text=True, cwd=tmp_path)
    assert r.returncode == 2, r.stderr
    assert "--cnn-precision" in r.stderr and "no CNN" in r.stderr


def test_bad_model_is_a_clear_error_before_any_output(escpod, rna_file, tmp_path):
    bad = tmp_path / "model.json"
    bad.write_text('{"format": "warpdemux", "classes": [1, 2]')
    out = tmp_path / "out"
    r = run([escpod, "demux", rna_file, "--model", bad, "-d", out], check=False)
    assert r.returncode == 1 and "model.json" in r.stderr
    assert not out.exists() or not any(out.iterdir())


def test_model_kind_and_bad_fields_are_errors_naming_file_and_field(escpod, wdx4, rna_file, tmp_path):
    import json
    unknown = tmp_path / "unknown.json"
    unknown.write_text('{"classes": [1, 2]}')
    out = tmp_path / "out"
    r = run([escpod, "demux", rna_file, "--model", unknown, "-d", out], check=False)
    assert r.returncode == 1, r.stderr
    assert "unknown.json" in r.stderr and "cannot tell the model kind" in r.stderr
    assert not out.exists() or not any(out.iterdir())
    model = json.loads(wdx4.read_text())
    model["signal_processing"]["core"]["max_obs_trace"] = "10000"
    bad = tmp_path / "badfield.json"
    bad.write_text(json.dumps(model))
    r = run([escpod, "demux", "--model", bad, "--info"], check=False)
    assert r.returncode == 1, r.stderr
    assert "badfield.json" in r.stderr and "signal_processing.core.max_obs_trace" in r.stderr
    read_id = run([escpod, "view", rna_file, "--include", "read_id", "--no-header"]).stdout.split("\n")[0]
    labels = tmp_path / "labels.csv"
    labels.write_text(f"read_id,barcode\n{read_id},BC01\n")
    r = run([escpod, "demux", "train", rna_file, "--labels", labels, "--settings-from", bad,
             "-o", tmp_path / "m.json"], check=False)
    assert r.returncode == 1, r.stderr
    assert "badfield.json" in r.stderr and "signal_processing.core.max_obs_trace" in r.stderr
    assert not (tmp_path / "m.json").exists()


def test_missing_cnn_says_where_it_looked(escpod, wdx4, rna_file, tmp_path):
    lonely = tmp_path / "WDX4.json"
    lonely.write_bytes(wdx4.read_bytes())
    r = run([escpod, "demux", rna_file, "--model", lonely, "-d", tmp_path / "o"], check=False)
    assert r.returncode != 0 and "--cnn-model" in r.stderr and "adapted_cnn_" in r.stderr


def _peak_rss_mib(cmd):
    proc = subprocess.Popen([str(c) for c in cmd], stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    _, status, usage = os.wait4(proc.pid, 0)
    err = proc.stderr.read().decode()
    proc.stderr.close()
    assert os.waitstatus_to_exitcode(status) == 0, err
    return usage.ru_maxrss / 1024


def test_split_memory_is_flat_in_the_number_of_labels(escpod, rna_file, tmp_path):
    """Peak RSS with 384 labels stays within a small constant of the 4-label run."""
    big = tmp_path / "big.pod5"
    with pod5.Reader(rna_file) as src:
        reads = [r.to_read() for r in src.reads()]
    with pod5.Writer(big) as w:
        for k in range(20):
            for r in reads:
                r.read_id = uuid.uuid4()
                w.add_read(r)
    with pod5.Reader(big) as r:
        ids = [str(x.read_id) for x in r.reads()]
    rss = {}
    for n_labels in [4, 384]:
        calls = tmp_path / f"calls{n_labels}.csv"
        with open(calls, "w") as f:
            f.write("read_id,barcode\n")
            for k, i in enumerate(ids):
                f.write(f"{i},BC{k % n_labels:03d}\n")
        out = tmp_path / f"split{n_labels}"
        rss[n_labels] = _peak_rss_mib([escpod, "demux", "split", big, "--classifications", calls,
                                       "-d", out, "--memory-mib", "8"])
        files = list(out.glob("*.pod5"))
        assert len(files) == n_labels
        total = 0
        for f in files:
            with pod5.Reader(f) as r:
                total += sum(1 for _ in r.reads())
        assert total == len(ids)
    print(f"peak RSS: 4 labels {rss[4]:.0f} MiB, 384 labels {rss[384]:.0f} MiB")
    if os.environ.get("ESCPOD_SANITIZE"):
        # ASan's redzones and free quarantine grow with the number of allocations: peak RSS of
        # a sanitizer build says nothing about the program's own memory.
        pytest.skip(f"RSS flatness not checked in a {os.environ['ESCPOD_SANITIZE']} build "
                    f"(conservation checked; RSS {rss})")
    assert rss[384] < rss[4] + 96, rss


def test_demux_bam_tags_the_basecalled_records_with_the_runs_calls(escpod, wdx4, rna_file, shared_data, tmp_path):
    """demux --bam: once the calls are final, the BAM's records are split per label beside the
    POD5 files and tagged into --bam-output, as `escpod bam-demux` on the same calls does; the
    report counts the records per label."""
    import pysam

    bam = shared_data / "escapepod/drna/yeast_trna_mappings.bam"
    out, calls = tmp_path / "out", tmp_path / "calls.csv"
    run([escpod, "demux", rna_file, "--model", wdx4, "-d", out, "--classifications", calls, "--bam", bam,
         "--bam-output", tmp_path / "tagged.bam", "--report", tmp_path / "r.html"])
    run([escpod, "bam-demux", "-b", bam, "--classifications", calls, "-o", tmp_path / "alone.bam"])
    strip_pg = lambda p: [r.to_string() for r in pysam.AlignmentFile(str(p))]
    assert strip_pg(tmp_path / "tagged.bam") == strip_pg(tmp_path / "alone.bam")
    labels = {row["read_id"]: row["barcode"] for row in csv.DictReader(open(calls))}
    counts = {}
    for f in sorted(out.glob("*.bam")):
        label = f.name[len("barcode_"):-len(".bam")]
        assert (out / f"barcode_{label}.pod5").exists()
        for r in pysam.AlignmentFile(str(f)):
            assert labels.get(r.query_name, "unclassified") == label == r.get_tag("BC")
            counts[label] = counts.get(label, 0) + 1
    assert sum(counts.values()) == 180 and len(counts) >= 2
    import json
    assert json.loads((tmp_path / "r.json").read_text())["bam_records_per_label"] == counts
    assert "BAM records" in (tmp_path / "r.html").read_text()
    # A BAM cut short is refused before the run: nothing is written.
    cut = tmp_path / "cut.bam"
    cut.write_bytes(bam.read_bytes()[:50000])
    r = run([escpod, "demux", rna_file, "--model", wdx4, "-d", tmp_path / "never", "--bam", cut], check=False)
    assert r.returncode == 1 and "cut.bam" in r.stderr and not (tmp_path / "never").exists(), r.stderr
    # --bam-output without --bam, or --bam with nowhere to write: usage errors.
    r = run([escpod, "demux", rna_file, "--model", wdx4, "--classifications", tmp_path / "x.csv",
             "--bam-output", tmp_path / "y.bam"], check=False)
    assert r.returncode == 2 and "--bam" in r.stderr
    r = run([escpod, "demux", rna_file, "--model", wdx4, "--classifications", tmp_path / "x.csv", "--bam", bam],
            check=False)
    assert r.returncode == 2 and "-d DIR" in r.stderr
