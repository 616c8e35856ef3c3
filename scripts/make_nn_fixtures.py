#!/usr/bin/env python3
"""Make the small ONNX fixtures and reference outputs for the nn engine tests.

Needs torch, onnx, onnxruntime and numpy (a private venv; CI does not run this):
    python3 -m venv /tmp/nnvenv && /tmp/nnvenv/bin/pip install torch onnx onnxruntime numpy
    /tmp/nnvenv/bin/python scripts/make_nn_fixtures.py [--out tests/data/nn] [--full-chunk DIR]

What it writes (float32 C-order .npy; models gzip-compressed to keep the repo small):
  crf_h96_s10.onnx.gz   Bonito-architecture CTC-CRF encoder: Conv1d+SiLU x3 (kernel 5, 5, 31;
                        last stride 10), five LSTMs (96) of alternating direction, reversals
                        exported as torch.flip (Slice with step -1), MatMul to 256*4 move
                        scores, tanh, x5, constant pad of the blank score 2.0 -> [T, N, 1280].
                        opset 13, exported at chunk 2000.
  crf_h128_s5.onnx.gz   Same family, hidden 128, last stride 5, state_len 3 (-> [T, N, 320]);
                        exported at chunk 3000 with opset 17, reversed layers rewritten to ONNX
                        LSTM direction="reverse" (the other form exporters emit).
  tcn_boundary.onnx.gz  Boundary TCN: dilated Conv1d (1, 2, 4, 8) with residual adds, one
                        BatchNormalization after a conv (exported unfolded), sigmoid head,
                        [N, 1, L] -> [N, 2, L]. opset 15.
  <model>.input.npy     three windows, [3, 1, L]; CRF tests use a short chunk (the graphs are
                        made chunk-agnostic: Reshape uses 0 to copy T) to keep the files small.
  <model>.expected.npy  onnxruntime's output for that input (batch 3).
Weights are random (fixed seeds) and rounded to multiples of 1/256 so the gzip files compress.
The script also checks that onnxruntime's outputs at batch 1, 7 and 64 (rows tiled from the
three windows) agree with the stored batch-3 output, and prints the largest difference.
"""
import argparse
import gzip
import os
import sys

import numpy as np
import onnx
import onnxruntime as ort
import torch
from onnx import helper, numpy_helper

Q = 256.0  # weight grid


def quantise(module):
    with torch.no_grad():
        for p in module.parameters():
            p.copy_(torch.round(p * Q) / Q)
        for name, b in module.named_buffers():
            if b.dtype.is_floating_point:
                b.copy_(torch.round(b * Q) / Q)


class Rnn(torch.nn.Module):
    """Bonito's RNN wrapper: a unidirectional LSTM, time reversed around it when reverse."""

    def __init__(self, size, reverse):
        super().__init__()
        self.rnn = torch.nn.LSTM(size, size)
        self.reverse = reverse

    def forward(self, x):
        if self.reverse:
            x = x.flip(0)
        y, _ = self.rnn(x)
        if self.reverse:
            y = y.flip(0)
        return y


class CrfEncoder(torch.nn.Module):
    def __init__(self, features, stride, winlen, state_len, n_base, chunk, scale=5.0, blank=2.0):
        super().__init__()
        self.conv = torch.nn.ModuleList([
            torch.nn.Conv1d(1, 4, 5, padding=2),
            torch.nn.Conv1d(4, 16, 5, padding=2),
            torch.nn.Conv1d(16, features, winlen, stride=stride, padding=winlen // 2),
        ])
        self.rnns = torch.nn.Sequential(*[Rnn(features, reverse=(5 - i) % 2 == 1) for i in range(5)])
        self.n_states = n_base ** state_len
        self.n_base = n_base
        self.linear = torch.nn.Linear(features, self.n_states * n_base)
        self.scale = scale
        self.blank = blank
        self.t = chunk // stride

    def forward(self, x):
        for c in self.conv:
            x = torch.nn.functional.silu(c(x))
        x = x.permute(2, 0, 1)  # [T, N, C]
        x = self.rnns(x)
        scores = torch.tanh(self.linear(x)) * self.scale
        # T is a constant here; the graph is patched afterwards so Reshape copies it (0).
        scores = scores.reshape(self.t, -1, self.n_states, self.n_base)
        scores = torch.nn.functional.pad(scores, (1, 0), value=self.blank)
        return scores.reshape(self.t, -1, self.n_states * (self.n_base + 1))


class Tcn(torch.nn.Module):
    def __init__(self, ch=16):
        super().__init__()
        self.inp = torch.nn.Conv1d(1, ch, 3, padding=1)
        self.blocks = torch.nn.ModuleList()
        for d in (1, 2, 4, 8):
            self.blocks.append(torch.nn.ModuleList([
                torch.nn.Conv1d(ch, ch, 3, padding=d, dilation=d),
                torch.nn.Conv1d(ch, ch, 3, padding=d, dilation=d)]))
        self.bn = torch.nn.BatchNorm1d(ch)
        self.head = torch.nn.Conv1d(ch, 2, 1)

    def forward(self, x):
        x = torch.relu(self.inp(x))
        for i, (a, b) in enumerate(self.blocks):
            h = torch.relu(a(x))
            h = b(h)
            if i == 1:
                h = self.bn(h)
            x = torch.relu(x + h)
        return torch.sigmoid(self.head(x))


def export(model, example, path, opset, in_dims, out_dims):
    model.eval()
    torch.onnx.export(model, (example,), path, input_names=["signal"], output_names=["scores"],
                      dynamic_axes={"signal": in_dims, "scores": out_dims}, opset_version=opset,
                      do_constant_folding=True, dynamo=False,
                      training=torch.onnx.TrainingMode.EVAL)
    return onnx.load(path)


def make_chunk_agnostic(m, t_const):
    """Reshape targets [T, -1, ...] -> [0, -1, ...]; input length and output T symbolic."""
    g = m.graph
    consts = {i.name: i for i in g.initializer}
    for n in g.node:
        if n.op_type == "Constant":
            consts[n.output[0]] = n
    for n in g.node:
        if n.op_type != "Reshape":
            continue
        src = consts.get(n.input[1])
        if src is None:
            continue
        if isinstance(src, onnx.TensorProto):
            arr = numpy_helper.to_array(src).copy()
            if arr.size and arr[0] == t_const:
                arr[0] = 0
                src.CopyFrom(numpy_helper.from_array(arr, src.name))
        else:
            attr = src.attribute[0]
            arr = numpy_helper.to_array(attr.t).copy()
            if arr.size and arr[0] == t_const:
                arr[0] = 0
                attr.t.CopyFrom(numpy_helper.from_array(arr, attr.t.name))
    g.input[0].type.tensor_type.shape.dim[2].dim_param = "chunk"
    g.output[0].type.tensor_type.shape.dim[0].dim_param = "T"
    return m


def reverse_slices_to_lstm_direction(m):
    """Slice(step -1 on axis 0) -> LSTM -> Squeeze -> Slice(step -1)  =>  LSTM(direction=reverse)."""
    g = m.graph
    consts = {}
    for i in g.initializer:
        consts[i.name] = numpy_helper.to_array(i)
    for n in g.node:
        if n.op_type == "Constant":
            consts[n.output[0]] = numpy_helper.to_array(n.attribute[0].t)
    producers = {o: n for n in g.node for o in n.output}
    consumers = {}
    for n in g.node:
        for i in n.input:
            consumers.setdefault(i, []).append(n)

    def is_flip(n):
        return (n.op_type == "Slice" and len(n.input) >= 5 and
                consts.get(n.input[4]) is not None and int(consts[n.input[4]].ravel()[0]) == -1 and
                int(consts[n.input[3]].ravel()[0]) == 0)

    removed = set()
    for lstm in [n for n in g.node if n.op_type == "LSTM"]:
        pre = producers.get(lstm.input[0])
        if pre is None or not is_flip(pre):
            continue
        sq = [c for c in consumers.get(lstm.output[0], []) if c.op_type == "Squeeze"]
        if len(sq) != 1:
            continue
        post = consumers.get(sq[0].output[0], [])
        if len(post) != 1 or not is_flip(post[0]):
            continue
        post = post[0]
        if any(c.op_type not in ("LSTM", "Shape") for c in consumers.get(pre.output[0], [])):
            continue
        for c in consumers.get(pre.output[0], []):  # the LSTM and the Shape of its zero state
            for k, name in enumerate(c.input):
                if name == pre.output[0]:
                    c.input[k] = pre.input[0]
        lstm.attribute.append(helper.make_attribute("direction", "reverse"))
        for c in g.node:
            for k, name in enumerate(c.input):
                if name == post.output[0]:
                    c.input[k] = sq[0].output[0]
        for o in g.output:
            assert o.name != post.output[0]
        removed.add(id(pre))
        removed.add(id(post))
    keep = [n for n in g.node if id(n) not in removed]
    del g.node[:]
    g.node.extend(keep)
    # Constant nodes feeding nothing any more are dropped.
    used = {i for n in g.node for i in n.input} | {o.name for o in g.output}
    keep = [n for n in g.node if n.op_type != "Constant" or n.output[0] in used]
    del g.node[:]
    g.node.extend(keep)
    return m


def save_gz(m, path):
    data = m.SerializeToString()
    with gzip.GzipFile(path, "wb", mtime=0) as f:
        f.write(data)
    return data


def run_ort(model_bytes, x, threads=1):
    so = ort.SessionOptions()
    so.intra_op_num_threads = threads
    s = ort.InferenceSession(model_bytes, so, providers=["CPUExecutionProvider"])
    return s.run(None, {s.get_inputs()[0].name: x})[0]


def check_batches(model_bytes, x, y, batch_axis):
    worst = 0.0
    for b in (1, 7, 64):
        idx = np.arange(b) % x.shape[0]
        yb = run_ort(model_bytes, np.ascontiguousarray(x[idx]))
        ref = np.take(y, idx, axis=batch_axis)
        worst = max(worst, float(np.max(np.abs(yb - ref))))
    return worst


def signal(rng, n, length):
    # Standardised-looking signal: piecewise-constant levels plus noise.
    out = np.empty((n, 1, length), np.float32)
    for i in range(n):
        levels = rng.normal(0, 1, size=length // 8 + 1).repeat(8)[:length]
        out[i, 0] = levels + rng.normal(0, 0.2, size=length)
    return out


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", default=os.path.join(os.path.dirname(__file__), "..", "tests", "data", "nn"))
    ap.add_argument("--full-chunk", default=None,
                    help="also write uncompressed .onnx copies here (for benchmarks)")
    args = ap.parse_args()
    os.makedirs(args.out, exist_ok=True)
    tmp = os.path.join(args.out, "_export.onnx")
    rng = np.random.default_rng(20250)
    report = []

    specs = [
        # name, features, stride, state_len, export chunk, opset, test chunk, reverse form
        ("crf_h96_s10", 96, 10, 4, 2000, 13, 600, "flip"),
        ("crf_h128_s5", 128, 5, 3, 3000, 17, 450, "direction"),
    ]
    for name, feat, stride, state_len, chunk, opset, test_chunk, form in specs:
        torch.manual_seed(feat * 1000 + stride)
        model = CrfEncoder(feat, stride, 31, state_len, 4, chunk)
        quantise(model)
        m = export(model, torch.zeros(2, 1, chunk), tmp, opset, {0: "batch"}, {1: "batch"})
        m = make_chunk_agnostic(m, chunk // stride)
        if form == "direction":
            m = reverse_slices_to_lstm_direction(m)
        onnx.checker.check_model(m)
        data = save_gz(m, os.path.join(args.out, name + ".onnx.gz"))
        if args.full_chunk:
            os.makedirs(args.full_chunk, exist_ok=True)
            with open(os.path.join(args.full_chunk, name + ".onnx"), "wb") as f:
                f.write(data)
        x = signal(rng, 3, test_chunk)
        y = run_ort(data, x)
        with torch.no_grad():
            yt = model(torch.from_numpy(x)) if test_chunk == chunk else None
        # torch cross-check at the export chunk (the graph patch must not change results).
        xf = signal(rng, 2, chunk)
        with torch.no_grad():
            torch_full = model(torch.from_numpy(xf)).numpy()
        ort_full = run_ort(data, xf)
        np.save(os.path.join(args.out, name + ".input.npy"), x)
        np.save(os.path.join(args.out, name + ".expected.npy"), y)
        worst = check_batches(data, x, y, batch_axis=1)
        report.append(f"{name}: out {list(y.shape)}, ort vs torch at chunk {chunk}: "
                      f"{np.max(np.abs(torch_full - ort_full)):.3g}; ort batch 1/7/64 vs stored: {worst:.3g}")
        del yt

    torch.manual_seed(7)
    tcn = Tcn()
    with torch.no_grad():
        tcn.bn.running_mean.uniform_(-0.5, 0.5)
        tcn.bn.running_var.uniform_(0.5, 2.0)
        tcn.bn.weight.uniform_(0.5, 1.5)
        tcn.bn.bias.uniform_(-0.2, 0.2)
    quantise(tcn)
    m = export(tcn, torch.zeros(2, 1, 1500), tmp, 15, {0: "batch", 2: "length"}, {0: "batch", 2: "length"})
    # The exporter folds eval BatchNorm into the conv; put an explicit BatchNormalization node
    # back so the loader's folding is exercised: conv' = conv, then BN with the same statistics.
    ops = [n.op_type for n in m.graph.node]
    if "BatchNormalization" not in ops:
        m = unfold_bn(m, tcn)
    onnx.checker.check_model(m)
    data = save_gz(m, os.path.join(args.out, "tcn_boundary.onnx.gz"))
    if args.full_chunk:
        with open(os.path.join(args.full_chunk, "tcn_boundary.onnx"), "wb") as f:
            f.write(data)
    x = signal(rng, 3, 1500)
    y = run_ort(data, x)
    with torch.no_grad():
        yt = tcn(torch.from_numpy(x)).numpy()
    np.save(os.path.join(args.out, "tcn_boundary.input.npy"), x)
    np.save(os.path.join(args.out, "tcn_boundary.expected.npy"), y)
    worst = check_batches(data, x, y, batch_axis=0)
    report.append(f"tcn_boundary: out {list(y.shape)}, ort vs torch {np.max(np.abs(yt - y)):.3g}; "
                  f"ort batch 1/7/64 vs stored: {worst:.3g}; ops {sorted(set(n.op_type for n in m.graph.node))}")
    os.remove(tmp)
    write_refusal_models(args.out)
    for line in report:
        print(line)


def write_refusal_models(out):
    """Tiny graphs the loader must refuse, each for one reason (the test checks the message)."""
    w = numpy_helper.from_array(np.ones((2, 1, 3), np.float32), "w")
    x = helper.make_tensor_value_info("x", onnx.TensorProto.FLOAT, ["batch", 1, 16])
    y = helper.make_tensor_value_info("y", onnx.TensorProto.FLOAT, ["batch", 2, 14])
    cases = {
        # an operator outside the supported set
        "refuse_softmax": ([helper.make_node("Conv", ["x", "w"], ["c"], name="conv0"),
                            helper.make_node("Softmax", ["c"], ["y"], name="the_softmax")], [w], 17),
        # an opset outside 13..17
        "refuse_opset": ([helper.make_node("Conv", ["x", "w"], ["y"], name="conv0")], [w], 19),
        # grouped convolution
        "refuse_group": ([helper.make_node("Conv", ["x", "w2"], ["y"], name="grouped", group=2)],
                         [numpy_helper.from_array(np.ones((2, 1, 3), np.float32), "w2")], 17),
    }
    for name, (nodes, inits, opset) in cases.items():
        xi = x
        if name == "refuse_group":
            xi = helper.make_tensor_value_info("x", onnx.TensorProto.FLOAT, ["batch", 2, 16])
        g = helper.make_graph(nodes, name, [xi], [y], inits)
        m = helper.make_model(g, opset_imports=[helper.make_opsetid("", opset)])
        m.ir_version = 8
        with open(os.path.join(out, name + ".onnx"), "wb") as f:
            f.write(m.SerializeToString())


def unfold_bn(m, tcn):
    """Find the conv that produced block 1's second conv output and append a BatchNormalization
    with the module's statistics, restoring that conv's unfolded weights."""
    g = m.graph
    conv_w = tcn.blocks[1][1].weight.detach().numpy()
    conv_b = tcn.blocks[1][1].bias.detach().numpy()
    inits = {i.name: i for i in g.initializer}
    target = None
    for n in g.node:
        if n.op_type != "Conv":
            continue
        w = inits[n.input[1]]
        if tuple(w.dims) == conv_w.shape and n.attribute and \
                [a for a in n.attribute if a.name == "dilations"][0].ints[0] == 2:
            convs = [c for c in g.node if c.op_type == "Conv" and
                     [a for a in c.attribute if a.name == "dilations"][0].ints[0] == 2]
            target = convs[1]
            break
    assert target is not None
    inits[target.input[1]].CopyFrom(numpy_helper.from_array(conv_w, target.input[1]))
    inits[target.input[2]].CopyFrom(numpy_helper.from_array(conv_b, target.input[2]))
    bn = tcn.bn
    names = []
    for suffix, t in (("scale", bn.weight), ("bias", bn.bias), ("mean", bn.running_mean), ("var", bn.running_var)):
        nm = "bn." + suffix
        g.initializer.append(numpy_helper.from_array(t.detach().numpy().astype(np.float32), nm))
        names.append(nm)
    out = target.output[0]
    mid = out + "_prebn"
    target.output[0] = mid
    node = helper.make_node("BatchNormalization", [mid] + names, [out], epsilon=float(bn.eps),
                            name="bn_restored")
    idx = list(g.node).index(target)
    g.node.insert(idx + 1, node)
    return m


if __name__ == "__main__":
    sys.exit(main())
