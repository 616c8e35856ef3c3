#!/usr/bin/env python3
"""CTC-CRF encoder time per read per core: escapepod's native encoder against onnxruntime and the
NumPy reference, one thread each, batch 1 (one window per call, as the CPU pipeline runs it).

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
NumPy runs once per geometry (it is ~30x slower; its time is for scale only).

    .venv/bin/python bench/tools/crf_encoder_bench.py --escpod build/src/cli/escpod \
        [--rounds 5] [--seconds 2] [--markdown OUT.md]
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


def ours_ms(escpod, model, length, seconds):
    """(wall ms, thread CPU ms) per call."""
    out = subprocess.run([escpod, "model", "bench", model, "--length", str(length), "--batch", "1", "-t", "1",
                          "--seconds", str(seconds)], capture_output=True, text=True, check=True).stdout
    return (float(re.search(r" ms_per_call=([0-9.]+)", out).group(1)),
            float(re.search(r"cpu_ms_per_call=([0-9.]+)", out).group(1)))


def ort_ms(path, length, seconds):
    so = ort.SessionOptions()
    so.intra_op_num_threads = 1
    so.inter_op_num_threads = 1
    so.execution_mode = ort.ExecutionMode.ORT_SEQUENTIAL
    sess = ort.InferenceSession(path, so, providers=["CPUExecutionProvider"])
    x = np.random.default_rng(1).standard_normal((1, 1, length)).astype(np.float32)
    for _ in range(3):
        sess.run(None, {"signal": x})
    n, t0, c0 = 0, time.perf_counter(), time.thread_time()
    while time.perf_counter() - t0 < seconds:
        sess.run(None, {"signal": x})  # one intra-op thread: runs on this thread
        n += 1
    return (time.perf_counter() - t0) / n * 1e3, (time.thread_time() - c0) / n * 1e3


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


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--escpod", required=True)
    ap.add_argument("--shared", default=os.path.normpath(os.path.join(ROOT, "..", "shared", "data")))
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--seconds", type=float, default=2.0)
    ap.add_argument("--markdown")
    a = ap.parse_args()
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        bundles = {}
        for chunk in (3000, 2000):
            d = os.path.join(tmp, f"bundle{chunk}")
            make_crf_bundle.write_bundle(d, chunk=chunk, boundary=False)
            bundles[chunk] = d
        b04 = os.path.join(a.shared, "seqtagger", "b04_RNA004")
        cases = [
            ("bundle geometry: chunk 3000, stride 10, 5 LSTM x 96 (random weights)", bundles[3000], 3000, True),
            ("same architecture, chunk 2000 (random weights)", bundles[2000], 2000, True),
            ("SeqTagger b04_RNA004 (real weights), window 2000", b04, 2000, False),
        ]
        for label, model, length, has_onnx in cases:
            ours, theirs = [], []
            for _ in range(a.rounds):
                ours.append(ours_ms(a.escpod, model, length, a.seconds))
                if has_onnx:
                    theirs.append(ort_ms(os.path.join(model, "crf_encoder.onnx"), length, a.seconds))
            sd = onnx_state_dict(os.path.join(model, "crf_encoder.onnx")) if has_onnx else \
                crf_reference.load_state_dict(os.path.join(model, "weights_39.tar"))
            ref = numpy_ms(sd, length)
            med = lambda xs, i: statistics.median(x[i] for x in xs)  # noqa: E731
            row = (label, med(ours, 0), med(ours, 1), med(theirs, 0) if theirs else None,
                   med(theirs, 1) if theirs else None, ref)
            rows.append(row)
            print(row, flush=True)
    lines = ["| geometry | ours wall / CPU ms | onnxruntime wall / CPU ms | ours / ort (wall) | ours / ort (CPU) | "
             "NumPy ref CPU ms | ours / NumPy (CPU) |", "|---|---|---|---|---|---|---|"]
    for label, ow, oc, tw, tc, ref in rows:
        if tw:
            lines.append(f"| {label} | {ow:.2f} / {oc:.2f} | {tw:.2f} / {tc:.2f} | {ow / tw:.2f} | {oc / tc:.2f} | "
                         f"{ref:.1f} | {oc / ref:.3f} |")
        else:
            lines.append(f"| {label} | {ow:.2f} / {oc:.2f} | n/a (no ONNX of these weights) | n/a | n/a | "
                         f"{ref:.1f} | {oc / ref:.3f} |")
    text = "\n".join(lines)
    print(text)
    if a.markdown:
        with open(a.markdown, "w") as f:
            f.write(text + "\n")


if __name__ == "__main__":
    main()
