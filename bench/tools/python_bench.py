#!/usr/bin/env python3
"""The escpod Python package against the official `pod5` package and `escapepod` (PyPI), in one run.

  .venv/bin/python bench/tools/python_bench.py --build build [--data bench/data] [--reads 200000]

Uses the POD5 benchmark data set of run_pod5_bench.py (real RNA004 reads re-identified into 10
files; built with build/bench/tools/make_dataset if missing; --reads N makes a smaller one) and
measures, each library in a fresh process, the median of --repeat runs:
  signal_pa    all signals of one file in picoamps (1 thread, and all cores where a library can;
               escpod: per record, get_signals (all at once) and iter_signals (streamed))
  records      iterating every record of one file reading its fields
  random_ids   1,000 random reads (record + picoamp signal) by id from the 10-file collection,
               opening the collection included (escpod also through a prebuilt `escpod index` of
               hard links to the same files, with get_signals(ids) for all ids at once, and
               streamed with DatasetReader.iter_signals(ids), each signal used and dropped as
               the pod5 loop does)
  write        writing 20,000 reads (signal from the data set) to a new file
Prints a Markdown table of seconds (wall) and CPU seconds (user + system, all threads) and
ratios; writes JSON to --json.
"""
import argparse
import json
import os
import pathlib
import random
import statistics
import subprocess
import sys
import tempfile

ROOT = pathlib.Path(__file__).resolve().parents[2]
PY = str(ROOT / ".venv" / "bin" / "python")

TASK = r'''
import json, sys, time, os, resource
task, lib, threads, variant, arg = sys.argv[1], sys.argv[2], int(sys.argv[3]), sys.argv[4], sys.argv[5]
files = sys.argv[6:]
if lib == "escpod":
    import escpod as mod
elif lib == "pod5":
    import pod5 as mod
else:
    import escapepod as mod
def cpu_seconds():
    r = resource.getrusage(resource.RUSAGE_SELF)
    return r.ru_utime + r.ru_stime
t0 = time.perf_counter()
c0 = cpu_seconds()
n = 0
if task == "signal_pa":
    f = files[0]
    if lib == "escpod":
        with mod.Reader(f) as r:
            if variant == "records":
                for rec in r.reads():
                    n += len(rec.signal_pa)
            elif variant == "iter":
                for s in r.iter_signals(pa=True, threads=threads):
                    n += len(s)
            else:
                n = sum(len(s) for s in r.get_signals(pa=True, threads=threads))
    elif lib == "pod5":
        with mod.Reader(f) as r:
            for rec in r.reads():
                n += len(rec.signal_pa)
    else:
        with mod.Reader(f) as r:
            if threads > 1:
                n = sum(len(s) for _, s in r.get_signals_pa(list(r)))
            else:
                for rec in r:
                    n += len(r.get_signal_pa(rec))
elif task == "records":
    f = files[0]
    acc = 0
    if lib in ("escpod", "pod5"):
        with mod.Reader(f) as r:
            for rec in r.reads():
                rid = rec.read_id; p = rec.pore; c = rec.calibration; er = rec.end_reason
                acc += rec.read_number + rec.start_sample + rec.num_samples + p.channel + p.well
                accf = rec.median_before + c.scale; acc += len(er.name) + len(rec.run_info.acquisition_id)
                n += 1
    else:
        with mod.Reader(f) as r:
            ri = r.run_infos
            for rec in r:
                rid = rec.read_id
                acc += rec.read_number + rec.start_sample + rec.num_samples + rec.channel + rec.well
                accf = rec.median_before + rec.calibration_scale; acc += len(rec.end_reason) + len(ri[rec.run_info_index].acquisition_id)
                n += 1
elif task == "random_ids":
    ids = open(arg).read().split()
    if lib == "escpod" and variant == "bulk":
        with mod.DatasetReader(files, threads=max(threads, 1)) as ds:
            n = sum(len(s) for s in ds.get_signals(ids, pa=True, threads=threads))
    elif lib == "escpod" and variant == "stream":
        with mod.DatasetReader(files, threads=max(threads, 1)) as ds:
            for s in ds.iter_signals(ids, pa=True, threads=threads):
                n += len(s)
    elif lib in ("escpod", "pod5"):
        with mod.DatasetReader(files, threads=max(threads, 1)) as ds:
            for rid in ids:
                rec = ds.get_read(rid)
                n += len(rec.signal_pa)
    else:
        with mod.DatasetReader(files) as ds:
            for rid in ids:
                rec = ds.reads(selection=[rid])[0]
                n += len(ds.get_signal_pa(rec))
elif task == "write":
    out = arg
    import numpy as np
    if lib in ("escpod", "pod5"):
        reads = []
        for src in files:
            with mod.Reader(src) as r:
                for rec in r.reads():
                    if len(reads) == 20000: break
                    reads.append(rec.to_read())
        # pod5's record types: rebuild with the writing module's classes
        def conv(x):
            import dataclasses
            return mod.Read(read_id=x.read_id, pore=mod.Pore(**dataclasses.asdict(x.pore)),
                calibration=mod.Calibration(x.calibration.offset, x.calibration.scale),
                read_number=x.read_number, start_sample=x.start_sample, median_before=x.median_before,
                end_reason=mod.EndReason(mod.EndReasonEnum[x.end_reason.reason.name], x.end_reason.forced),
                run_info=mod.RunInfo(**{k: getattr(x.run_info, k) for k in x.run_info.__dataclass_fields__}),
                num_minknow_events=x.num_minknow_events, signal=x.signal)
        reads = [conv(x) for x in reads]
        t0 = time.perf_counter()
        c0 = cpu_seconds()
        with mod.Writer(out) as w:
            w.add_reads(reads)
        n = len(reads)
    else:
        recs, sigs = [], []
        for src in files:
            with mod.Reader(src) as r:
                for x in r:
                    if len(recs) == 20000: break
                    recs.append(x); sigs.append(r.get_signal(x))
                ri = r.run_infos[0]
        t0 = time.perf_counter()
        c0 = cpu_seconds()
        with mod.Writer(out) as w:
            w.add_run_info(ri)
            w.add_reads(recs, sigs)
        n = len(recs)
secs = time.perf_counter() - t0
print(json.dumps({"seconds": secs, "cpu_seconds": cpu_seconds() - c0, "n": n}))
'''


def run_task(task, lib, threads, variant, arg, files, repeat):
    runs = []
    for _ in range(repeat):
        if task == "write" and os.path.exists(arg):
            os.unlink(arg)
        out = subprocess.run([PY, "-c", TASK, task, lib, str(threads), variant or "-", str(arg), *map(str, files)],
                             capture_output=True, text=True)
        if out.returncode != 0:
            raise RuntimeError(f"{task} {lib} failed:\n{out.stderr[-3000:]}")
        runs.append(json.loads(out.stdout.strip().splitlines()[-1]))
    secs = statistics.median(r["seconds"] for r in runs)
    cpu = statistics.median(r["cpu_seconds"] for r in runs)
    return {"task": task, "lib": lib, "threads": threads, "variant": variant, "seconds": secs,
            "cpu_seconds": cpu, "n": runs[0]["n"], "runs": [r["seconds"] for r in runs]}


def indexed_copy(build, files):
    """Hard links to `files` in a folder indexed by `escpod index` (the files themselves stay
    outside any index, so the other rows scan them)."""
    folder = files[0].parent / f"indexed-{files[0].name.rsplit('_', 1)[0]}"
    folder.mkdir(exist_ok=True)
    links = []
    for f in files:
        link = folder / f.name
        if not link.exists():
            os.link(f, link)
        links.append(link)
    subprocess.run([build / "src/cli/escpod", "index", folder, "-q"], check=True)
    return links


def ensure_dataset(build, data, n_reads):
    prefix = "reads200k" if n_reads == 200000 else f"reads{n_reads}"
    files = sorted(data.glob(f"{prefix}_*.pod5"))
    if len(files) == 10:
        return files
    data.mkdir(parents=True, exist_ok=True)
    shared = ROOT.parent / "shared" / "data"
    sources = [shared / "escapepod/drna/yeast_trna_reads.pod5"] + sorted((shared / "warpdemux/sample").glob("*.pod5"))
    subprocess.run([build / "bench/tools/make_dataset", *sources, "-o", data / prefix,
                    "-n", str(n_reads), "-k", "10"], check=True)
    return sorted(data.glob(f"{prefix}_*.pod5"))


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--build", default="build")
    ap.add_argument("--data", default=str(ROOT / "bench/data"))
    ap.add_argument("--reads", type=int, default=200000, help="reads in the 10-file data set")
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--json", default=None)
    ap.add_argument("--tasks", default="signal_pa,records,random_ids,write",
                    help="comma-separated tasks to run (default: all four)")
    args = ap.parse_args()
    tasks = args.tasks.split(",")
    files = ensure_dataset(pathlib.Path(args.build).resolve(), pathlib.Path(args.data), args.reads)
    n_cpu = os.cpu_count()
    work = pathlib.Path(tempfile.mkdtemp(prefix="escpod-pybench-", dir="/dev/shm" if os.path.isdir("/dev/shm") else None))
    import escpod
    ids = []
    with escpod.DatasetReader(files) as ds:
        all_ids = list(ds.read_ids)
    ids = random.Random(1).sample(all_ids, 1000)
    (work / "ids.txt").write_text("\n".join(ids) + "\n")
    rows = []
    one = files[:1]
    indexed = indexed_copy(pathlib.Path(args.build).resolve(), files)
    ids_file = work / "ids.txt"
    plan = [
        ("signal_pa", "pod5", 1, "records", one), ("signal_pa", "escapepod", 1, "", one),
        ("signal_pa", "escapepod", n_cpu, "", one), ("signal_pa", "escpod", 1, "records", one),
        ("signal_pa", "escpod", 1, "bulk", one), ("signal_pa", "escpod", n_cpu, "bulk", one),
        ("signal_pa", "escpod", 1, "iter", one), ("signal_pa", "escpod", n_cpu, "iter", one),
        ("records", "pod5", 1, "", one), ("records", "escapepod", 1, "", one), ("records", "escpod", 1, "", one),
        ("random_ids", "pod5", 1, "", files), ("random_ids", "escapepod", 1, "", files),
        ("random_ids", "escpod", 1, "", files), ("random_ids", "escpod", n_cpu, "", files),
        ("random_ids", "escpod", 1, "indexed", indexed), ("random_ids", "escpod", n_cpu, "bulk", files),
        ("random_ids", "escpod", n_cpu, "stream", files),
        ("write", "pod5", 1, "", files), ("write", "escapepod", 1, "", files),
        ("write", "escpod", 1, "", files),
    ]
    for task, lib, t, variant, fs in plan:
        if task not in tasks:
            continue
        arg = {"random_ids": ids_file, "write": work / "out.pod5"}.get(task, "-")
        r = run_task(task, lib, t, variant, arg, fs, args.repeat)
        rows.append(r)
        print(json.dumps(r), file=sys.stderr)
    if (work / "out.pod5").exists():
        (work / "out.pod5").unlink()
    (work / "ids.txt").unlink()
    work.rmdir()
    result = {"cpus": n_cpu, "files": [str(f) for f in files], "rows": rows,
              "file_bytes": files[0].stat().st_size}
    if args.json:
        pathlib.Path(args.json).write_text(json.dumps(result, indent=1))
    print(f"| task | library | threads | variant | seconds | CPU seconds | vs escpod |")
    print("|---|---|---:|---|---:|---:|---:|")
    for task in tasks:
        group = [r for r in rows if r["task"] == task]
        best = min(r["seconds"] for r in group if r["lib"] == "escpod")
        for r in group:
            print(f"| {task} | {r['lib']} | {r['threads']} | {r['variant']} | {r['seconds']:.3f} | "
                  f"{r['cpu_seconds']:.3f} | {r['seconds'] / best:.2f}x |")


if __name__ == "__main__":
    main()
