#!/usr/bin/env python3
"""Times `escpod convert fast5` against the official `pod5 convert fast5` on the same FAST5 input,
same thread count, alternating runs; prints a Markdown table and the ratio of median wall times.
Also checks both outputs hold the same reads with the same signal.

  convert_fast5_bench.py --escpod build/src/cli/escpod --source SHARED/pod5/fast5/multi_fast5_zip.fast5 \
      --copies 100 --files 4 --threads 2 --repeats 3 --work /tmp/escpod_fast5_bench
"""
import argparse
import pathlib
import resource
import statistics
import subprocess
import sys
import time

HERE = pathlib.Path(__file__).resolve().parent


def timed(cmd):
    t0 = time.perf_counter()
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    res = subprocess.run(cmd, capture_output=True, text=True)
    wall = time.perf_counter() - t0
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    if res.returncode != 0:
        sys.exit(f"{cmd} failed:\n{res.stderr}")
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    return wall, cpu


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--escpod", required=True)
    ap.add_argument("--source", required=True)
    ap.add_argument("--copies", type=int, default=100)
    ap.add_argument("--files", type=int, default=4)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--work", default="/tmp/escpod_fast5_bench")
    a = ap.parse_args()
    work = pathlib.Path(a.work)
    inputs = work / "fast5"
    if not inputs.exists():
        subprocess.run([sys.executable, str(HERE / "make_fast5.py"), a.source, str(inputs),
                        "--copies", str(a.copies), "--files", str(a.files)], check=True)
    files = sorted(inputs.glob("*.fast5"))
    in_bytes = sum(f.stat().st_size for f in files)
    pod5_bin = pathlib.Path(sys.executable).parent / "pod5"
    ours, theirs = work / "escpod.pod5", work / "official.pod5"
    cmds = {
        "escpod": [a.escpod, "convert", "fast5", *map(str, files), "-o", str(ours), "-f",
                   "-t", str(a.threads), "-q"],
        "pod5": [str(pod5_bin), "convert", "fast5", *map(str, files), "-o", str(theirs),
                 "--force-overwrite", "-t", str(a.threads)],
    }
    times = {k: [] for k in cmds}
    for _ in range(a.repeats):
        for k, cmd in cmds.items():
            times[k].append(timed(cmd))
    import pod5
    import numpy as np
    with pod5.Reader(ours) as x, pod5.Reader(theirs) as y:
        sx = {str(r.read_id): int(np.sum(r.signal, dtype=np.int64)) for r in x.reads()}
        sy = {str(r.read_id): int(np.sum(r.signal, dtype=np.int64)) for r in y.reads()}
    assert sx == sy, "outputs differ"
    med = {k: statistics.median(w for w, _ in v) for k, v in times.items()}
    print(f"input: {len(files)} VBZ FAST5 files, {len(sx)} reads, {in_bytes / 1e6:.1f} MB; "
          f"threads {a.threads}; {a.repeats} alternating runs each")
    print()
    print("| tool | wall s (median) | wall s (all runs) | CPU s (median) |")
    print("|---|---|---|---|")
    for k, v in times.items():
        print(f"| {k} | {med[k]:.2f} | {', '.join(f'{w:.2f}' for w, _ in v)} | "
              f"{statistics.median(c for _, c in v):.2f} |")
    print()
    print(f"ratio pod5 / escpod (median wall): **{med['pod5'] / med['escpod']:.1f}x**")


if __name__ == "__main__":
    main()
