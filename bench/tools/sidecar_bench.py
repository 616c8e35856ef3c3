#!/usr/bin/env python3
"""Annotations in .p5s sidecars against the copy path, on a simulated barcoded run, in one run.

  .venv/bin/python bench/tools/sidecar_bench.py --build build [--reads 20000] [--repeat 3]

Simulates a 4-barcode direct-RNA run (`escpod simulate`, demo barcodes), trains a DTW-SVM model
on a separate simulated set, then measures, alternating the two paths on the same input with a
warm page cache (median of --repeat runs):
  fused    `demux --annotate` (labels into reads.pod5.p5s, no POD5 written)
           vs `demux -d DIR` (every read copied into a per-barcode POD5)
  I/O only `annotate --from calls.csv` vs `demux split --classifications calls.csv -d DIR`
  one barcode's reads, afterwards:
           `filter --annotation barcode=BC01 -o` vs nothing (already in DIR/barcode_BC01.pod5)
and the bytes each path leaves on disk. Wall time, CPU time and peak RSS come from wait4().
Checks that both paths assign every read the same label. Prints a Markdown table.
"""
import argparse
import os
import pathlib
import shutil
import statistics
import subprocess
import tempfile
import time
import sys

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parent))
from run_pod5_bench import measure  # noqa: E402  (one timing helper for every bench script)

ROOT = pathlib.Path(__file__).resolve().parents[2]
ADAPTER = ("GGATCACAGTCTACACTGCTCACTCCAACCCCGGCCCCTGAGTCCGAGGAGAGGGTGCTTCAGAGTATGTATACCACTGGGTAGGAT"
           "ACGGCGGAGGGCACGTCAATACGGTTCAATGCCCTACTGCATGCTCTTGTGGTTCATCTGCAT")




def dir_bytes(path):
    return sum(f.stat().st_size for f in pathlib.Path(path).rglob("*") if f.is_file())


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--build", default="build")
    ap.add_argument("--reads", type=int, default=20000)
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--threads", type=int, default=os.cpu_count())
    ap.add_argument("--work", default=None, help="scratch folder (default: a temporary one)")
    args = ap.parse_args()
    escpod = pathlib.Path(args.build).resolve() / "src/cli/escpod"
    work = pathlib.Path(args.work or tempfile.mkdtemp(prefix="sidecar_bench_"))
    work.mkdir(parents=True, exist_ok=True)
    barcodes = ROOT / "data/barcodes/escpod_demo4.csv"
    t = ["-t", str(args.threads)]
    sim = ["--kmer-model", "synthetic:9", "--barcodes", barcodes, "--adapter", ADAPTER, "-f", "-q"]
    model = work / "model.json"
    if not model.exists():
        subprocess.run([escpod, "simulate", "-o", work / "train.pod5", "--reads", "2000", "--seed", "1", *sim, *t], check=True)
        subprocess.run([escpod, "demux", "train", work / "train.pod5", "--labels", work / "train.truth.csv",
                        "--method", "llr", "-o", model, "-f", "-q", *t], check=True)
    run_file = work / "run.pod5"
    if not run_file.exists():
        subprocess.run([escpod, "simulate", "-o", run_file, "--reads", str(args.reads), "--seed", "2", *sim, *t],
                       check=True)
    calls = work / "calls.csv"
    subprocess.run([escpod, "demux", run_file, "--model", model, "--classifications", calls, "-f", "-q", *t], check=True)

    sidecar = work / "run.pod5.p5s"
    copy_dir = work / "by_barcode"
    split_dir = work / "split"
    one = work / "bc01.pod5"
    cases = {
        "fused: demux --annotate": [escpod, "demux", run_file, "--model", model, "--annotate", "-q", *t],
        "fused: demux -d (copies)": [escpod, "demux", run_file, "--model", model, "-d", copy_dir, "-f", "-q", *t],
        "I/O: annotate --from calls.csv": [escpod, "annotate", run_file, "--from", calls, "--name", "barcode", "-q", *t],
        "I/O: demux split --classifications -d (copies)": [escpod, "demux", "split", run_file, "--classifications", calls,
                                                          "-d", split_dir, "-f", "-q", *t],
        "one barcode: filter --annotation barcode=BC01": [escpod, "filter", run_file, "--annotation", "barcode=BC01",
                                                         "-o", one, "-f", "-q", *t],
    }
    results = {name: [] for name in cases}
    for rep in range(args.repeat):
        for name, cmd in cases.items():
            if name.startswith("fused: demux --annotate") or name.startswith("I/O: annotate"):
                sidecar.unlink(missing_ok=True)
            if "demux -d" in name:
                shutil.rmtree(copy_dir, ignore_errors=True)
            if "split" in name:
                shutil.rmtree(split_dir, ignore_errors=True)
            results[name].append(measure(cmd))
    # Both paths give every read the same label.
    view = subprocess.run([escpod, "view", run_file, "--include", "read_id,barcode", "--no-header"],
                          capture_output=True, text=True, check=True).stdout.splitlines()
    by_sidecar = dict(line.split("\t") for line in view)
    by_copy = {}
    for f in copy_dir.glob("barcode_*.pod5"):
        label = f.name[len("barcode_"):-len(".pod5")]
        ids = subprocess.run([escpod, "view", f, "--include", "read_id", "--no-header"], capture_output=True,
                             text=True, check=True).stdout.split()
        by_copy.update({i: label for i in ids})
    assert by_sidecar == by_copy, "sidecar labels differ from the per-barcode copies"
    n_bc01 = sum(1 for v in by_sidecar.values() if v == "BC01")
    input_bytes = run_file.stat().st_size

    def row(name):
        rs = results[name]
        return (statistics.median(r["wall_s"] for r in rs), statistics.median(r["cpu_s"] for r in rs),
                max(r["rss_mib"] for r in rs))

    print(f"input: {run_file.name}, {len(by_sidecar)} reads, {input_bytes / 1e6:.1f} MB; "
          f"{args.threads} threads; median of {args.repeat}\n")
    print("| command | wall s | CPU s | peak RSS MiB |")
    print("|---|---:|---:|---:|")
    for name in cases:
        w, c, m = row(name)
        print(f"| {name} | {w:.3f} | {c:.3f} | {m:.0f} |")
    fa, fc = row("fused: demux --annotate")[0], row("fused: demux -d (copies)")[0]
    ia, ic = row("I/O: annotate --from calls.csv")[0], row("I/O: demux split --classifications -d (copies)")[0]
    print(f"\nratios (copy path / sidecar path, wall): fused {fc / fa:.2f}x, I/O only {ic / ia:.2f}x")
    print(f"bytes written: sidecar {sidecar.stat().st_size:,} B ({sidecar.stat().st_size / input_bytes:.4%} of the input); "
          f"per-barcode copies {dir_bytes(copy_dir):,} B ({dir_bytes(copy_dir) / input_bytes:.1%} of the input); "
          f"BC01 on demand: {one.stat().st_size:,} B, {n_bc01} reads")


if __name__ == "__main__":
    main()
