#!/usr/bin/env python3
"""Live (read-until) decisions: agreement with the whole-read call as a curve over the prefix
length, samples and time to a decision, per-read state, and barcode shares under each balancing
policy on a simulated skewed run (docs/live.md §5).

  .venv/bin/python bench/tools/live_bench.py --escpod build/src/cli/escpod --shared ../shared/data \
      --work /tmp/live_bench --out bench/results/live_tables.md

Needs the escpod Python package (escpod._core.LiveClassifier) for the prefix curves; the replays
run the CLI. Sets: the 180 real RNA004 reads with WDX4 (boundary CNN), WarpDemuX's 800 RNA002
sample reads with its WDX4 RNA002 model (LLR), and a simulated 4-barcode run (demo barcodes and
adapter), 3,000 reads skewed 70/10/10/10 by truth, with a DTW-SVM model trained on a separate simulated set.
"""
import argparse
import csv
import os
import platform
import re
import subprocess
import sys
from pathlib import Path

import numpy as np
import pod5

import escpod._core as core

REPO = Path(__file__).resolve().parents[2]
PREFIXES = [2000, 3000, 4000, 5000, 6000, 8000, 10000, 13000, 16000, 20000]
POLICIES = ["adapter_count", "read_count", "base_normalization", "none", "reject_all"]


def cpu_name():
    for line in open("/proc/cpuinfo"):
        if line.startswith("model name"):
            return line.split(":", 1)[1].strip()
    return platform.processor()


def stream_decisions(model, files, config=None, chunk=400):
    """Streams every read in chunks; returns [(samples_seen, live_label, whole_label)]."""
    clf = core.LiveClassifier(model, config=config)
    rows = []
    for f in files:
        with pod5.Reader(f) as reader:
            for rec in reader.reads():
                raw, cal = rec.signal, rec.calibration
                whole = clf.feed(clf.new_read("", cal.offset, cal.scale), raw, True)
                whole_label = whole.label if whole.state == "decided" else "unclassified"
                read = clf.new_read("", cal.offset, cal.scale)
                for at in range(0, len(raw), chunk):
                    d = clf.feed(read, raw[at:at + chunk], at + chunk >= len(raw))
                    if d.final:
                        break
                label = d.label if d.state == "decided" else "unclassified"
                rows.append((d.samples_seen, label, whole_label))
    return rows


def prefix_curve(rows):
    """For each prefix length: share of reads decided by then, and agreement among them."""
    out = []
    for p in PREFIXES:
        done = [r for r in rows if r[0] <= p]
        agree = sum(1 for r in done if r[1] == r[2])
        out.append((p, len(done) / len(rows), agree / len(done) if done else float("nan")))
    return out


def run(cmd):
    r = subprocess.run([str(c) for c in cmd], capture_output=True, text=True)
    if r.returncode != 0:
        sys.exit(f"failed: {' '.join(map(str, cmd))}\n{r.stderr}")
    return r.stderr


def replay(escpod, files, model, out_csv, config=None, extra=()):
    cmd = [escpod, "live", "replay", *files, "--model", model, "-o", out_csv, "-f", *extra]
    if config:
        cmd += ["--live-config", config]
    return run(cmd)


def grab(log, pattern):
    m = re.search(pattern, log)
    return m.groups() if m else None


def shares(log, title):
    block = log.split(title, 1)[1].split("\n")[1:]
    out = {}
    for line in block:
        m = re.match(r"escpod:\s+(\S+)\s+(\d+) reads\s+([\d.]+)%\s+([\d.]+)% of samples", line)
        if not m:
            break
        out[m.group(1)] = (int(m.group(2)), float(m.group(3)), float(m.group(4)))
    return out


def simulated_skewed_run(escpod, work):
    """A 4-barcode model trained on simulated reads, and a 70/10/10/10 test run."""
    barcodes = REPO / "data/barcodes/escpod_demo4.csv"
    adapter = open(REPO / "scripts/demo-run.sh").read().split("ADAPTER=", 1)[1].split("\n", 1)[0]
    common = ["--kmer-model", "synthetic:9", "--barcodes", barcodes, "--adapter", adapter, "-f", "-q"]
    model = work / "model.json"
    if not model.exists():
        run([escpod, "simulate", "-o", work / "train.pod5", "--reads", 2000, "--seed", 1, *common])
        run([escpod, "demux", "train", work / "train.pod5", "--labels", work / "train.truth.csv", "--method",
             "llr", "-o", model, "-f"])
    skewed = work / "skewed.pod5"
    if not skewed.exists():
        run([escpod, "simulate", "-o", work / "pool.pod5", "--reads", 12000, "--seed", 2, "--channels", 126, *common])
        truth = list(csv.DictReader(l for l in open(work / "pool.truth.csv") if not l.startswith("#")))
        names = sorted({t["barcode"] for t in truth})
        want = {names[0]: 2100, names[1]: 300, names[2]: 300, names[3]: 300}  # 70/10/10/10 of 3,000
        keep = []
        for t in truth:
            if want.get(t["barcode"], 0) > 0:
                want[t["barcode"]] -= 1
                keep.append(t["read_id"])
        (work / "skewed.ids").write_text("\n".join(keep) + "\n")
        run([escpod, "filter", work / "pool.pod5", "--ids", work / "skewed.ids", "-o", skewed, "--force"])
    return model, skewed


def truth_accuracy(work, replay_csv):
    """Precision of the live calls and of the whole-read calls against the simulated truth."""
    truth = {t["read_id"]: "BC%02d" % int(t["barcode"][-2:])
             for t in csv.DictReader(l for l in open(work / "pool.truth.csv") if not l.startswith("#"))}
    rows = list(csv.DictReader(open(replay_csv)))
    out = ["| calls | classified | correct | precision | recall |", "|---|---|---|---|---|"]
    for column, what in (("label", "live decision"), ("whole_read_label", "whole-read call (fused run)")):
        called = [r for r in rows if r[column] != "unclassified"]
        correct = sum(1 for r in called if r[column] == truth[r["read_id"]])
        out.append(f"| {what} | {len(called)} of {len(rows)} | {correct} | {correct / len(called):.1%} | "
                   f"{correct / len(rows):.1%} |")
    return out


def policy_config(work, kind):
    path = work / f"{kind}.toml"
    extra = f'pod5_watch_dir = "{work}"\n' if kind in ("read_count", "base_normalization") else ""
    min_stat = 2 if kind == "base_normalization" else 50
    # Decisions come one or two 0.4 s chunks past the adapter end (1,600 samples each at 4 kHz);
    # WarpDemuX's 1,500 (RNA002, 3 kHz, 0.1 s chunks) would call every reject too late.
    path.write_text(f"""[flowcell]
flowcell_type = "flongle"
[balancing]
max_signal_after_polya = 8000
pred_conf_threshold = 0.2
reject_duration = 0.1
[[balancers]]
name = "{kind}"
balance_type = "{kind}"
min_stat = {min_stat}
balance_threshold = 0.05
watch_for_missing = false
{extra}""")
    return path


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--escpod", required=True)
    ap.add_argument("--shared", required=True, help="the shared data folder")
    ap.add_argument("--work", default="/tmp/live_bench")
    ap.add_argument("--out", required=True)
    a = ap.parse_args()
    shared, work = Path(a.shared), Path(a.work)
    work.mkdir(parents=True, exist_ok=True)
    sets = {
        "RNA004, 180 real reads, WDX4 (CNN)": ([shared / "escapepod/drna/yeast_trna_reads.pod5"],
                                               shared / "warpdemux/WDX4_rna004_v1_0.json"),
        "RNA002, 800 WarpDemuX sample reads, WDX4 RNA002 (LLR)": (
            sorted((shared / "warpdemux/sample").glob("small_pod5_*.pod5")),
            shared / "warpdemux/joblib/rna002/WDX4_rna002_v0_4_4.joblib"),
    }
    model, skewed = simulated_skewed_run(a.escpod, work)
    sets["simulated 4 barcodes 70/10/10/10, 3,000 reads, trained DTW-SVM (LLR)"] = ([skewed], model)
    lines = [f"CPU: {cpu_name()}, {os.cpu_count()} CPUs. Chunks of 400 samples for the curves; "
             "replays with 0.4 s chunks, one thread.", ""]
    lines += ["### Agreement with the whole-read call over the prefix length", "",
              "| set | " + " | ".join(f"{p}" for p in PREFIXES) + " |",
              "|---|" + "---|" * len(PREFIXES)]
    for name, (files, m) in sets.items():
        curve = prefix_curve(stream_decisions(str(m), [str(f) for f in files]))
        lines.append(f"| {name}: decided by then | " + " | ".join(f"{d:.0%}" for _, d, _ in curve) + " |")
        lines.append(f"| {name}: of those, agree | " + " | ".join(f"{g:.1%}" for _, _, g in curve) + " |")
    lines += ["", "### Replays without a policy: samples and time to decide", "",
              "| set | decided early | agree | samples at decision median / p90 | time per chunk p50 / p99 | max state per read |",
              "|---|---|---|---|---|---|"]
    for name, (files, m) in sets.items():
        log = replay(a.escpod, files, m, work / "replay.csv")
        n, early = grab(log, r"(\d+) reads: (\d+) decided early")
        agree, decided, pct = grab(log, r"= whole-read call for (\d+) of (\d+) decided reads \(([\d.]+)%")
        med, p90 = grab(log, r"median (\d+), p90 (\d+)")
        p50, p99 = grab(log, r"p50 ([\d.]+) ms, p99 ([\d.]+) ms")
        state = grab(log, r"state per read <= (\d+) bytes")[0]
        lines.append(f"| {name} | {early} of {n} | {agree} / {decided} ({pct}%) | {med} / {p90} | "
                     f"{p50} / {p99} ms | {state} B |")
    lines += ["", "### Simulated skewed run (70/10/10/10) under each policy (target: equal shares)", "",
              "| policy | shares sequenced, reads (by the whole-read call) | unblocks | pore time saved | run time (simulated) |",
              "|---|---|---|---|---|"]
    for kind in POLICIES:
        log = replay(a.escpod, [skewed], model, work / f"{kind}.csv", policy_config(work, kind))
        with_b = shares(log, "sequenced with balancing")
        unblocks = sum(int(n) for n in re.findall(r"unblock: \S+\s+(\d+)", log))
        t_without, t_with, saved = grab(log, r"([\d.]+) s without balancing, ([\d.]+) s with; pore time saved ([\d.]+) s")
        share_text = ", ".join(f"{k} {v[1]:.1f}%" for k, v in sorted(with_b.items()))
        lines.append(f"| {kind} | {share_text} | {unblocks} | {saved} s | {t_with} s (without: {t_without} s) |")
    without = shares(log, "sequenced without balancing")
    truth_lines = truth_accuracy(work, work / "none.csv")
    lines.append(f"| (no balancing) | " + ", ".join(f"{k} {v[1]:.1f}%" for k, v in sorted(without.items())) + " | 0 | 0 | |")
    lines += ["", "### The simulated run against its truth (policy `none`: every read decided, none rejected)", ""]
    lines += truth_lines
    Path(a.out).write_text("\n".join(lines) + "\n")
    print("\n".join(lines))


if __name__ == "__main__":
    main()
