#!/usr/bin/env python3
"""Compare the nn engine with onnxruntime (Python API) on the signal models, in one run.

For each model: single thread and all cores, batch 1 and larger batches, windows/s for our
engine (`escpod model bench`, or the stand-alone `escpod-nn` driver) and for onnxruntime
measured back to back, plus GFLOP/s (FLOPs counted by our planner: convolutions, matmuls, LSTMs).
It also checks our outputs against onnxruntime at the full geometry (random input, batches 1 and
7) and reports the largest absolute difference.

    /tmp/nnvenv/bin/python bench/tools/nn_bench.py --escpod build-nn/bench/kernels/nn/escpod-nn \
        [--seconds 2] [--threads N] [--markdown bench/results/nn_table.md]

Needs numpy and onnxruntime (pip). "All cores" is the CPUs this process may use. For onnxruntime
the best of two set-ups is kept: one session with intra_op_num_threads=N, and N Python threads
each running its own single-threaded session (onnxruntime releases the GIL while running). For
ours the best of `--mode workers` (one Workspace per thread) and `--mode intra` is kept.
"""
import argparse
import gzip
import os
import re
import subprocess
import sys
import tempfile
import threading
import time

import numpy as np
import onnxruntime as ort

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.normpath(os.path.join(HERE, "..", ".."))
SHARED = os.path.normpath(os.path.join(ROOT, "..", "shared", "data"))

MODELS = [
    # name, file, input length, role
    ("crf_h96_s10 (RNA004: chunk 2000, stride 10)", os.path.join(ROOT, "tests/data/nn/crf_h96_s10.onnx.gz"), 2000),
    ("crf_h128_s5 (chunk 3000, stride 5)", os.path.join(ROOT, "tests/data/nn/crf_h128_s5.onnx.gz"), 3000),
    ("ADAPTed boundary CNN (L 1500)", os.path.join(SHARED, "warpdemux/adapted_cnn_rna004_130bps@v0.2.4.onnx"), 1500),
    ("boundary TCN (L 1500)", os.path.join(ROOT, "tests/data/nn/tcn_boundary.onnx.gz"), 1500),
]


def model_bytes(path):
    with open(path, "rb") as f:
        data = f.read()
    return gzip.decompress(data) if path.endswith(".gz") else data


def ort_session(data, threads):
    so = ort.SessionOptions()
    so.intra_op_num_threads = threads
    so.inter_op_num_threads = 1
    so.execution_mode = ort.ExecutionMode.ORT_SEQUENTIAL
    return ort.InferenceSession(data, so, providers=["CPUExecutionProvider"])


def ort_rate(data, shape, threads, seconds, concurrent):
    x = np.random.default_rng(1).standard_normal(shape).astype(np.float32)
    n_sessions = threads if concurrent else 1
    per = 1 if concurrent else threads
    sessions = [ort_session(data, per) for _ in range(n_sessions)]
    name = sessions[0].get_inputs()[0].name
    for s in sessions:
        s.run(None, {name: x})
    counts = [0] * n_sessions
    stop = time.perf_counter() + seconds

    def work(i):
        s = sessions[i]
        while time.perf_counter() < stop:
            s.run(None, {name: x})
            counts[i] += 1

    t0 = time.perf_counter()
    ts = [threading.Thread(target=work, args=(i,)) for i in range(n_sessions)]
    for t in ts:
        t.start()
    for t in ts:
        t.join()
    dt = time.perf_counter() - t0
    return sum(counts) * shape[0] / dt


PRECISION = "f32"  # `model bench --precision` (--precision here)


def ours_rate(escpod, path, batch, length, threads, seconds, mode):
    cmd = [escpod, "model", "bench", path, "--batch", str(batch), "--length", str(length), "-t", str(threads),
           "--seconds", str(seconds), "--mode", mode, "--precision", PRECISION]
    out = subprocess.run(cmd, check=True, capture_output=True, text=True).stdout
    kv = dict(re.findall(r"(\w+)=(\S+)", out))
    return float(kv["windows_per_s"]), float(kv["gflops"]), kv.get("isa", "?")


def parity(escpod, path, data, length):
    worst = 0.0
    sess = ort_session(data, 1)
    name = sess.get_inputs()[0].name
    with tempfile.TemporaryDirectory() as d:
        for batch in (1, 7):
            x = np.random.default_rng(batch).standard_normal((batch, 1, length)).astype(np.float32)
            np.save(os.path.join(d, "in.npy"), x)
            subprocess.run([escpod, "model", "run", path, os.path.join(d, "in.npy"), "-o", os.path.join(d, "out.npy"), "-f",
                            "-t", "1"], check=True)
            ours = np.load(os.path.join(d, "out.npy"))
            ref = sess.run(None, {name: x})[0]
            worst = max(worst, float(np.max(np.abs(ours - ref))))
    return worst


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--escpod", required=True, help="escpod or escpod-nn binary")
    ap.add_argument("--seconds", type=float, default=2.0)
    ap.add_argument("--threads", type=int, default=len(os.sched_getaffinity(0)))
    ap.add_argument("--batches", default="1,8,64")
    ap.add_argument("--markdown", default=None)
    ap.add_argument("--models", default=None, help="comma-separated indices into the model list")
    ap.add_argument("--precision", default="f32", help="our engine's `model bench --precision` (f32, bf16, ...)")
    args = ap.parse_args()
    global PRECISION
    PRECISION = args.precision
    batches = [int(b) for b in args.batches.split(",")]
    models = MODELS if not args.models else [MODELS[int(i)] for i in args.models.split(",")]
    lines = ["| model | threads | batch | ours windows/s | onnxruntime windows/s | ratio | ours GFLOP/s | ort GFLOP/s |",
             "|---|---|---|---|---|---|---|---|"]
    summary = []
    isa = "?"
    for title, path, length in models:
        data = model_bytes(path)
        err = parity(args.escpod, path, data, length)
        summary.append(f"- {title}: max |ours - onnxruntime| at full geometry (random input, batch 1 and 7): {err:.3g}")
        print(summary[-1], flush=True)
        for threads in sorted({1, args.threads}):
            best = None
            for batch in batches:
                shape = (batch, 1, length)
                modes = ["workers"] if threads == 1 else ["workers", "intra"]
                ours = []
                for m in modes:
                    r, g, isa = ours_rate(args.escpod, path, batch, length, threads, args.seconds, m)
                    ours.append((r, g))
                o_r, o_g = max(ours)
                ort_r = max(ort_rate(data, shape, threads, args.seconds, False),
                            ort_rate(data, shape, threads, args.seconds, True) if threads > 1 else 0.0)
                flop_per_window = o_g * 1e9 / o_r if o_r > 0 else 0.0
                row = (title, threads, batch, o_r, ort_r, o_r / ort_r, o_g, ort_r * flop_per_window / 1e9)
                lines.append("| {} | {} | {} | {:.1f} | {:.1f} | {:.2f}x | {:.1f} | {:.1f} |".format(*row))
                print(lines[-1], flush=True)
                if best is None or row[3] > best[3]:
                    best = row
            ort_best = max(float(l.split("|")[5]) for l in lines[2:]
                           if l.split("|")[1].strip() == title and int(l.split("|")[2]) == threads)
            summary.append(f"- {title}, {threads} thread(s): ours best {best[3]:.1f} windows/s (batch {best[2]}) vs "
                           f"onnxruntime best {ort_best:.1f} -> {best[3] / ort_best:.2f}x")
            print(summary[-1], flush=True)
    text = "\n".join(lines) + "\n\n" + "\n".join(summary) + f"\n\n(oneDNN ISA: {isa}; onnxruntime {ort.__version__})\n"
    if args.markdown:
        with open(args.markdown, "w") as f:
            f.write(text)
    print(text)


if __name__ == "__main__":
    sys.exit(main())
