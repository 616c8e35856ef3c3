#!/usr/bin/env python3
"""Confidence of the CTC-CRF head's calls on barcode-free reads (issue 14).

Runs `escpod demux` with each SeqTagger model in shared/data/seqtagger on the 200 real RNA004
reads of shared/data/escapepod (drna/yeast_trna_reads.pod5 + charging/trna_reads.pod5, tRNA
reads that carry no SeqTagger barcode), once per window/decoder variant, and prints a Markdown
table of the confidence columns of the reads that reached the head (min / median / max), the
reads each default gate would have let through, and the calls that passed every gate.

usage: crf_head_confidence.py ESCPOD SHARED_DATA [OUT.md]
"""
import csv
import pathlib
import statistics
import subprocess
import sys
import tempfile

MODELS = ["b04_RNA004", "b96_RNA004", "b13_RNA004_mRNA", "b07_RNA004_tRNA"]
# (name, extra escpod arguments); the first is the default configuration.
VARIANTS = [
    ("default", []),
    ("posterior decoder", ["--decoder", "posterior"]),
    ("before-boundary window", ["--crf-window", "before-boundary"]),
    ("rolling-start window", ["--crf-window", "rolling-start"]),
    ("med/MAD over prefix (v1)", ["--crf-norm", "prefix"]),
    ("LLR boundaries", ["--method", "llr"]),
    ("LLR boundaries, posterior decoder", ["--method", "llr", "--decoder", "posterior"]),
]
COLUMNS = ["edit_dist", "margin", "mean_post", "baseq", "crf_logp", "crf_margin"]
GATES = {"0": "pass", "1": "edit margin", "2": "crf margin", "3": "crf prob", "4": "baseq", "5": "mean posterior"}


def run(escpod, shared, model, extra, out_csv):
    inputs = [shared / "escapepod/drna/yeast_trna_reads.pod5", shared / "escapepod/charging/trna_reads.pod5"]
    cnn = shared / "warpdemux/adapted_cnn_rna004_130bps@v0.2.4.onnx"
    cmd = [escpod, "demux", *inputs, "--model", shared / "seqtagger" / model, "--cnn-model", cnn,
           "--classifications", out_csv, "--ref-scores", "-t", "2", *extra]
    subprocess.run([str(c) for c in cmd], check=True, capture_output=True)
    with open(out_csv) as f:
        return list(csv.DictReader(f))


def summary(values):
    if not values:
        return "-"
    return f"{min(values):.2f} / {statistics.median(values):.2f} / {max(values):.2f}"


def main():
    escpod, shared = pathlib.Path(sys.argv[1]), pathlib.Path(sys.argv[2])
    lines = ["| model | variant | rows | at head | classified | first failing gate | "
             + " | ".join(f"{c} min/med/max" for c in COLUMNS) + " |",
             "|" + "---|" * (6 + len(COLUMNS))]
    with tempfile.TemporaryDirectory() as tmp:
        for model in MODELS:
            for name, extra in VARIANTS:
                rows = run(escpod, shared, model, extra, pathlib.Path(tmp) / f"{model}_{len(lines)}.csv")
                at_head = [r for r in rows if r["edit_dist"] != ""]
                gates = {}
                for r in at_head:
                    g = GATES[str(int(float(r["gate"])))]
                    gates[g] = gates.get(g, 0) + 1
                cells = []
                for c in COLUMNS:
                    if c == "margin":
                        vals = [float(r["second_dist"]) - float(r["edit_dist"]) for r in at_head]
                    else:
                        vals = [float(r[c]) for r in at_head if r.get(c, "") not in ("", "nan")]
                    cells.append(summary(vals))
                classified = sum(r["barcode"] != "unclassified" for r in rows)
                gate_text = ", ".join(f"{k} {v}" for k, v in sorted(gates.items()))
                lines.append(f"| {model} | {name} | {len(rows)} | {len(at_head)} | {classified} | {gate_text} | "
                             + " | ".join(cells) + " |")
    text = "\n".join(lines) + "\n"
    print(text)
    if len(sys.argv) > 3:
        pathlib.Path(sys.argv[3]).write_text(text)


if __name__ == "__main__":
    main()
