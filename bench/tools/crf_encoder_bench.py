#!/usr/bin/env python3
"""CTC-CRF encoder time per read per core: escapepod's native encoder against onnxruntime and the
NumPy reference, one thread each, B windows per call (`--batch`, default 1: one window per call)
and times per window (a call's time / B), so batch sizes compare per read per core.

Geometries:
  - SeqTagger b04_RNA004 (real weights, built from weights_39.tar), window 2000: ours vs NumPy
    (there is no ONNX of these weights, and none may be made: the licence forbids converted copies).
  - escapepod bundle geometry (chunk 3000, stride 10, 5 LSTM layers of 96), random weights from
    tests/conformance/make_crf_bundle.py: ours (`escpod model bench` on the bundle folder) vs
    onnxruntime on the same ONNX file vs NumPy; and the same architecture at chunk 2000.

Engines are measured in interleaved rounds (ours, onnxruntime, ours, ...) so that load changes on
a shared machine hit both; the table gives the medians over rounds of wall ms and of the calling
thread's CPU ms per window (CPU time does not count waiting for a core, so it is the figure to
trust on a loaded machine; both engines run their kernels on that one thread), and the ratios.
NumPy runs once per geometry at batch 1 (it is ~30x slower; its time is for scale only).
With several batch sizes (`--batch 1,4,8,16`) every round runs each engine at each B in turn, and
a second table gives ours at each B against onnxruntime's best per-window time at any B.
`--variant NAME=VALUE` adds ours with that environment variable set (e.g. ONEDNN_MAX_CPU_ISA=AVX2)
as a third engine in the same rounds, with its own rows; `--precision P` instead adds ours with
`model bench --precision P` (the encoder as `demux --encoder-precision P` runs it).

    .venv/bin/python bench/tools/crf_encoder_bench.py --escpod build/src/cli/escpod \
        [--rounds 5] [--seconds 2] [--batch 1,4,8,16] [--geometries bundle3000,bundle2000,b04] \
        [--variant NAME=VALUE | --precision bf16] [--markdown OUT.md]
"""
import os

for _v in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS"):
    os.environ[_v] = "1"  # before numpy is imported: the reference runs on one core too

import argparse  # noqa: E402
import re  # noqa: E402
import statistics  # noqa: E402
import subprocess  # noqa: E402
import sys  # noqa: E402
import tempfile  # noqa: E402
import time  # noqa: E402

import numpy as np  # noqa: E402
import onnxruntime as ort  # noqa: E402

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.normpath(os.path.join(HERE, "..", ".."))
sys.path.insert(0, os.path.join(ROOT, "tests", "conformance"))
import crf_reference  # noqa: E402
import make_crf_bundle  # noqa: E402


def ours_ms(escpod, model, length, seconds, batch, env=None, extra=()):
    """(wall ms, thread CPU ms) per window: a call of `batch` windows, divided by `batch`."""
    out = subprocess.run([escpod, "model", "bench", model, "--length", str(length), "--batch", str(batch), "-t", "1",
                          "--seconds", str(seconds), *extra], capture_output=True, text=True, check=True,
                         env=env).stdout
    return (float(re.search(r" ms_per_call=([0-9.]+)", out).group(1)) / batch,
            float(re.search(r"cpu_ms_per_call=([0-9.]+)", out).group(1)) / batch)


def ort_session(path):
    so = ort.SessionOptions()
    so.intra_op_num_threads = 1
    so.inter_op_num_threads = 1
    so.execution_mode = ort.ExecutionMode.ORT_SEQUENTIAL
    return ort.InferenceSession(path, so, providers=["CPUExecutionProvider"])


def ort_ms(sess, length, seconds, batch):
    """(wall ms, thread CPU ms) per window, as ours_ms."""
    x = np.random.default_rng(1).standard_normal((batch, 1, length)).astype(np.float32)
    for _ in range(3):
        sess.run(None, {"signal": x})
    n, t0, c0 = 0, time.perf_counter(), time.thread_time()
    while time.perf_counter() - t0 < seconds:
        sess.run(None, {"signal": x})  # one intra-op thread: runs on this thread
        n += 1
    return (time.perf_counter() - t0) / n / batch * 1e3, (time.thread_time() - c0) / n / batch * 1e3


def numpy_ms(sd, length, reps=3):
    """Thread CPU ms per window (BLAS limited to one thread)."""
    x = np.random.default_rng(1).standard_normal((1, length)).astype(np.float32)
    crf_reference.encoder(sd, x)
    c0 = time.process_time()
    for _ in range(reps):
        crf_reference.encoder(sd, x)
    return (time.process_time() - c0) / reps * 1e3


def onnx_state_dict(path):
    """The bundle ONNX's weights in torch state_dict naming, for the NumPy reference's timing."""
    import onnx
    from onnx import numpy_helper
    w = {i.name: numpy_helper.to_array(i) for i in onnx.load(path).graph.initializer}
    sd = {}
    for i in range(3):
        sd[f"encoder.{i}.conv.weight"], sd[f"encoder.{i}.conv.bias"] = w[f"conv{i}_w"], w[f"conv{i}_b"]
    layer = 0
    while f"lstm{layer}_w" in w:  # gate order differs from torch's; irrelevant for timing
        p = f"encoder.{4 + layer}.rnn."
        sd[p + "weight_ih_l0"], sd[p + "weight_hh_l0"] = w[f"lstm{layer}_w"][0], w[f"lstm{layer}_r"][0]
        sd[p + "bias_ih_l0"], sd[p + "bias_hh_l0"] = np.split(w[f"lstm{layer}_b"][0], 2)
        layer += 1
    sd[f"encoder.{4 + layer}.linear.weight"] = w["lin_w"].T
    sd[f"encoder.{4 + layer}.linear.bias"] = w["lin_b"]
    return sd


GEOMETRIES = {
    "bundle3000": ("bundle geometry: chunk 3000, stride 10, 5 LSTM x 96 (random weights)", 3000, True),
    "bundle2000": ("same architecture, chunk 2000 (random weights)", 2000, True),
    "b04": ("SeqTagger b04_RNA004 (real weights), window 2000", 2000, False),
}


def measure(a, model, length, has_onnx):
    """{batch: ([ours (wall, cpu)] per round, [onnxruntime ...], [ours with --variant ...])}, engines
    alternating per batch."""
    sess = ort_session(os.path.join(model, "crf_encoder.onnx")) if has_onnx else None
    variant_env, variant_args = None, ()
    if a.variant:
        name, value = a.variant.split("=", 1)
        variant_env = dict(os.environ, **{name: value})
    elif a.precision:
        variant_env, variant_args = dict(os.environ), ("--precision", a.precision)
    times = {b: ([], [], []) for b in a.batch}
    for _ in range(a.rounds):
        for b in a.batch:
            times[b][0].append(ours_ms(a.escpod, model, length, a.seconds, b))
            if sess:
                times[b][1].append(ort_ms(sess, length, a.seconds, b))
            if variant_env:
                times[b][2].append(ours_ms(a.escpod, model, length, a.seconds, b, variant_env, variant_args))
    return times


def tables(rows, batches):
    """The per-batch table (same B for both engines) and, with several B, ours against onnxruntime's
    best per-window CPU time at any B."""
    lines = ["| geometry | B | ours wall / CPU ms per window | onnxruntime wall / CPU ms per window | "
             "ours / ort (wall) | ours / ort (CPU) | NumPy ref CPU ms (B 1) | ours / NumPy (CPU) |",
             "|---|---|---|---|---|---|---|---|"]
    best_lines = ["| geometry | B | ours CPU ms per window | onnxruntime best CPU ms per window (at B) | "
                  "ours / ort best (CPU) |", "|---|---|---|---|---|"]
    for label, per_b, ref in rows:
        ort_best = min(((tc, b) for b, (_, _, _, tc) in per_b.items() if tc), default=None)
        for b, (ow, oc, tw, tc) in per_b.items():
            theirs = f"{tw:.2f} / {tc:.2f} | {ow / tw:.2f} | {oc / tc:.2f}" if tw else \
                "n/a (no ONNX of these weights) | n/a | n/a"
            lines.append(f"| {label} | {b} | {ow:.2f} / {oc:.2f} | {theirs} | {ref:.1f} | {oc / ref:.3f} |")
            if ort_best:
                best_lines.append(f"| {label} | {b} | {oc:.3f} | {ort_best[0]:.3f} (B {ort_best[1]}) | "
                                  f"{oc / ort_best[0]:.2f} |")
    text = "\n".join(lines)
    if len(batches) > 1:
        text += "\n\n" + "\n".join(best_lines)
    return text


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--escpod", required=True)
    ap.add_argument("--shared", default=os.path.normpath(os.path.join(ROOT, "..", "shared", "data")))
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--seconds", type=float, default=2.0)
    ap.add_argument("--batch", type=lambda t: [int(v) for v in t.split(",")], default=[1],
                    help="windows per call, comma-separated (default 1)")
    ap.add_argument("--geometries", type=lambda t: t.split(","), default=list(GEOMETRIES),
                    help="comma-separated subset of " + ",".join(GEOMETRIES))
    ap.add_argument("--variant", help="NAME=VALUE: also time ours with this environment variable set, in the "
                    "same rounds (e.g. ONEDNN_MAX_CPU_ISA=AVX2, an ISA cap)")
    ap.add_argument("--precision", help="also time ours with `model bench --precision P` (as --encoder-precision "
                    "P runs the encoder), in the same rounds; not with --variant")
    ap.add_argument("--markdown")
    a = ap.parse_args()
    if a.variant and a.precision:
        ap.error("--variant and --precision each add the one variant: give one")
    if any(b < 1 for b in a.batch) or any(g not in GEOMETRIES for g in a.geometries):
        ap.error(f"--batch takes positive integers, --geometries names from {','.join(GEOMETRIES)}")
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        for key in a.geometries:
            label, length, has_onnx = GEOMETRIES[key]
            if has_onnx:
                model = os.path.join(tmp, f"bundle{length}")
                make_crf_bundle.write_bundle(model, chunk=length, boundary=False)
            else:
                model = os.path.join(a.shared, "seqtagger", "b04_RNA004")
            times = measure(a, model, length, has_onnx)
            sd = onnx_state_dict(os.path.join(model, "crf_encoder.onnx")) if has_onnx else \
                crf_reference.load_state_dict(os.path.join(model, "weights_39.tar"))
            ref = numpy_ms(sd, length)
            med = lambda xs, i: statistics.median(x[i] for x in xs) if xs else None  # noqa: E731
            per_b = {b: (med(o, 0), med(o, 1), med(t, 0), med(t, 1)) for b, (o, t, _) in times.items()}
            rows.append((label, per_b, ref))
            print(rows[-1], flush=True)
            if a.variant or a.precision:
                per_b = {b: (med(v, 0), med(v, 1), med(t, 0), med(t, 1)) for b, (_, t, v) in times.items()}
                what = a.variant or f"--precision {a.precision}"
                rows.append((f"{label}, ours with {what}", per_b, ref))
                print(rows[-1], flush=True)
    text = tables(rows, a.batch)
    print(text)
    if a.markdown:
        with open(a.markdown, "w") as f:
            f.write(text + "\n")


if __name__ == "__main__":
    main()
