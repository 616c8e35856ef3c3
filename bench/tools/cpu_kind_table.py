#!/usr/bin/env python3
"""Issue 34's figures on this CPU in one run: the table bench/RESULTS.md keeps per CPU kind.

  .venv/bin/python bench/tools/cpu_kind_table.py --escpod build/src/cli/escpod [--base OLD_ESCPOD]
      [--shared ../shared/data] [--rounds 3] [--markdown OUT.md]

Measures, one thread each, every ratio against a peer timed in the same run:
1. the fused WarpDemuX demux (WDX4) of 20,000 RNA004 reads (make_dataset from the real ones),
   float32 and `--cnn-precision bfloat16`: reads/s per core (CPU time), and the agreement of the
   bfloat16 calls (read id, barcode, confidence) with float32's;
2. the boundary CNN against onnxruntime, batch 64 (nn_bench.py), float32 and bf16;
3. the CRF encoder against onnxruntime at the head's batch, B 4, bundle geometry
   (crf_encoder_bench.py), float32 and bf16;
4. the fused CRF demux (SeqTagger b04) of 5,000 of those reads, float32 and
   `--encoder-precision bf16`.
With --base (an older escpod), the demux runs alternate base, new, base, new, ... at each
precision, and each of the new build's CSVs is compared byte for byte with the base's. The CPU's
model name, the ISA flags that choose the kernels, and the kernels `escpod --version` names head
the table. Built for the CPU kinds a session cannot choose (an AMX machine, an AVX2-only one):
one command gives the whole table. `ONEDNN_MAX_CPU_ISA=AVX2` in the environment runs it capped.
"""
import argparse
import csv
import os
import pathlib
import re
import statistics
import subprocess
import sys
import tempfile

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parent))
from run_pod5_bench import measure  # noqa: E402

HERE = pathlib.Path(__file__).resolve().parent
ROOT = HERE.parent.parent
FLAGS = ["avx2", "fma", "avx512f", "avx512_vnni", "avx512_bf16", "amx_tile", "amx_bf16"]


def cpu_line():
    model, flags = "?", set()
    with open("/proc/cpuinfo") as f:
        for line in f:
            key, _, value = line.partition(":")
            if key.strip() == "model name" and model == "?":
                model = value.strip()
            if key.strip() == "flags" and not flags:
                flags = set(value.split())
    have = ", ".join(f for f in FLAGS if f in flags) or "none of " + ", ".join(FLAGS)
    cap = os.environ.get("ONEDNN_MAX_CPU_ISA")
    return f"{model}, {os.cpu_count()} logical CPUs ({have})" + (f", capped: ONEDNN_MAX_CPU_ISA={cap}" if cap else "")


def kernel_lines(escpod):
    out = subprocess.run([escpod, "--version"], capture_output=True, text=True, check=True).stdout
    return [line for line in out.splitlines() if line.startswith(("cpu:", "nn:"))]


def make_reads(make_dataset, source, folder, n):
    path = pathlib.Path(folder) / f"rna{n}.pod5"
    if not path.exists():
        subprocess.run([make_dataset, source, "-o", str(path.with_suffix("")), "-n", str(n)], check=True,
                       capture_output=True)
    return path


def calls(csv_path):
    with open(csv_path, newline="") as f:
        return {row["read_id"]: (row["barcode"], row["confidence"]) for row in csv.DictReader(f)}


def demux_runs(builds, reads, model, precision_flag, rounds, tmp):
    """builds: {name: binary}. Runs every (build, precision) in turn, `rounds` times; returns
    {(name, precision): [cpu_s, ...]} and the last CSV path of each."""
    times, csvs = {}, {}
    for r in range(rounds):
        for name, binary in builds.items():
            for precision in ("float32", "bf16"):
                out = pathlib.Path(tmp) / f"{name}_{precision}_{model.name}.csv"
                cmd = [binary, "demux", reads, "-m", model, "--classifications", out, "-t", "1", "-f", "-q"]
                cmd += precision_flag if precision == "bf16" else []
                times.setdefault((name, precision), []).append(measure(cmd)["cpu_s"])
                csvs[(name, precision)] = out
    return times, csvs


def demux_rows(title, n_reads, times, csvs, builds):
    rows = []
    for precision in ("float32", "bf16"):
        new = times[("new", precision)]
        rate = n_reads / statistics.median(new)
        text = f"{rate:,.0f} reads/s per core ({', '.join(f'{t:.2f}' for t in new)} s CPU)"
        if "base" in builds:
            base = times[("base", precision)]
            same = pathlib.Path(csvs[("new", precision)]).read_bytes() == pathlib.Path(csvs[("base", precision)]).read_bytes()
            text += (f"; base {', '.join(f'{t:.2f}' for t in base)} s: "
                     f"{statistics.median(base) / statistics.median(new):.2f}x, CSV {'byte-identical' if same else 'DIFFERS'}")
        rows.append((title, precision, text))
    f32, bf16 = calls(csvs[("new", "float32")]), calls(csvs[("new", "bf16")])
    same_barcode = sum(1 for k, v in f32.items() if k in bf16 and bf16[k][0] == v[0])
    same_call = sum(1 for k, v in f32.items() if bf16.get(k) == v)
    classified = sum(1 for v in f32.values() if v[0] != "unclassified")
    rows.append((title, "agreement", f"bf16 vs float32, {len(f32)} reads ({classified} classified in float32): "
                 f"barcode the same for {same_barcode}, barcode and confidence for {same_call}"))
    return rows


def nn_bench_ratio(escpod, precision, seconds):
    out = subprocess.run([sys.executable, HERE / "nn_bench.py", "--escpod", escpod, "--models", "2", "--batches", "64",
                          "--threads", "1", "--seconds", str(seconds), "--precision", precision],
                         capture_output=True, text=True, check=True).stdout
    found = re.findall(r"ours best ([0-9.]+) windows/s .* vs onnxruntime best ([0-9.]+) -> ([0-9.]+)x", out)
    if not found:
        raise RuntimeError(f"nn_bench.py printed no summary:\n{out}")
    ours, ort, ratio = found[-1]
    return f"{ratio}x onnxruntime ({float(ours):,.0f} vs {float(ort):,.0f} windows/s)"


def encoder_ratios(escpod, shared, rounds):
    with tempfile.NamedTemporaryFile(suffix=".md") as md:
        subprocess.run([sys.executable, HERE / "crf_encoder_bench.py", "--escpod", escpod, "--shared", shared,
                        "--rounds", str(rounds), "--batch", "4", "--geometries", "bundle3000", "--precision", "bf16",
                        "--markdown", md.name], capture_output=True, text=True, check=True)
        rows = [line.split("|") for line in pathlib.Path(md.name).read_text().splitlines()
                if line.startswith("| bundle") and line.split("|")[2].strip() == "4"]
    if len(rows) != 2:
        raise RuntimeError("crf_encoder_bench.py gave no B 4 rows")
    # columns: geometry, B, ours ms, ort ms, ours/ort wall, ours/ort CPU, ...
    return {"float32": f"{rows[0][6].strip()}x onnxruntime (CPU; {rows[0][3].strip()} vs {rows[0][4].strip()} ms)",
            "bf16": f"{rows[1][6].strip()}x onnxruntime (CPU; {rows[1][3].strip()} vs {rows[1][4].strip()} ms)"}


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--escpod", required=True)
    ap.add_argument("--base", help="an older escpod: the previous commit's figures in the same rounds")
    ap.add_argument("--shared", default=str(ROOT.parent / "shared" / "data"))
    ap.add_argument("--make-dataset", default=str(ROOT / "build" / "bench" / "tools" / "make_dataset"))
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--seconds", type=float, default=3.0, help="per nn_bench.py measurement")
    ap.add_argument("--markdown")
    a = ap.parse_args()
    shared = pathlib.Path(a.shared)
    source = shared / "escapepod" / "drna" / "yeast_trna_reads.pod5"
    wdx4 = shared / "warpdemux" / "WDX4_rna004_v1_0.json"
    b04 = shared / "seqtagger" / "b04_RNA004"
    for path in (source, wdx4, b04, pathlib.Path(a.make_dataset)):
        if not path.exists():
            ap.error(f"{path}: not found (--shared, --make-dataset)")
    builds = {"new": a.escpod} if not a.base else {"base": a.base, "new": a.escpod}
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        reads20k = make_reads(a.make_dataset, source, tmp, 20000)
        reads5k = make_reads(a.make_dataset, source, tmp, 5000)
        times, csvs = demux_runs(builds, reads20k, wdx4, ["--cnn-precision", "bfloat16"], a.rounds, tmp)
        rows += demux_rows("1. fused WDX4 demux, 20,000 reads", 20000, times, csvs, builds)
        print(*rows[-3:], sep="\n", flush=True)
        for precision in ("f32", "bf16"):
            rows.append(("2. boundary CNN, batch 64, L 1500", precision, nn_bench_ratio(a.escpod, precision, a.seconds)))
            print(rows[-1], flush=True)
        for precision, text in encoder_ratios(a.escpod, a.shared, a.rounds).items():
            rows.append(("3. CRF encoder, bundle geometry, B 4", precision, text))
            print(rows[-1], flush=True)
        times, csvs = demux_runs(builds, reads5k, b04, ["--encoder-precision", "bf16"], a.rounds, tmp)
        rows += demux_rows("4. fused CRF demux (b04), 5,000 reads", 5000, times, csvs, builds)
        print(*rows[-3:], sep="\n", flush=True)
    text = "\n".join([f"**{cpu_line()}**, one thread", "", *[f"    {line}" for line in kernel_lines(a.escpod)], "",
                      "| target | precision | result |", "|---|---|---|",
                      *[f"| {t} | {p} | {r} |" for t, p, r in rows]]) + "\n"
    print(text)
    if a.markdown:
        pathlib.Path(a.markdown).write_text(text)


if __name__ == "__main__":
    main()
