#!/usr/bin/env python3
"""escpod bam-demux against the pysam reference doing the same join and tagging
(tests/conformance/bam_demux_reference.py, htslib with 2 threads) and against the floor,
`samtools view -@ 2 -b` (a plain BAM rewrite), on N records made from dorado's real ones.

  .venv/bin/python bench/tools/bam_demux_bench.py --escpod build/src/cli/escpod [-n 1000000] [--rounds 3]

Data (cached in --data, rebuilt when missing): the 180 records of the shared
escapepod/drna/yeast_trna_mappings.bam replicated under fresh read ids until N records (and a
second set of N/4), one parent in ten written as a dorado split read (two records with fresh
names and `pi:Z` naming the parent); a calls CSV `read_id,barcode,confidence` with BC01..BC12
for nine parents in ten. Unsorted (SO:unknown) by default; --sorted keeps coordinate order, and
then every tool writes an index (escpod does on its own, samtools gets --write-index, the pysam
run calls pysam.index). Each tool runs --rounds times per set, alternating, writing a fresh output;
the best wall time is reported, and the peak RSS of that tool's process (/usr/bin/time -f %M when
present, else wait4's rusage of the child).
"""
import argparse
import os
import pathlib
import random
import shutil
import subprocess
import sys
import tempfile
import time
import uuid

ROOT = pathlib.Path(__file__).resolve().parents[2]
REFERENCE_DIR = ROOT / "tests" / "conformance"
GNU_TIME = "/usr/bin/time" if os.access("/usr/bin/time", os.X_OK) else None

PYSAM_RUN = r"""
import sys
sys.path.insert(0, sys.argv[1])
import pysam
import bam_demux_reference as ref
n = ref.write_tagged(sys.argv[2], sys.argv[3], ref.load_calls([sys.argv[4]]), threads=2)
if sys.argv[5] == "1":
    pysam.index(sys.argv[3])
"""


def build(shared, out_bam, out_csv, n_records, sort, seed):
    """N records from the real ones under fresh ids; returns the record count written."""
    import pysam
    rng = random.Random(seed)
    src_path = shared / "escapepod/drna/yeast_trna_mappings.bam"
    with pysam.AlignmentFile(str(src_path), "rb") as src:
        header = src.header.to_dict()
        records = list(src.fetch(until_eof=True))
    header["HD"]["SO"] = "coordinate" if sort else "unknown"
    per_record = -(-n_records // len(records))  # copies of each record, about
    written = 0
    calls = []
    with pysam.AlignmentFile(str(out_bam), "wb", header=header, threads=2) as dst:
        def emit(rec):
            nonlocal written
            parent = str(uuid.UUID(int=rng.getrandbits(128), version=4))
            if rng.random() < 0.9:
                calls.append((parent, f"BC{rng.randint(1, 12):02d}", f"{rng.random():.3f}"))
            if rng.random() < 0.1 and written + 2 <= n_records:
                for _ in range(2):
                    rec.query_name = str(uuid.UUID(int=rng.getrandbits(128), version=4))
                    rec.set_tag("pi", parent, "Z")
                    dst.write(rec)
                rec.set_tag("pi", None)
                written += 2
            else:
                rec.query_name = parent
                dst.write(rec)
                written += 1
        if sort:  # each record's copies together: coordinate order kept
            for rec in records:
                for _ in range(per_record):
                    if written < n_records:
                        emit(rec)
        else:  # round robin over the records: no order
            while written < n_records:
                for rec in records:
                    if written >= n_records:
                        break
                    emit(rec)
    rng.shuffle(calls)
    with open(out_csv, "w") as f:
        f.write("read_id,barcode,confidence\n")
        f.writelines(f"{r},{b},{c}\n" for r, b, c in calls)
    return written


def measure(cmd):
    """(wall s, peak RSS MiB) of one run; raises with its stderr when it fails."""
    cmd = [str(c) for c in cmd]
    with tempfile.NamedTemporaryFile("r", suffix=".rss") as rss_file:
        full = [GNU_TIME, "-f", "%M", "-o", rss_file.name, *cmd] if GNU_TIME else cmd
        t0 = time.monotonic()
        proc = subprocess.Popen(full, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
        _, status, usage = os.wait4(proc.pid, 0)
        wall = time.monotonic() - t0
        err = proc.stderr.read().decode(errors="replace")
        proc.stderr.close()
        if os.waitstatus_to_exitcode(status) != 0:
            raise RuntimeError(f"{' '.join(cmd)} failed:\n{err}")
        kib = int(rss_file.read().split()[-1]) if GNU_TIME else usage.ru_maxrss
    return wall, kib / 1024


def count_records(path):
    return int(subprocess.run(["samtools", "view", "-c", "-@", "2", str(path)], check=True,
                              capture_output=True, text=True).stdout)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--escpod", default=str(ROOT / "build/src/cli/escpod"))
    ap.add_argument("-n", "--records", type=int, default=1_000_000)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--sorted", action="store_true", help="coordinate-sorted input (outputs indexed)")
    ap.add_argument("--tools", default="pysam,escpod,samtools", help="comma-separated subset")
    ap.add_argument("--data", default=str(ROOT / "bench/data/bam_demux"))
    ap.add_argument("--shared", default=str(ROOT.parent / "shared/data"))
    ap.add_argument("--tmp", default="/dev/shm" if os.path.isdir("/dev/shm") else tempfile.gettempdir())
    args = ap.parse_args()
    tools = [t for t in args.tools.split(",") if t]
    data = pathlib.Path(args.data)
    data.mkdir(parents=True, exist_ok=True)
    shared = pathlib.Path(args.shared)
    kind = "sorted" if args.sorted else "unsorted"

    sets = []
    for n in (args.records, args.records // 4):
        bam, csv = data / f"in_{n}_{kind}.bam", data / f"calls_{n}_{kind}.csv"
        if not (bam.exists() and csv.exists()):
            t0 = time.monotonic()
            got = build(shared, bam, csv, n, args.sorted, seed=n)
            print(f"built {bam} ({got} records, {bam.stat().st_size >> 20} MiB) in {time.monotonic() - t0:.1f} s",
                  file=sys.stderr)
        sets.append((n, bam, csv))

    work = pathlib.Path(tempfile.mkdtemp(prefix="bam_demux_bench.", dir=args.tmp))
    index = "1" if args.sorted else "0"
    results = {}  # (tool, n) -> (best wall, rss at best)
    try:
        for n, bam, csv in sets:
            for r in range(args.rounds):
                for tool in tools:
                    out = work / f"{tool}.bam"
                    for old in work.iterdir():
                        old.unlink()
                    if tool == "pysam":
                        cmd = [sys.executable, "-c", PYSAM_RUN, REFERENCE_DIR, bam, out, csv, index]
                    elif tool == "escpod":
                        cmd = [args.escpod, "bam-demux", "-b", bam, "--classifications", csv, "-o", out, "-t", "2"]
                    elif tool == "samtools":
                        cmd = ["samtools", "view", "-@", "2", "-b", "-o", out, bam]
                        if args.sorted:
                            cmd[2:2] = ["--write-index"]
                    else:
                        sys.exit(f"unknown tool {tool}")
                    wall, rss = measure(cmd)
                    if r == 0:
                        got = count_records(out)
                        if got != n:
                            sys.exit(f"{tool} wrote {got} records, the input has {n}")
                        if args.sorted and not (work / f"{tool}.bam.bai").exists() and \
                                not (work / f"{tool}.bam.csi").exists():
                            sys.exit(f"{tool} wrote no index for the sorted input")
                    best = results.get((tool, n))
                    if best is None or wall < best[0]:
                        results[(tool, n)] = (wall, rss)
                    print(f"  {tool} n={n} round {r + 1}: {wall:.2f} s, {rss:.0f} MiB", file=sys.stderr)
    finally:
        shutil.rmtree(work, ignore_errors=True)

    print(f"\n`escpod bam-demux -o` on {kind} input, best of {args.rounds} (wall), 2 threads each\n")
    print("| tool | records | best wall (s) | records/s | peak RSS (MiB) |")
    print("|---|---:|---:|---:|---:|")
    for n, _, _ in sets:
        for tool in tools:
            wall, rss = results[(tool, n)]
            print(f"| {tool} | {n:,} | {wall:.2f} | {n / wall:,.0f} | {rss:.0f} |")
    if "escpod" in tools:
        print("\n| records | escpod vs pysam (speed-up) | escpod vs samtools view (time ratio) | escpod RSS (MiB) |")
        print("|---:|---:|---:|---:|")
        for n, _, _ in sets:
            e = results[("escpod", n)][0]
            vs_py = f"{results[('pysam', n)][0] / e:.1f}x" if "pysam" in tools else "-"
            vs_st = f"{e / results[('samtools', n)][0]:.2f}" if "samtools" in tools else "-"
            print(f"| {n:,} | {vs_py} | {vs_st} | {results[('escpod', n)][1]:.0f} |")
        rss_n, rss_q = results[("escpod", sets[0][0])][1], results[("escpod", sets[1][0])][1]
        calls = [sum(1 for _ in open(csv)) - 1 for _, _, csv in sets]
        print(f"\nescpod peak RSS: {rss_n:.0f} MiB for {sets[0][0]:,} records ({calls[0]:,} calls), "
              f"{rss_q:.0f} MiB for {sets[1][0]:,} ({calls[1]:,} calls): {rss_n - rss_q:+.0f} MiB for 4x the "
              f"records; the calls map grows with the calls, the records should add nothing")


if __name__ == "__main__":
    main()
