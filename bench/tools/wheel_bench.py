"""The wheel's size (what dominates it) and its start-up against the CMake build, same run.

Start-up: wall time of `escpod --version` and of `escpod filter --ids` of one read from a small
POD5, each
run N times interleaved, median and ratio; for the wheel both through pip's `escpod` command
(python/escpod_launcher, then the program) and through the packaged program directly, so the
launcher's share shows.
Usage: python bench/tools/wheel_bench.py WHEEL VENV_WITH_WHEEL BUILD_ESCPOD POD5 [--runs N]"""
import argparse
import os
import statistics
import subprocess
import tempfile
import time
import zipfile
from pathlib import Path


def size_table(wheel: Path) -> str:
    with zipfile.ZipFile(wheel) as z:
        items = sorted(((i.file_size, i.compress_size, i.filename) for i in z.infolist()), reverse=True)
    total, packed = sum(i[0] for i in items), sum(i[1] for i in items)
    rows = [f"wheel {wheel.name}: {wheel.stat().st_size / 2**20:.1f} MiB "
            f"({total / 2**20:.1f} MiB unpacked, {len(items)} files)",
            "| file | unpacked MiB | compressed MiB | share of wheel |", "|---|---|---|---|"]
    for size, comp, name in items[:10]:
        rows.append(f"| {name} | {size / 2**20:.1f} | {comp / 2**20:.1f} | {100 * comp / packed:.0f}% |")
    return "\n".join(rows)


def timed(cmd) -> float:
    t = time.perf_counter()
    subprocess.run(cmd, check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    return time.perf_counter() - t


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("wheel", type=Path)
    ap.add_argument("venv", type=Path)
    ap.add_argument("build_escpod", type=Path)
    ap.add_argument("pod5", type=Path)
    ap.add_argument("--runs", type=int, default=30)
    a = ap.parse_args()
    print(size_table(a.wheel))

    out = subprocess.run([a.build_escpod, "view", a.pod5, "--include", "read_id"], check=True,
                         capture_output=True, text=True).stdout.split()
    work = Path(tempfile.mkdtemp())
    (work / "ids.txt").write_text(out[1] + "\n")
    site = next((a.venv / "lib").glob("python3*/site-packages"))
    programs = {"CMake build": a.build_escpod, "wheel: pip's escpod command": a.venv / "bin" / "escpod",
                "wheel: packaged program": site / "escpod" / "_bin" / "escpod"}
    jobs = {"--version": lambda p, i: [p, "--version"],
            "filter --ids (1 read)": lambda p, i: [p, "filter", a.pod5, "--ids", work / "ids.txt", "-o",
                                                    work / f"out{i}.pod5", "-f", "-q"]}
    print(f"\nstart-up, median of {a.runs} interleaved runs (ms); ratio against the CMake build")
    print("| command | " + " | ".join(programs) + " |")
    print("|---|" + "---|" * len(programs))
    for job, make in jobs.items():
        times = {name: [] for name in programs}
        for i in range(a.runs):
            for name, prog in programs.items():
                times[name].append(timed(make(prog, i)))
        base = statistics.median(times["CMake build"])
        cells = [f"{1000 * statistics.median(t):.1f} ({statistics.median(t) / base:.2f}x)" for t in times.values()]
        print(f"| `escpod {job}` | " + " | ".join(cells) + " |")


if __name__ == "__main__":
    main()
