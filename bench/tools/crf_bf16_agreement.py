#!/usr/bin/env python3
"""Call agreement of the opt-in bf16 LSTM recurrent weights (ESCPOD_NN_LSTM_BF16=1) with float32,
on the real RNA004 reads of shared/data/escapepod, for the four SeqTagger models.

Per model: `demux basecall` on LLR boundaries (same windows for both runs) with every gate opened
(--min-baseq 0 --min-mean-post 0), once in float32 and once with bf16; compared per read: the
decoded sequence, the nearest reference (the `barcode` column: with the gates open every read at
the head is called), the best/runner-up distances, and |baseq difference|.

    .venv/bin/python bench/tools/crf_bf16_agreement.py --escpod build/src/cli/escpod \
        [--shared ../shared/data]
"""
import argparse
import csv
import os
import subprocess
import tempfile

MODELS = ["b04_RNA004", "b96_RNA004", "b13_RNA004_mRNA", "b07_RNA004_tRNA"]


def run(cmd, env=None):
    subprocess.run([str(c) for c in cmd], check=True, env=env, stdout=subprocess.DEVNULL)


def rows(path):
    with open(path) as f:
        return {r["read_id"]: r for r in csv.DictReader(f)}


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--escpod", required=True)
    here = os.path.dirname(os.path.abspath(__file__))
    ap.add_argument("--shared", default=os.path.normpath(os.path.join(here, "..", "..", "..", "shared", "data")))
    a = ap.parse_args()
    reads = [os.path.join(a.shared, "escapepod/drna/yeast_trna_reads.pod5"),
             os.path.join(a.shared, "escapepod/charging/trna_reads.pod5")]
    wdx = os.path.join(a.shared, "warpdemux/WDX4_rna004_v1_0.json")
    f32_env = {k: v for k, v in os.environ.items() if k != "ESCPOD_NN_LSTM_BF16"}
    bf16_env = dict(f32_env, ESCPOD_NN_LSTM_BF16="1")
    print("| model | reads called | same sequence | same nearest reference | same best / runner-up distance "
          "| max abs baseq diff | median abs baseq diff |")
    print("|---|---|---|---|---|---|---|")
    with tempfile.TemporaryDirectory() as tmp:
        bounds = os.path.join(tmp, "b.csv")
        run([a.escpod, "demux", "detect", *reads, "--method", "llr", "--model", wdx, "-o", bounds, "-q"])
        for m in MODELS:
            out = {}
            for name, env in (("f32", f32_env), ("bf16", bf16_env)):
                out[name] = os.path.join(tmp, f"{m}.{name}.csv")
                run([a.escpod, "demux", "basecall", *reads, "--boundaries", bounds, "--model",
                     os.path.join(a.shared, "seqtagger", m), "--min-baseq", "0", "--min-mean-post", "0",
                     "-o", out[name], "-q"], env=env)
            x, y = rows(out["f32"]), rows(out["bf16"])
            assert x.keys() == y.keys()
            called = [k for k in x if x[k]["decoded_seq"]]
            same_seq = sum(x[k]["decoded_seq"] == y[k]["decoded_seq"] for k in called)
            same_ref = sum(x[k]["barcode"] == y[k]["barcode"] for k in called)
            same_dist = sum((x[k]["best_dist"], x[k]["second_best_dist"]) ==
                            (y[k]["best_dist"], y[k]["second_best_dist"]) for k in called)
            dq = sorted(abs(float(x[k]["baseq"]) - float(y[k]["baseq"])) for k in called)
            print(f"| {m} | {len(called)} | {same_seq} | {same_ref} | {same_dist} | {max(dq):.2f} | "
                  f"{dq[len(dq) // 2]:.2f} |")


if __name__ == "__main__":
    main()
