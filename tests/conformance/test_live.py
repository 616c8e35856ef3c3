"""`escpod live replay`: one row per read, live labels equal to the fused run's calls where a
read is decided at its end, the policy's actions follow its config, and bad input is refused."""
import csv
import subprocess

import pytest

RNA002_MODEL = "warpdemux/joblib/rna002/WDX4_rna002_v0_4_4.joblib"
RNA002_READS = "warpdemux/sample/small_pod5_0.pod5"


def run(escpod, *args):
    return subprocess.run([str(escpod), *map(str, args)], capture_output=True, text=True)


def read_rows(path):
    return list(csv.DictReader(open(path)))


@pytest.fixture(scope="module")
def fused_calls(escpod, shared_data, tmp_path_factory):
    out = tmp_path_factory.mktemp("fused") / "calls.csv"
    r = run(escpod, "demux", shared_data / RNA002_READS, "--model", shared_data / RNA002_MODEL,
            "--classifications", out)
    assert r.returncode == 0, r.stderr
    return {row["read_id"]: row["barcode"] for row in read_rows(out)}


def test_replay_writes_one_row_per_read_with_the_whole_read_call(escpod, shared_data, tmp_path, fused_calls):
    out = tmp_path / "live.csv"
    r = run(escpod, "live", "replay", shared_data / RNA002_READS, "--model", shared_data / RNA002_MODEL, "-o", out)
    assert r.returncode == 0, r.stderr
    rows = read_rows(out)
    assert len(rows) == 200 and {row["read_id"] for row in rows} == set(fused_calls)
    for row in rows:
        assert row["whole_read_label"] == fused_calls[row["read_id"]], row
        assert row["action"] in ("stop_receiving", "none"), row  # no policy: nothing is unblocked
        if row["early"] == "false" and row["action"] == "none":
            assert row["label"] == row["whole_read_label"], row
    assert "live label = whole-read call for" in r.stderr
    assert "time per chunk: p50" in r.stderr


def test_reject_all_unblocks_every_decided_read(escpod, shared_data, tmp_path):
    config = tmp_path / "reject.toml"
    config.write_text('[flowcell]\nflowcell_type = "minion"\n[balancing]\nmax_signal_after_polya = 1000000\n'
                      '[[balancers]]\nbalance_type = "reject_all"\n')
    out = tmp_path / "live.csv"
    r = run(escpod, "live", "replay", shared_data / RNA002_READS, "--model", shared_data / RNA002_MODEL,
            "--live-config", config, "-o", out)
    assert r.returncode == 0, r.stderr
    rows = read_rows(out)
    decided = [row for row in rows if row["action"] != "none"]
    assert len(decided) > 150
    assert all(row["action"] == "unblock" for row in decided), {row["reason"] for row in decided}
    assert "pore time saved" in r.stderr
    saved = float(r.stderr.split("pore time saved ")[1].split(" s")[0])
    assert saved > 0


def test_a_config_naming_a_barcode_the_model_lacks_is_refused(escpod, shared_data, tmp_path):
    config = tmp_path / "bad.toml"
    config.write_text('[flowcell]\nflowcell_type = "minion"\n[[balancers]]\nbalance_type = "adapter_count"\nblacklist_barcode07 = true\n')
    r = run(escpod, "live", "replay", shared_data / RNA002_READS, "--model", shared_data / RNA002_MODEL,
            "--live-config", config, "-o", tmp_path / "x.csv")
    assert r.returncode == 1
    assert "bad.toml" in r.stderr and "blacklist_barcode07" in r.stderr
    assert not (tmp_path / "x.csv").exists()


def test_usage_errors(escpod, shared_data, tmp_path):
    r = run(escpod, "live", "replay", shared_data / RNA002_READS, "--model", shared_data / RNA002_MODEL,
            "--chunk-seconds", "0")
    assert r.returncode == 2 and "--chunk-seconds" in r.stderr
    r = run(escpod, "live", "replay", "--model", shared_data / RNA002_MODEL, "--info", "--seed", "3")
    assert r.returncode == 2 and "--seed" in r.stderr
    cnn_model = shared_data / "warpdemux/WDX4_rna004_v1_0.json"
    for flags, refused in ((["--decide-by", "30000"], "--decide-by"), (["--seed", "3"], "--seed"),
                           (["--method", "llr", "--cnn-model", tmp_path / "x.onnx"], "--cnn-model")):
        r = run(escpod, "live", "replay", shared_data / RNA002_READS, "--model", cnn_model, *flags,
                "-o", tmp_path / "x.csv")
        assert r.returncode == 2 and f"{refused} would be ignored" in r.stderr, (flags, r.stderr)
        assert not (tmp_path / "x.csv").exists()
    r = run(escpod, "live", "replay", "--model", shared_data / RNA002_MODEL, "--info")
    assert r.returncode == 0 and "LLR-only" in r.stdout and "decisive at 20000 samples" in r.stdout


def test_ctrl_c_stops_the_replay_without_an_output(escpod, shared_data, tmp_path):
    import os
    import signal
    import time
    out = tmp_path / "live.csv"
    env = dict(os.environ, ESCPOD_TEST_PROGRESS_DELAY_US="20000")  # 20 ms a read: a run of ~4 s
    p = subprocess.Popen([str(escpod), "live", "replay", str(shared_data / RNA002_READS), "--model",
                          str(shared_data / RNA002_MODEL), "-o", str(out)], env=env,
                         stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    time.sleep(1.0)
    p.send_signal(signal.SIGINT)
    _, err = p.communicate(timeout=60)
    assert p.returncode == 130, err
    assert not out.exists()
    assert not list(tmp_path.glob(".escpod-tmp*"))


def test_rejects_kept_as_too_late_are_reported(escpod, shared_data, tmp_path):
    config = tmp_path / "default.toml"  # max_signal_after_polya left at WarpDemuX's 1,500 samples
    config.write_text('[flowcell]\nflowcell_type = "minion"\n[[balancers]]\nbalance_type = "reject_all"\n')
    r = run(escpod, "live", "replay", shared_data / RNA002_READS, "--model", shared_data / RNA002_MODEL,
            "--live-config", config, "-o", tmp_path / "live.csv")
    assert r.returncode == 0, r.stderr
    rows = read_rows(tmp_path / "live.csv")
    too_late = sum(1 for row in rows if row["reason"] == "too_late_to_reject")
    unblocked = sum(1 for row in rows if row["action"] == "unblock")
    assert too_late > unblocked
    assert f"warning: {too_late} rejects were kept as too late and {unblocked} unblocked" in r.stderr
