#!/usr/bin/env python3
"""Writes an escapepod CTC-CRF bundle (docs/formats.md §4.3) with random weights, for tests and
benchmarks: metadata.json, crf_encoder.onnx and (optionally) a pinned boundary CNN with its
sha256. Needs only numpy and onnx (both pinned in requirements.txt); no torch.

The encoder has the bonito CRF architecture: Conv1d+SiLU x3 (1->4 k5, 4->16 k5, 16->F k31
stride S pad 15), L LSTM layers of F (ONNX direction="reverse" on the first, then alternating),
MatMul F->4^(state_len+1), tanh, x5, blank score 2.0 padded before each state's four moves,
output time-major [T, batch, n_scores]. Weights are uniform in +-1/sqrt(fan_in), as PyTorch
initialises these layers, from a fixed seed.

    python make_crf_bundle.py OUT_DIR [--chunk 3000] [--stride 10] [--features 96] [--layers 5]
                              [--no-boundary] [--seed 1]
"""
import argparse
import hashlib
import json
import os

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

STATE_LEN, N_BASE = 4, 4


def _uniform(rng, shape, fan_in):
    bound = 1.0 / np.sqrt(fan_in)
    return rng.uniform(-bound, bound, size=shape).astype(np.float32)


def encoder_graph(chunk, stride, features, layers, seed):
    rng = np.random.default_rng(seed)
    inits, nodes = [], []

    def const(name, array):
        inits.append(numpy_helper.from_array(np.asarray(array), name))
        return name

    def silu(x, name):
        nodes.append(helper.make_node("Sigmoid", [x], [name + "_sig"]))
        nodes.append(helper.make_node("Mul", [x, name + "_sig"], [name]))
        return name

    x = "signal"
    ch = 1
    for i, (oc, k, s) in enumerate([(4, 5, 1), (16, 5, 1), (features, 31, stride)]):
        w = const(f"conv{i}_w", _uniform(rng, (oc, ch, k), ch * k))
        b = const(f"conv{i}_b", _uniform(rng, (oc,), ch * k))
        nodes.append(helper.make_node("Conv", [x, w, b], [f"conv{i}"], kernel_shape=[k], strides=[s],
                                      pads=[k // 2, k // 2]))
        x = silu(f"conv{i}", f"act{i}")
        ch = oc
    nodes.append(helper.make_node("Transpose", [x], ["tnc"], perm=[2, 0, 1]))
    x = "tnc"
    axes = const("axes1", np.array([1], dtype=np.int64))
    for i in range(layers):
        h = features
        w = const(f"lstm{i}_w", _uniform(rng, (1, 4 * h, h), h))
        r = const(f"lstm{i}_r", _uniform(rng, (1, 4 * h, h), h))
        b = const(f"lstm{i}_b", _uniform(rng, (1, 8 * h), h))
        nodes.append(helper.make_node("LSTM", [x, w, r, b], [f"lstm{i}_y"], hidden_size=h,
                                      direction="reverse" if i % 2 == 0 else "forward"))
        nodes.append(helper.make_node("Squeeze", [f"lstm{i}_y", axes], [f"lstm{i}"]))
        x = f"lstm{i}"
    moves = N_BASE ** STATE_LEN * N_BASE
    w = const("lin_w", _uniform(rng, (features, moves), features))
    b = const("lin_b", _uniform(rng, (moves,), features))
    nodes.append(helper.make_node("MatMul", [x, w], ["lin_mm"]))
    nodes.append(helper.make_node("Add", ["lin_mm", b], ["lin"]))
    nodes.append(helper.make_node("Tanh", ["lin"], ["tanh"]))
    nodes.append(helper.make_node("Mul", ["tanh", const("scale", np.array(5.0, dtype=np.float32))], ["scaled"]))
    nodes.append(helper.make_node("Reshape", ["scaled", const("shape4", np.array([0, 0, N_BASE ** STATE_LEN, N_BASE], dtype=np.int64))],
                                  ["moves4"]))
    nodes.append(helper.make_node("Pad", ["moves4", const("pads", np.array([0, 0, 0, 1, 0, 0, 0, 0], dtype=np.int64)),
                                          const("blank", np.array(2.0, dtype=np.float32))], ["padded"]))
    n_scores = N_BASE ** STATE_LEN * (N_BASE + 1)
    nodes.append(helper.make_node("Reshape", ["padded", const("shape3", np.array([0, 0, n_scores], dtype=np.int64))],
                                  ["scores"]))
    graph = helper.make_graph(
        nodes, "crf_encoder",
        [helper.make_tensor_value_info("signal", TensorProto.FLOAT, ["batch", 1, chunk])],
        [helper.make_tensor_value_info("scores", TensorProto.FLOAT, [chunk // stride, "batch", n_scores])],
        inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)], producer_name="make_crf_bundle.py")
    model.ir_version = 8
    onnx.checker.check_model(model)
    return model


def boundary_cnn(input_len):
    """A tiny stand-in boundary CNN ([N, 1, input_len] -> [N, 2, input_len]); only pinned here."""
    w = numpy_helper.from_array(np.full((2, 1, 3), 0.25, dtype=np.float32), "w")
    graph = helper.make_graph([helper.make_node("Conv", ["x", "w"], ["y"], pads=[1, 1])], "boundary",
                              [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["batch", 1, input_len])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["batch", 2, input_len])], [w])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)])
    model.ir_version = 8
    return model


def write_bundle(out, chunk=3000, stride=10, features=96, layers=5, boundary=True, seed=1):
    os.makedirs(out, exist_ok=True)
    onnx.save(encoder_graph(chunk, stride, features, layers, seed), os.path.join(out, "crf_encoder.onnx"))
    meta = {
        "format": "escapepod-crf-encoder/1",
        "onnx": "crf_encoder.onnx",
        "standardisation": {"mean": 62.405, "stdev": 10.232},
        "signal": {"chunk": chunk, "stride": stride},
        "crf": {"state_len": STATE_LEN, "n_base": N_BASE, "alphabet": ["N", "A", "C", "G", "T"]},
        "barcodes": [{"name": f"bc{i:02d}", "sequence": s} for i, s in
                     enumerate(["ACGTACGTACGTACGTACGT", "TTGGCCAATTGGCCAATTGG", "GATTACAGATTACAGATTAC"], 1)],
        "model": {"id": "random-test-bundle", "version": "0", "chemistry": "none",
                  "notes": "random weights for tests", "caveats": ["not trained"]},
        "metrics": {"accuracy": None},
        "unknown_key_is_ignored": True,
    }
    if boundary:
        data = boundary_cnn(1500).SerializeToString()
        with open(os.path.join(out, "boundary.onnx"), "wb") as f:
            f.write(data)
        meta["boundary"] = {
            "method": "cnn", "onnx": "boundary.onnx", "model_id": "test-cnn",
            "sha256": hashlib.sha256(data).hexdigest(),
            "input": {"min_obs_adapter": 1000, "max_obs_trace": 16000, "downscale_factor": 10,
                      "input_len": 1500, "pad_value": -5.0},
            "margin": 200, "clamp_max_shift": 0,
        }
    with open(os.path.join(out, "metadata.json"), "w") as f:
        json.dump(meta, f, indent=2)
    return meta


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("out")
    ap.add_argument("--chunk", type=int, default=3000)
    ap.add_argument("--stride", type=int, default=10)
    ap.add_argument("--features", type=int, default=96)
    ap.add_argument("--layers", type=int, default=5)
    ap.add_argument("--no-boundary", action="store_true")
    ap.add_argument("--seed", type=int, default=1)
    a = ap.parse_args()
    write_bundle(a.out, a.chunk, a.stride, a.features, a.layers, not a.no_boundary, a.seed)


if __name__ == "__main__":
    main()
