#!/usr/bin/env python3
"""SeqTagger encoder time per window per core: escapepod's native encoder (built from
weights_N.tar) against PyTorch CPU (torch.set_num_threads(1), the same weights loaded with
torch.load(weights_only=True) into the module of tests/fixtures/make_torch_crf_reference.py), on the
same real windows (that script's rule, the 2000-sample windows: 3 reads x 2 ends), B windows per
call (`--batch`, default 1; the windows repeat to fill a batch), times per window (a call's time / B).

Runs with the torch venv (see make_torch_crf_reference.py's header), not .venv:

    /work/torchvenv/bin/python bench/tools/crf_torch_bench.py --escpod build/src/cli/escpod \\
        --models /work/shared/data/seqtagger --pod5 /work/shared/data/escapepod/drna/yeast_trna_reads.pod5 \\
        [--rounds 5] [--seconds 1] [--batch 1,4,8,16]

Engines alternate within each round (ours, torch, per model) so load changes hit both; the table
gives medians over rounds of wall ms and of the calling thread's CPU ms per window (`escpod model
bench --input` reports `cpu_ms_per_call`; torch's via time.thread_time(), its one intra-op thread
being the caller), and the ratios.
"""
import os

for _v in ("OMP_NUM_THREADS", "MKL_NUM_THREADS", "OPENBLAS_NUM_THREADS"):
    os.environ[_v] = "1"

import argparse  # noqa: E402
import pathlib  # noqa: E402
import re  # noqa: E402
import statistics  # noqa: E402
import subprocess  # noqa: E402
import sys  # noqa: E402
import tempfile  # noqa: E402
import time  # noqa: E402

import numpy as np  # noqa: E402
import torch  # noqa: E402

ROOT = pathlib.Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "tests" / "fixtures"))
import make_torch_crf_reference as ref  # noqa: E402


def ours_ms(escpod, folder, npy, seconds, batch):
    """(wall ms, thread CPU ms) per window: calls of `batch` windows, divided by `batch`."""
    out = subprocess.run([escpod, "model", "bench", str(folder), "--input", str(npy), "--batch", str(batch), "-t",
                          "1", "--seconds", str(seconds)], capture_output=True, text=True, check=True).stdout
    return (float(re.search(r" ms_per_call=([0-9.]+)", out).group(1)) / batch,
            float(re.search(r"cpu_ms_per_call=([0-9.]+)", out).group(1)) / batch)


def torch_ms(model, xs, seconds, batch):
    """As ours_ms; `xs` [M, L] with M a multiple of `batch`, taken `batch` rows per call in turn."""
    calls = [xs[i:i + batch] for i in range(0, len(xs), batch)]
    with torch.inference_mode():
        for x in calls[:3]:
            model(x)  # warm-up
        n, t0, c0 = 0, time.perf_counter(), time.thread_time()
        while time.perf_counter() - t0 < seconds:
            model(calls[n % len(calls)])
            n += 1
    return (time.perf_counter() - t0) / n / batch * 1e3, (time.thread_time() - c0) / n / batch * 1e3


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--escpod", required=True)
    ap.add_argument("--models", type=pathlib.Path, required=True)
    ap.add_argument("--pod5", type=pathlib.Path, required=True)
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--seconds", type=float, default=1.0)
    ap.add_argument("--batch", type=lambda t: [int(v) for v in t.split(",")], default=[1],
                    help="windows per call, comma-separated (default 1)")
    args = ap.parse_args()
    if any(b < 1 for b in args.batch):
        ap.error("--batch takes positive integers")
    torch.set_num_threads(1)
    torch.set_num_interop_threads(1)
    tmp = pathlib.Path(tempfile.mkdtemp())
    setups = []
    for folder in sorted(p for p in args.models.iterdir() if (p / "config.toml").is_file()):
        model, cfg = ref.build(folder)
        xs = [x for _, _, length, x in ref.real_windows(args.pod5, ref.standardisation(cfg)) if length == 2000]
        # The windows repeated so that every batch size divides their count: both engines take the
        # same B windows per call in the same order.
        tiled = np.stack([xs[i % len(xs)] for i in range(len(xs) * max(args.batch))])
        npy = tmp / f"{folder.name}.npy"
        np.save(npy, tiled[:, None, :])
        setups.append((folder, model, torch.from_numpy(tiled), npy, len(xs)))
    times = {(f.name, b): {"ours": [], "torch": []} for f, *_ in setups for b in args.batch}
    for r in range(args.rounds):
        for folder, model, xs, npy, _ in setups:
            for b in args.batch:
                times[(folder.name, b)]["ours"].append(ours_ms(args.escpod, folder, npy, args.seconds, b))
                times[(folder.name, b)]["torch"].append(torch_ms(model, xs, args.seconds, b))
        print(f"round {r + 1}/{args.rounds} done", file=sys.stderr)
    print(f"torch {torch.__version__}, windows of 2000 samples ({setups[0][4]} per model), 1 thread, "
          f"medians of {args.rounds} rounds x {args.seconds} s; ms per window")
    print("| model | B | ours wall / CPU ms | PyTorch wall / CPU ms | ours / PyTorch (wall) | ours / PyTorch (CPU) |")
    print("|---|---|---|---|---|---|")
    for (name, b), t in times.items():
        med = {e: [statistics.median(v[i] for v in t[e]) for i in (0, 1)] for e in t}
        print(f"| {name} | {b} | {med['ours'][0]:.2f} / {med['ours'][1]:.2f} | "
              f"{med['torch'][0]:.2f} / {med['torch'][1]:.2f} | "
              f"{med['ours'][0] / med['torch'][0]:.2f} | {med['ours'][1] / med['torch'][1]:.2f} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
