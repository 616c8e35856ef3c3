#!/usr/bin/env python3
"""Samples which pages of a memory-mapped input a running command holds resident.

Runs COMMAND, and every INTERVAL seconds reads /proc/PID/smaps (Rss of the mapping of INPUT and
the process's RssAnon) and /proc/PID/pagemap over that mapping (needs root: page frame bits are
not needed, only the present bit, but pagemap is readable only by the owner or root). Prints one
line a sample: time, mapping Rss MiB, RssAnon MiB, present MiB by pagemap, the lowest and highest
present file offsets (MiB) and how the present pages split into runs more than 1 MiB apart
(start..end MiB: present MiB; runs under 256 KiB only summed). At the end, the sample with the largest mapping Rss again.

    bench/tools/mapped_window.py --input r3m.pod5 -- build/src/cli/escpod merge r3m.pod5 -o m.pod5 -f -q

Used for bench/results/memory.md (why the resident window of the input grows with the file).
"""
import argparse
import os
import subprocess
import sys
import time

import numpy as np

PAGE = os.sysconf("SC_PAGE_SIZE")
MIB = 1 << 20


def find_mapping(pid, path):
    """(start, end, offset) of the first mapping of `path` in process `pid`, or None."""
    real = os.path.realpath(path)
    try:
        with open(f"/proc/{pid}/maps") as f:
            for line in f:
                parts = line.split(maxsplit=5)
                if len(parts) == 6 and parts[5].strip() == real:
                    lo, hi = (int(x, 16) for x in parts[0].split("-"))
                    return lo, hi, int(parts[2], 16)
    except OSError:
        pass
    return None


def smaps_rss_kb(pid, start):
    """Rss (kB) of the mapping starting at `start`, and the process's RssAnon (kB)."""
    rss = anon = 0
    try:
        with open(f"/proc/{pid}/smaps") as f:
            inside = False
            for line in f:
                if not line.split(" ", 1)[0].endswith(":"):  # a mapping's header line
                    inside = int(line.split("-", 1)[0], 16) == start
                elif inside and line.startswith("Rss:"):
                    rss = int(line.split()[1])
        with open(f"/proc/{pid}/status") as f:
            for line in f:
                if line.startswith("RssAnon:"):
                    anon = int(line.split()[1])
    except OSError:
        pass
    return rss, anon


def present_runs(pid, lo, hi, gap_pages):
    """Present pages of [lo, hi) as runs of file page indices (gaps over gap_pages split runs)."""
    n = (hi - lo) // PAGE
    try:
        with open(f"/proc/{pid}/pagemap", "rb") as f:
            f.seek(lo // PAGE * 8)
            raw = f.read(n * 8)
    except OSError:
        return None
    entries = np.frombuffer(raw, dtype=np.uint64)
    idx = np.flatnonzero(entries >> np.uint64(63))
    if idx.size == 0:
        return []
    cuts = np.flatnonzero(np.diff(idx) > gap_pages) + 1
    return [(int(r[0]), int(r[-1]), int(r.size)) for r in np.split(idx, cuts)]


def describe(runs, offset):
    if runs is None:
        return "pagemap unreadable"
    if not runs:
        return "present 0"
    total = sum(r[2] for r in runs) * PAGE / MIB
    base = offset / MIB
    big = [r for r in runs if r[2] * PAGE >= MIB // 4]
    small = sum(r[2] for r in runs if r[2] * PAGE < MIB // 4) * PAGE / MIB
    parts = [f"{base + a * PAGE / MIB:.0f}..{base + (b + 1) * PAGE / MIB:.0f}:{c * PAGE / MIB:.1f}"
             for a, b, c in big]
    return (f"present {total:.1f} in {len(runs) - len(big)} small runs {small:.1f}, "
            f"runs (start..end MiB: present MiB) {' '.join(parts)}")


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--input", required=True, help="the mapped input file to watch")
    ap.add_argument("--interval", type=float, default=0.5)
    ap.add_argument("--gap-mib", type=float, default=1.0, help="gap that separates two runs")
    ap.add_argument("command", nargs=argparse.REMAINDER)
    a = ap.parse_args()
    cmd = a.command[1:] if a.command[:1] == ["--"] else a.command
    if not cmd:
        ap.error("no command")
    gap = int(a.gap_mib * MIB / PAGE)
    t0 = time.monotonic()
    proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL)
    best = (0, "")
    while proc.poll() is None:
        m = find_mapping(proc.pid, a.input)
        if m:
            rss, anon = smaps_rss_kb(proc.pid, m[0])
            line = (f"{time.monotonic() - t0:7.1f}s rss_map {rss / 1024:6.1f} anon {anon / 1024:6.1f} "
                    + describe(present_runs(proc.pid, m[0], m[1], gap), m[2]))
            print(line, flush=True)
            if rss >= best[0]:
                best = (rss, line)
        time.sleep(a.interval)
    print(f"# exit {proc.returncode}; largest mapping Rss:\n{best[1]}")
    return proc.returncode


if __name__ == "__main__":
    sys.exit(main())
