#!/usr/bin/env python3
"""escpod recover against `pod5 recover` on the same killed-writer files, in one run.

  .venv/bin/python bench/tools/recover_bench.py --build build [--reads 3000] [--repeat 3]

Makes the inputs with the official writer killed mid-run (tests/conformance/kill_writer.py:
default batch sizes of 1,000 reads and 100 signal rows, 4,000-sample chunks, reads of up to
16,000 samples), then times both tools on their own copies of the same files, runs alternating,
warm page cache; reports the median wall time, CPU time and peak RSS (wait4), and the reads each
recovered. Prints a Markdown table.
"""
import argparse
import os
import pathlib
import shutil
import statistics
import subprocess
import sys
import tempfile
import time

ROOT = pathlib.Path(__file__).resolve().parents[2]
VENV = ROOT / ".venv" / "bin"


def measure(cmd):
    t0 = time.monotonic()
    proc = subprocess.Popen([str(c) for c in cmd], stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    _, status, usage = os.wait4(proc.pid, 0)
    wall = time.monotonic() - t0
    out = proc.stdout.read().decode(errors="replace")
    err = proc.stderr.read().decode(errors="replace")
    code = os.waitstatus_to_exitcode(status)
    if code != 0:
        raise RuntimeError(f"{cmd} exited {code}:\n{out}\n{err}")
    return {"wall_s": wall, "cpu_s": usage.ru_utime + usage.ru_stime, "rss_mib": usage.ru_maxrss / 1024}


COUNT = r'''
import pod5, sys
n = readable = 0
with pod5.Reader(sys.argv[1]) as r:
    for read in r.reads():
        n += 1
        try:
            readable += len(read.signal) == read.num_samples
        except Exception:
            pass
print(n, readable)
'''


def n_reads(path):
    """(reads in the file, reads whose signal can be read in full)"""
    out = subprocess.run([str(VENV / "python"), "-c", COUNT, str(path)], capture_output=True,
                         text=True, check=True)
    return tuple(int(x) for x in out.stdout.split())


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--build", default="build")
    ap.add_argument("--reads", type=int, default=3000)
    ap.add_argument("--repeat", type=int, default=3)
    args = ap.parse_args()
    escpod = (ROOT / args.build / "src/cli/escpod").resolve()
    tmp = pathlib.Path(tempfile.mkdtemp(prefix="recover_bench_"))
    try:
        src = tmp / "src"
        src.mkdir()
        subprocess.run([str(VENV / "python"), str(ROOT / "tests/conformance/kill_writer.py"),
                        str(src / "run.pod5"), str(tmp / "reference.pod5"), str(args.reads),
                        "1000", "100", "4000", "exit"], check=True)
        size = sum(p.stat().st_size for p in src.iterdir())
        ours_dir, theirs_dir = tmp / "ours", tmp / "theirs"
        shutil.copytree(src, ours_dir)
        shutil.copytree(src, theirs_dir)
        runs = {"escpod": [], "pod5": []}
        for _ in range(args.repeat):
            runs["escpod"].append(measure([escpod, "recover", ours_dir / "run.pod5", "-o",
                                           tmp / "ours_out", "-f"]))
            runs["pod5"].append(measure([VENV / "pod5", "recover", theirs_dir / "run.pod5",
                                         "--force-overwrite"]))
        got = {"escpod": n_reads(tmp / "ours_out/run_recovered.pod5"),
               "pod5": n_reads(theirs_dir / "run_recovered.pod5")}
        med = {k: {m: statistics.median(r[m] for r in v) for m in ("wall_s", "cpu_s", "rss_mib")}
               for k, v in runs.items()}
        print(f"inputs: official writer killed after {args.reads} reads (reads batches of 1000, "
              f"signal batches of 100 rows, chunks of 4000 samples); {size / 1e6:.1f} MB in "
              f"3 files; median of {args.repeat} alternating runs\n")
        print("| tool | reads written | of them readable | wall s | CPU s | peak RSS MiB | "
              "pod5 / escpod wall | pod5 / escpod CPU |")
        print("|---|---|---|---|---|---|---|---|")
        for k in ("escpod", "pod5"):
            m = med[k]
            print(f"| {k} recover | {got[k][0]} | {got[k][1]} | {m['wall_s']:.3f} | "
                  f"{m['cpu_s']:.3f} | {m['rss_mib']:.0f} | "
                  f"{med['pod5']['wall_s'] / m['wall_s']:.2f}x | {med['pod5']['cpu_s'] / m['cpu_s']:.2f}x |")
        print(f"\nload average during the run: {os.getloadavg()}")
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
