#!/usr/bin/env python3
"""Call agreement of an opt-in encoder precision (default int8 LSTM recurrent weights:
`--encoder-precision int8`, nn::LoadOptions::lstm_int8) with float32, on the 200 real RNA004 reads of shared/data/escapepod, for the four
SeqTagger models.

Per model: `demux basecall` on LLR boundaries (the same windows for both runs) with every gate
opened (--min-baseq 0 --min-mean-post 0, so every read at the head gets its nearest reference),
once in float32 and once with the variant; compared per read: the decoded sequence, the nearest
reference (`barcode`), the best / runner-up distances (edit_dist, second_dist), and the difference
of the call's quality (baseq with the beam decoder, else mean_post). A second table does the same
with the default gates: the final calls (`barcode`, classified or `unclassified`).

    .venv/bin/python bench/tools/crf_int8_agreement.py --escpod build/src/cli/escpod \\
        [--shared ../shared/data] [--encoder-precision int8|bf16|f32-fma] [--env NAME=VALUE[,...]]

--env runs the variant with those environment variables set as well (e.g. ONEDNN_MAX_CPU_ISA=AVX2).
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


def basecall(a, reads, bounds, model, out, env, open_gates, extra=()):
    gates = ["--min-baseq", "0", "--min-mean-post", "0"] if open_gates else []
    run([a.escpod, "demux", "basecall", *reads, "--boundaries", bounds, "--model",
         os.path.join(a.shared, "seqtagger", model), *gates, "-o", out, "-q", *extra], env=env)
    return rows(out)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--escpod", required=True)
    here = os.path.dirname(os.path.abspath(__file__))
    ap.add_argument("--shared", default=os.path.normpath(os.path.join(here, "..", "..", "..", "shared", "data")))
    ap.add_argument("--encoder-precision", default="int8", help="the variant's `--encoder-precision` (default int8)")
    ap.add_argument("--env", help="NAME=VALUE[,NAME=VALUE...]: environment variables of the variant's runs")
    a = ap.parse_args()
    variant = dict(kv.split("=", 1) for kv in a.env.split(",")) if a.env else {}
    extra = ("--encoder-precision", a.encoder_precision)
    reads = [os.path.join(a.shared, "escapepod/drna/yeast_trna_reads.pod5"),
             os.path.join(a.shared, "escapepod/charging/trna_reads.pod5")]
    wdx = os.path.join(a.shared, "warpdemux/WDX4_rna004_v1_0.json")
    base_env = {k: v for k, v in os.environ.items() if k not in variant}
    variant_env = dict(base_env, **variant)
    open_lines = ["| model | reads called | same sequence | same nearest reference | same best / runner-up distance "
                  "| max abs quality diff | median abs quality diff |", "|---|---|---|---|---|---|---|"]
    gated_lines = ["| model | rows | same final call (default gates) | classified f32 / variant |", "|---|---|---|---|"]
    with tempfile.TemporaryDirectory() as tmp:
        bounds = os.path.join(tmp, "b.csv")
        run([a.escpod, "demux", "detect", *reads, "--method", "llr", "--model", wdx, "-o", bounds, "-q"])
        for m in MODELS:
            x = basecall(a, reads, bounds, m, os.path.join(tmp, f"{m}.f32.csv"), base_env, True)
            y = basecall(a, reads, bounds, m, os.path.join(tmp, f"{m}.var.csv"), variant_env, True, extra)
            assert x.keys() == y.keys()
            called = [k for k in x if x[k]["decoded_seq"]]
            same_seq = sum(x[k]["decoded_seq"] == y[k]["decoded_seq"] for k in called)
            same_ref = sum(x[k]["barcode"] == y[k]["barcode"] for k in called)
            same_dist = sum((x[k]["edit_dist"], x[k]["second_dist"]) ==
                            (y[k]["edit_dist"], y[k]["second_dist"]) for k in called)
            q = "baseq" if "baseq" in x[called[0]] else "mean_post"  # baseq with the beam decoder
            dq = sorted(abs(float(x[k][q]) - float(y[k][q])) for k in called)
            open_lines.append(f"| {m} | {len(called)} | {same_seq} | {same_ref} | {same_dist} | {max(dq):.2f} | "
                              f"{dq[len(dq) // 2]:.2f} |")
            gx = basecall(a, reads, bounds, m, os.path.join(tmp, f"{m}.f32g.csv"), base_env, False)
            gy = basecall(a, reads, bounds, m, os.path.join(tmp, f"{m}.varg.csv"), variant_env, False, extra)
            same = sum(gx[k]["barcode"] == gy[k]["barcode"] for k in gx)
            ncx = sum(r["barcode"] != "unclassified" for r in gx.values())
            ncy = sum(r["barcode"] != "unclassified" for r in gy.values())
            gated_lines.append(f"| {m} | {len(gx)} | {same} | {ncx} / {ncy} |")
            print(open_lines[-1], gated_lines[-1], flush=True)
    what = f"--encoder-precision {a.encoder_precision}" if a.encoder_precision else a.env
    print(f"variant: {what}, gates open (--min-baseq 0 --min-mean-post 0):")
    print("\n".join(open_lines))
    print("\ndefault gates:")
    print("\n".join(gated_lines))


if __name__ == "__main__":
    main()
