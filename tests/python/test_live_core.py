"""escpod.live's classifier and policy (the C++ ones, bound in escpod._core): the whole read gives
the CLI's fused call, chunks give a final decision, and the policy answers from its config."""
import csv
import subprocess

import pod5

from escpod import live

RNA002_MODEL = "warpdemux/joblib/rna002/WDX4_rna002_v0_4_4.joblib"
RNA002_READS = "warpdemux/sample/small_pod5_0.pod5"


def fused_calls(escpod_bin, shared, tmp_path):
    out = tmp_path / "calls.csv"
    subprocess.run([str(escpod_bin), "demux", str(shared / RNA002_READS), "--model", str(shared / RNA002_MODEL),
                    "--classifications", str(out)], check=True, capture_output=True)
    return {row["read_id"]: row["barcode"] for row in csv.DictReader(open(out))}


def test_whole_reads_give_the_fused_call_and_chunks_decide(escpod_bin, shared_data, tmp_path):
    calls = fused_calls(escpod_bin, shared_data, tmp_path)
    clf = live.LiveClassifier(str(shared_data / RNA002_MODEL))
    assert clf.barcode_names == ["BC04", "BC05", "BC06", "BC08"]
    n_barcode = 0
    with pod5.Reader(shared_data / RNA002_READS) as reader:
        for rec in reader.reads():
            raw, cal = rec.signal, rec.calibration
            whole = clf.feed(clf.new_read(str(rec.read_id), cal.offset, cal.scale), raw, True)
            label = whole.label if whole.state == "decided" else "unclassified"
            assert label == calls[str(rec.read_id)]
            n_barcode += whole.barcode >= 0
            read = clf.new_read(str(rec.read_id), cal.offset, cal.scale)
            for at in range(0, len(raw), 1200):
                d = clf.feed(read, raw[at:at + 1200], at + 1200 >= len(raw))
                if d.final:
                    break
            assert d.final and d.state in ("decided", "undecidable")
            assert d.samples_seen <= min(len(raw), clf.decisive_samples + 1200)
    assert n_barcode == 131


def test_policy_answers_from_its_config(shared_data, tmp_path):
    config = tmp_path / "reject.toml"
    config.write_text('[flowcell]\nflowcell_type = "flongle"\n[[balancers]]\nbalance_type = "reject_all"\n')
    clf = live.LiveClassifier(str(shared_data / RNA002_MODEL))
    policy = live.BalancingPolicy(str(config), clf.barcode_names)
    with pod5.Reader(shared_data / RNA002_READS) as reader:
        rec = next(reader.reads())
        d = clf.feed(clf.new_read("", rec.calibration.offset, rec.calibration.scale), rec.signal, True)
    action = policy.decide(1, d, 10.0, 100)
    assert action.unblock and action.unblock_seconds > 0
    assert action.balancer == "reject_all"


def test_the_program_hands_live_run_to_the_python_client(escpod_bin, tmp_path):
    """`escpod live run` runs python3 -m escpod.live run: this interpreter, first on PATH."""
    import os
    import sys
    python3 = tmp_path / "python3"
    # Under the AddressSanitizer stage the program's wrapper drops LD_PRELOAD (scripts/python_asan.sh);
    # the Python it starts imports the sanitized module and needs the preload back.
    preload = {k: os.environ[k] for k in ("LD_PRELOAD", "ASAN_OPTIONS", "UBSAN_OPTIONS") if k in os.environ}
    exports = "".join(f"export {k}='{v}'\n" for k, v in preload.items())
    python3.write_text(f"#!/bin/sh\n{exports}exec '{sys.executable}' \"$@\"\n")
    python3.chmod(0o755)
    env = dict(os.environ, PATH=str(tmp_path) + os.pathsep + os.environ.get("PATH", ""))
    r = subprocess.run([str(escpod_bin), "live", "run", "--help"], capture_output=True, text=True, env=env)
    assert r.returncode == 0, r.stderr
    assert "--live-config" in r.stdout and "--port" in r.stdout
