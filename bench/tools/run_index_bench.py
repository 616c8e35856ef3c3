#!/usr/bin/env python3
"""Pulling 100 reads out of the 10-file, 200k-read benchmark set: escpod filter with the read-id
index, without it, and `pod5 filter`, in one run, alternating, median of --repeat runs each.

  .venv/bin/python bench/tools/run_index_bench.py --build build [--data bench/data] [--repeat 5]

The dataset is the one run_pod5_bench.py makes (built here if missing). The index is built in
DATA/.escpod-index (its build time is reported too). Writes bench/results/index.md.
"""
import argparse
import pathlib
import random
import shutil
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parent))
from run_pod5_bench import ROOT, VENV, ensure_dataset, measure  # noqa: E402


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--build", default="build")
    ap.add_argument("--data", default=str(ROOT / "bench/data"))
    ap.add_argument("--repeat", type=int, default=5)
    ap.add_argument("--n-reads", type=int, default=100)
    args = ap.parse_args()
    build = pathlib.Path(args.build).resolve()
    escpod = build / "src/cli/escpod"
    data = pathlib.Path(args.data).resolve()
    files = ensure_dataset(build, data)
    out_root = pathlib.Path("/dev/shm") if pathlib.Path("/dev/shm").is_dir() else data
    work = pathlib.Path(tempfile.mkdtemp(prefix="escpod-index-bench-", dir=out_root))
    try:
        all_ids = subprocess.run([escpod, "view", *files, "--include", "read_id", "--no-header"],
                                 capture_output=True, text=True, check=True).stdout.split()
        ids = random.Random(3).sample(all_ids, args.n_reads)
        (work / "ids.txt").write_text("read_id\n" + "\n".join(ids) + "\n")
        shutil.rmtree(data / ".escpod-index", ignore_errors=True)
        build_run = measure([escpod, "index", data])
        update_run = measure([escpod, "index", data])  # nothing changed: stat + footer per file
        index_bytes = sum(p.stat().st_size for p in (data / ".escpod-index").iterdir())
        jobs = {
            "escpod filter (index)": [escpod, "filter", *files, "--ids", work / "ids.txt", "-o", work / "e.pod5", "-f"],
            "escpod filter (no index)": [escpod, "filter", *files, "--ids", work / "ids.txt", "-o", work / "n.pod5",
                                         "-f", "--no-index"],
            "pod5 filter": [VENV / "pod5", "filter", *files, "-i", work / "ids.txt", "-o", work / "p.pod5", "-f"],
        }
        runs = {k: [] for k in jobs}
        for _ in range(args.repeat):
            for name, cmd in jobs.items():
                runs[name].append(measure(cmd))
        # The three outputs hold the same reads.
        import pod5
        def ids_of(p):
            with pod5.Reader(p) as r:
                return sorted(str(x.read_id) for x in r.reads())
        assert ids_of(work / "e.pod5") == ids_of(work / "n.pod5") == ids_of(work / "p.pod5") == sorted(ids)
    finally:
        shutil.rmtree(work, ignore_errors=True)

    def med(name, key="wall_s"):
        v = sorted(m[key] for m in runs[name])
        return v[len(v) // 2]

    n_reads = len(all_ids)
    machine = subprocess.run(["sh", "-c", "lscpu | grep 'Model name' | cut -d: -f2"],
                             capture_output=True, text=True).stdout.strip()
    pod5_wall = med("pod5 filter")
    pod5_cpu = med("pod5 filter", "cpu_s")
    lines = [
        "# Read-id index: pulling reads by id",
        "",
        f"Measured {time.strftime('%Y-%m-%d')} on {machine} ({subprocess.run(['nproc'], capture_output=True, text=True).stdout.strip()} CPUs usable),",
        f"{len(files)} files, {n_reads} reads (the run_pod5_bench.py set, {sum(f.stat().st_size for f in files) / 2**20:.0f} MiB),",
        f"{args.n_reads} random read ids, warm page cache, outputs on {out_root}; the three tools",
        f"alternate, median of {args.repeat} runs each. All three outputs hold the same reads (checked).",
        "",
        "```",
        f".venv/bin/python bench/tools/run_index_bench.py --build build --repeat {args.repeat}",
        "```",
        "",
        "| command | wall s (median) | CPU s (median) | peak RSS MiB | `pod5 filter` wall / this | `pod5 filter` CPU / this |",
        "|---|---|---|---|---|---|",
    ]
    for name in jobs:
        lines.append(f"| {name} | {med(name):.3f} | {med(name, 'cpu_s'):.3f} | {med(name, 'rss_mib'):.0f} | "
                     f"{pod5_wall / med(name):.1f}x | {pod5_cpu / med(name, 'cpu_s'):.1f}x |")
    lines += [
        "",
        f"Index of the set: built in {build_run['wall_s']:.2f} s ({build_run['cpu_s']:.2f} s CPU, "
        f"peak RSS {build_run['rss_mib']:.0f} MiB), {index_bytes / 2**20:.2f} MiB on disk "
        f"({index_bytes / n_reads:.1f} bytes a read); an update with nothing changed: "
        f"{update_run['wall_s']:.3f} s.",
        "",
        f"Runs (wall s): " + "; ".join(f"{k}: " + ", ".join(f"{m['wall_s']:.3f}" for m in v) for k, v in runs.items()),
        "",
        f"Runs (CPU s): " + "; ".join(f"{k}: " + ", ".join(f"{m['cpu_s']:.3f}" for m in v) for k, v in runs.items()),
        "",
    ]
    text = "\n".join(lines)
    (ROOT / "bench/results/index.md").write_text(text)
    print(text)


if __name__ == "__main__":
    main()
