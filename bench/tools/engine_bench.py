#!/usr/bin/env python3
"""Same-run comparison of two escpod binaries (before / after the streaming engine, issue 13).

  .venv/bin/python bench/tools/engine_bench.py OLD_ESCPOD NEW_ESCPOD INPUT.pod5 MODEL.json [--repeat 3] [-t 2]
      [--demux-input READS.pod5] [--crf-model FOLDER]

Runs merge, filter (reads of >= 20,000 samples), filter --ids (10 reads), repack, summary, view
and the fused demux on INPUT (the demux on --demux-input when given; with --crf-model, also the
fused demux with that CTC-CRF folder) with each binary in turn (old, new, old, new, ...: load
changes hit both alike), outputs to /dev/shm, and prints the median wall and CPU seconds and peak
RSS of each (run_pod5_bench.measure: wait4), the new/old ratios, and the fused demux reads/s.
"""
import argparse
import pathlib
import statistics
import subprocess
import sys

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parent))
from run_pod5_bench import measure  # noqa: E402


def n_reads(escpod, path):
    out = subprocess.run([escpod, "view", path, "-t", "1"], capture_output=True, text=True, check=True).stdout
    return sum(1 for line in out.splitlines()[1:] if line)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("old")
    ap.add_argument("new")
    ap.add_argument("input")
    ap.add_argument("model")
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("-t", "--threads", type=int, default=2)
    ap.add_argument("--demux-input", default=None)
    ap.add_argument("--crf-model", default=None)
    a = ap.parse_args()
    demux_input = a.demux_input or a.input
    out = pathlib.Path("/dev/shm/engine_bench_out")
    out.mkdir(exist_ok=True)
    t = str(a.threads)
    commands = {
        "merge": lambda b: [b, "merge", a.input, "-o", out / "m.pod5", "--force", "-t", t],
        "filter": lambda b: [b, "filter", a.input, "--min-samples", "20000", "-o", out / "f.pod5", "--force",
                             "-t", t],
        "filter --ids (10 reads)": lambda b: [b, "filter", a.input, "--ids", out / "ids.txt", "-o",
                                              out / "i.pod5", "--force", "-t", t],
        "repack": lambda b: [b, "repack", a.input, "-o", out / "repacked", "--force", "-t", t],
        "summary": lambda b: [b, "summary", a.input, "-t", t],
        "view": lambda b: [b, "view", a.input, "-t", t],  # to /dev/null
        "demux (fused)": lambda b: [b, "demux", demux_input, "-m", a.model, "--classifications", out / "c.csv",
                                    "--force", "-t", t],
    }
    if a.crf_model:
        commands["demux CRF (fused)"] = lambda b: [b, "demux", demux_input, "-m", a.crf_model, "--classifications",
                                                   out / "crf.csv", "--force", "-t", t]
    ids = subprocess.run([a.new, "view", a.input, "--include", "read_id", "--no-header"], capture_output=True,
                         text=True, check=True).stdout.split()
    (out / "ids.txt").write_text("\n".join(ids[:: max(1, len(ids) // 10)][:10]) + "\n")
    reads = n_reads(a.new, a.input)
    demux_reads = n_reads(a.new, demux_input)
    print(f"input {a.input}: {reads} reads; -t {t}; median of {a.repeat} interleaved runs\n")
    print("| command | old wall s | new wall s | new/old wall | old CPU s | new CPU s | new/old CPU | old RSS MiB | new RSS MiB |")
    print("|---|---:|---:|---:|---:|---:|---:|---:|---:|")
    for name, cmd in commands.items():
        runs = {"old": [], "new": []}
        for _ in range(a.repeat):
            for which in ("old", "new"):
                runs[which].append(measure(cmd(getattr(a, which))))
        med = {w: {k: statistics.median(r[k] for r in rs) for k in ("wall_s", "cpu_s", "rss_mib")}
               for w, rs in runs.items()}
        o, n = med["old"], med["new"]
        print(f"| {name} | {o['wall_s']:.2f} | {n['wall_s']:.2f} | {n['wall_s'] / o['wall_s']:.2f} | "
              f"{o['cpu_s']:.2f} | {n['cpu_s']:.2f} | {n['cpu_s'] / o['cpu_s']:.2f} | {o['rss_mib']:.0f} | "
              f"{n['rss_mib']:.0f} |", flush=True)
        if name.startswith("demux"):
            r = demux_reads
            print(f"| {name}: reads/s (wall; per CPU s) | {r / o['wall_s']:,.0f} | {r / n['wall_s']:,.0f} | | "
                  f"{r / o['cpu_s']:,.0f} | {r / n['cpu_s']:,.0f} | | | |")


if __name__ == "__main__":
    main()
