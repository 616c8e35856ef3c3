"""The CLI's conventions across commands: exit codes (0 ok, 1 data and I/O errors, 2 usage errors
only, 3 inputs skipped, 130/143 signals), one meaning per flag, no accepted-and-ignored options,
the same column name for the same thing in every table, and strict barcode labels.

The signal exit codes themselves are exercised in test_file_ops.py
(test_signal_cleans_up_and_exits_128_plus_signal); here `--help` must state them.
"""
import csv
import re
import shutil

import pytest

from conftest import run

ID1 = "00000000-0000-4000-8000-000000000001"
ID2 = "00000000-0000-4000-8000-000000000002"


@pytest.fixture(scope="module")
def rna_file(shared_data):
    return shared_data / "escapepod/drna/yeast_trna_reads.pod5"


@pytest.fixture(scope="module")
def wdx4(shared_data):
    return shared_data / "warpdemux/WDX4_rna004_v1_0.json"


def read_ids(escpod, path):
    return run([escpod, "view", path, "--include", "read_id", "--no-header"]).stdout.split()


# ---- exit codes ---------------------------------------------------------------------------------


def test_help_states_every_exit_code(escpod):
    r = run([escpod, "--help"])
    assert r.returncode == 0
    text = " ".join(r.stdout.split())
    assert "Exit status: 0 success; 1 failure" in text, r.stdout
    for code, meaning in [("2", "usage error"), ("3", "--skip-bad"), ("130", "SIGINT"), ("143", "SIGTERM")]:
        assert re.search(rf"\b{code}\b[^;]*{re.escape(meaning)}", text), (code, r.stdout)


@pytest.mark.parametrize("args,message", [
    (["view", "--nonsense"], "--nonsense"),                          # unknown flag (CLI11)
    (["merge", "-o", "x.pod5"], "inputs"),                          # missing argument (CLI11)
    (["merge", "IN", "-o", "x.pod5", "--fsync", "sometimes"], "--fsync"),      # bad value (CLI11)
    (["merge", "IN", "-o", "x.pod5", "--compression", "zip"], "--compression"),
    (["demux", "detect", "IN", "-m", "M", "--method", "magic"], "--method"),
    (["demux", "train", "IN", "--labels", "L", "-o", "m.json", "--method", "magic"], "--method"),
    (["demux", "train", "IN", "--labels", "L", "-o", "m.json", "-C", "0"], "-C"),
    (["filter", "IN", "-o", "x.pod5"], "at least one criterion"),    # argument validation
    (["demux", "split", "IN", "-d", "out"], "one of --classifications CSV or --sidecar"),
    (["view", "IN", "--include", "nonsense"], "unknown field"),
])
def test_usage_errors_exit_2(escpod, rna_file, tmp_path, args, message):
    args = [str(rna_file) if a == "IN" else a for a in args]
    r = run([escpod, *args], check=False, cwd=tmp_path)
    assert r.returncode == 2, (args, r.returncode, r.stderr)
    assert message in r.stderr, r.stderr
    assert not (tmp_path / "x.pod5").exists() and not (tmp_path / "m.json").exists()


def test_data_errors_exit_1(escpod, rna_file, tmp_path):
    # A duplicate read id in merge is bad data, not a usage error.
    copy = tmp_path / "copy.pod5"
    shutil.copy(rna_file, copy)
    r = run([escpod, "merge", rna_file, copy, "-o", tmp_path / "m.pod5"], check=False)
    assert r.returncode == 1 and "duplicate read id" in r.stderr, r.stderr
    # A malformed row of an input table.
    (tmp_path / "ids.txt").write_text("not-a-read-id\n")
    r = run([escpod, "filter", rna_file, "--ids", tmp_path / "ids.txt", "-o", tmp_path / "f.pod5"], check=False)
    assert r.returncode == 1 and "ids.txt line 1" in r.stderr, r.stderr
    # A file that does not exist.
    r = run([escpod, "summary", tmp_path / "absent.pod5"], check=False)
    assert r.returncode == 1 and "absent.pod5" in r.stderr, r.stderr
    assert not (tmp_path / "m.pod5").exists() and not (tmp_path / "f.pod5").exists()


def test_skipped_inputs_exit_3(escpod, rna_file, tmp_path):
    bad = tmp_path / "bad.pod5"
    bad.write_bytes(b"not a pod5")
    r = run([escpod, "merge", rna_file, bad, "-o", tmp_path / "m.pod5", "--skip-bad"], check=False)
    assert r.returncode == 3, r.stderr
    assert "1 input skipped" in r.stderr and read_ids(escpod, tmp_path / "m.pod5") == read_ids(escpod, rna_file)


def test_success_exits_0(escpod, rna_file):
    assert run([escpod, "summary", rna_file], check=False).returncode == 0


# ---- strict labels ------------------------------------------------------------------------------


def test_a_label_typo_is_an_error_naming_file_line_and_label(escpod, rna_file, tmp_path):
    ids = read_ids(escpod, rna_file)
    labels = tmp_path / "labels.csv"
    labels.write_text(f"read_id,barcode\n{ids[0]},BC01\n{ids[1]},noise\n{ids[2]},BC12O\n")
    r = run([escpod, "demux", "train", rna_file, "--labels", labels, "-o", tmp_path / "m.json"], check=False)
    assert r.returncode == 1, r.stderr
    assert f"{labels}:4: label 'BC12O' is not a barcode" in r.stderr, r.stderr
    assert not (tmp_path / "m.json").exists()
    # An empty label is not the noise class either.
    labels.write_text(f"read_id,barcode\n{ids[0]},BC01\n{ids[1]},\n")
    r = run([escpod, "demux", "train", rna_file, "--labels", labels, "-o", tmp_path / "m.json"], check=False)
    assert r.returncode == 1 and f"{labels}:3: label ''" in r.stderr, r.stderr


def test_evaluate_reads_labels_strictly(escpod, tmp_path):
    calls, truth = tmp_path / "calls.csv", tmp_path / "truth.csv"
    calls.write_text(f"read_id,barcode,confidence\n{ID1},BC01,0.9\n{ID2},unclassified,0\n")
    truth.write_text(f"read_id,barcode\n{ID1},demo01\n{ID2},demo02\n")
    r = run([escpod, "demux", "evaluate", "--calls", calls, "--truth", truth])
    lines = r.stdout.splitlines()
    assert lines[1].split() == ["BC01", "1", "1", "1", "1.000", "1.000"], r.stdout
    assert lines[2].split() == ["BC02", "1", "0", "0", "0.000", "0.000"], r.stdout
    assert "overall: 2 reads, 1 classified (50.0%), precision 1.000, recall 0.500" in r.stdout
    truth.write_text(f"read_id,barcode\n{ID1},demo01\n{ID2},dmeo2x\n")
    r = run([escpod, "demux", "evaluate", "--calls", calls, "--truth", truth], check=False)
    assert r.returncode == 1 and f"{truth}:3: label 'dmeo2x'" in r.stderr, r.stderr


def test_train_svm_label_typo(escpod, tmp_path):
    fps = tmp_path / "fps.csv"
    fps.write_text("read_id,fp_0,fp_1,barcode\na,0.1,0.2,BC01\nb,0.3,0.4,bc1O\n")
    r = run([escpod, "demux", "train-svm", fps, "-o", tmp_path / "m.json"], check=False)
    assert r.returncode == 1 and f"{fps}:3: label 'bc1O' is not a barcode" in r.stderr, r.stderr


# ---- one meaning per flag, nothing accepted and ignored ----------------------------------------


def test_dash_i_means_ids_in_filter_and_view(escpod, rna_file, tmp_path):
    ids = read_ids(escpod, rna_file)
    wanted = tmp_path / "wanted.txt"
    wanted.write_text("\n".join(ids[3:6]) + "\n")
    got = run([escpod, "view", rna_file, "-i", wanted, "--include", "read_id", "--no-header"]).stdout.split()
    assert got == ids[3:6]
    run([escpod, "filter", rna_file, "-i", wanted, "-o", tmp_path / "f.pod5"])
    assert read_ids(escpod, tmp_path / "f.pod5") == ids[3:6]
    # `pod5 view -i` is --include; in escpod -i names an ids file, so a field list fails loudly.
    r = run([escpod, "view", rna_file, "-i", "read_id,num_samples"], check=False, cwd=tmp_path)
    assert r.returncode == 1 and "read_id,num_samples" in r.stderr, r.stderr


@pytest.mark.parametrize("args,flag", [
    (["demux", "evaluate", "--calls", "c.csv", "--truth", "t.csv", "-t", "2"], "-t"),
    (["demux", "train", "IN", "--labels", "L", "-o", "m.json", "--compression", "none"], "--compression"),
    (["inspect", "IN", "-t", "2"], "-t"),
    (["recover", "IN", "-t", "2"], "-t"),
    (["model", "info", "M", "-t", "2"], "-t"),
])
def test_options_a_command_would_ignore_are_refused(escpod, rna_file, wdx4, tmp_path, args, flag):
    args = [str(rna_file) if a == "IN" else str(wdx4) if a == "M" else a for a in args]
    r = run([escpod, *args], check=False, cwd=tmp_path)
    assert r.returncode == 2 and flag in r.stderr, (args, r.stderr)


def test_train_and_train_svm_share_dash_C(escpod):
    for sub in ("train", "train-svm"):
        text = run([escpod, "demux", sub, "--help"]).stdout
        assert re.search(r"-C,\s*--C", text), (sub, text)


# ---- one column name per thing -----------------------------------------------------------------


def test_classify_and_fused_calls_name_the_label_column_barcode(escpod, wdx4, rna_file, tmp_path):
    b, fp, calls, fused = (tmp_path / n for n in ("b.csv", "fp.csv", "calls.csv", "fused.csv"))
    run([escpod, "demux", "detect", rna_file, "-m", wdx4, "-o", b])
    run([escpod, "demux", "fingerprint", rna_file, "--boundaries", b, "-m", wdx4, "-o", fp])
    run([escpod, "demux", "classify", fp, "-m", wdx4, "-o", calls])
    r = run([escpod, "demux", rna_file, "--model", wdx4, "--classifications", fused])
    # The per-label summary is for people: stderr, like every command's summary; stdout is empty.
    assert r.stdout == "" and "total" in r.stderr
    with open(calls) as f:
        staged = list(csv.DictReader(f))
    with open(fused) as f:
        one_pass = {row["read_id"]: row for row in csv.DictReader(f)}
    assert list(staged[0]) == list(next(iter(one_pass.values())))  # one table for every entry point
    assert "barcode" in next(iter(one_pass.values()))
    # split reads either table by that column.
    run([escpod, "demux", "split", rna_file, "--classifications", calls, "-d", tmp_path / "by_calls"])
    written = {p.name for p in (tmp_path / "by_calls").iterdir()}
    assert {f"barcode_{row['barcode']}.pod5" for row in staged} <= written, written


def test_split_reports_a_missing_label_column_naming_both_names(escpod, rna_file, tmp_path):
    ids = read_ids(escpod, rna_file)
    table = tmp_path / "calls.csv"
    table.write_text(f"read_id,label\n{ids[0]},BC01\n")
    r = run([escpod, "demux", "split", rna_file, "--classifications", table, "-d", tmp_path / "out"], check=False)
    assert r.returncode == 1, r.stderr
    assert "header must name the columns read_id and barcode or predicted_barcode" in r.stderr, r.stderr
    # A legacy predicted_barcode table (escapepod's classify) still splits.
    table.write_text(f"read_id,predicted_barcode\n{ids[0]},BC01\n")
    run([escpod, "demux", "split", rna_file, "--classifications", table, "-d", tmp_path / "out2"])
    assert read_ids(escpod, tmp_path / "out2/barcode_BC01.pod5") == [ids[0]]
