#!/usr/bin/env python3
"""escpod bam-filter against the two-step way users select POD5 reads by alignment today:
`samtools view [criteria] BAM [REGION] | cut -f1 | sort -u > ids.txt` then
`pod5 filter INPUTS --ids ids.txt --missing-ok -o OUT`, in one run on the same inputs.

  .venv/bin/python bench/tools/bam_filter_bench.py --build build [--scale 100] [--repeat 3]

Data sets: the shared drna reads (180 real RNA004 reads, their BAM) and, unless --scale 0, a
replicated set: every record of that BAM `scale` times under fresh read ids (coordinate order
kept, indexed), with the POD5 reads under the same ids in 4 files. The two tools alternate
`repeat` times per case, each writing a new output on tmpfs; medians are reported. Both outputs
are checked to hold the same read ids. Wall time, CPU time (user+sys, the pipeline's processes
together) and peak RSS (largest process) come from wait4().
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
import uuid

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parent))
from run_pod5_bench import measure  # noqa: E402  (one timing helper for every bench script)

ROOT = pathlib.Path(__file__).resolve().parents[2]
VENV = ROOT / ".venv" / "bin"
ALA = "tRNA-Ala-AGC-1-1-uncharged"




def replicate(shared, out_dir, scale, n_files=4):
    """The drna BAM and POD5 with every read `scale` times under fresh ids."""
    import pod5
    import pysam
    bam_out = out_dir / "rep.bam"
    if bam_out.exists() and (out_dir / "rep.bam.bai").exists():
        return bam_out, sorted(out_dir.glob("rep_*.pod5"))
    src_dir = shared / "escapepod/drna"
    with pod5.Reader(src_dir / "yeast_trna_reads.pod5") as r:
        reads = {str(x.read_id): x.to_read() for x in r.reads()}
    new_ids = {rid: [uuid.uuid4() for _ in range(scale)] for rid in reads}
    with pysam.AlignmentFile(str(src_dir / "yeast_trna_mappings.bam"), "rb") as src, \
         pysam.AlignmentFile(str(bam_out), "wb", template=src) as dst:
        for rec in src.fetch(until_eof=True):
            for nid in new_ids[rec.query_name]:
                rec.query_name = str(nid)
                dst.write(rec)
    pysam.index(str(bam_out))
    writers = [pod5.Writer(out_dir / f"rep_{k}.pod5") for k in range(n_files)]
    k = 0
    for rid, read in reads.items():
        for nid in new_ids[rid]:
            read.read_id = nid
            writers[k % n_files].add_read(read)
            k += 1
    for w in writers:
        w.close()
    return bam_out, sorted(out_dir.glob("rep_*.pod5"))


def ids_of(path):
    import pod5
    with pod5.Reader(path) as r:
        return {str(x.read_id) for x in r.reads()}


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--build", default="build")
    ap.add_argument("--data", default=str(ROOT / "bench/data/bam_filter"))
    ap.add_argument("--shared", default=str(ROOT.parent / "shared/data"))
    ap.add_argument("--scale", type=int, default=100)
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--threads", type=int, default=os.cpu_count())
    a = ap.parse_args()
    escpod = (ROOT / a.build / "src/cli/escpod").resolve()
    shared = pathlib.Path(a.shared)
    data = pathlib.Path(a.data)
    data.mkdir(parents=True, exist_ok=True)
    sets = [("drna (180 reads, 1 file)", shared / "escapepod/drna/yeast_trna_mappings.bam",
             [shared / "escapepod/drna/yeast_trna_reads.pod5"])]
    if a.scale > 0:
        t0 = time.monotonic()
        bam, pods = replicate(shared, data, a.scale)
        print(f"data set ready in {time.monotonic() - t0:.1f} s", file=sys.stderr)
        sets.append((f"drna x{a.scale} ({180 * a.scale} reads, {len(pods)} files)", bam, pods))
    cases = [("--quality 15", ["-q", "15"], ["--quality", "15"], None),
             (f"--region {ALA}", [], ["--region", ALA], ALA),
             ("--mapped", ["-F", "4"], ["--mapped"], None)]
    tmp = pathlib.Path(tempfile.mkdtemp(dir="/dev/shm" if os.path.isdir("/dev/shm") else None))
    rows = []
    try:
        for set_name, bam, pods in sets:
            for case_name, st_args, esc_args, region in cases:
                res = {"escpod": [], "two-step": []}
                for rep in range(a.repeat):
                    out_e = tmp / f"e{rep}.pod5"
                    out_p = tmp / f"p{rep}.pod5"
                    ids = tmp / f"ids{rep}.txt"
                    esc = [str(escpod), "bam-filter", "-b", str(bam), "-o", str(out_e), "-t",
                           str(a.threads), "-q", *esc_args, *map(str, pods)]
                    st = " ".join(["samtools", "view", "-@", str(a.threads), *st_args, str(bam),
                                   *([region] if region else [])])
                    two = ["bash", "-c",
                           f"set -eo pipefail; {st} | cut -f1 | sort -u > {ids} && "
                           f"{VENV}/pod5 filter {' '.join(map(str, pods))} --ids {ids} "
                           f"--missing-ok -t {a.threads} -o {out_p}"]
                    order = [("escpod", esc), ("two-step", two)]
                    if rep % 2:
                        order.reverse()
                    for name, cmd in order:
                        res[name].append(measure(cmd))
                    got_e, got_p = ids_of(out_e), ids_of(out_p)
                    assert got_e == got_p and got_e, (case_name, len(got_e), len(got_p))
                    n_reads = len(got_e)
                    for p in (out_e, out_p, ids):
                        p.unlink()
                med = {k: {m: statistics.median(r[m] for r in v) for m in ("wall_s", "cpu_s", "rss_mib")}
                       for k, v in res.items()}
                rows.append((set_name, case_name, n_reads, med, res))
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    print("| data | criteria | reads out | escpod wall s | two-step wall s | wall ratio | "
          "escpod CPU s | two-step CPU s | CPU ratio | escpod RSS MiB | two-step RSS MiB |")
    print("|---|---|---|---|---|---|---|---|---|---|---|")
    for set_name, case_name, n, med, res in rows:
        e, p = med["escpod"], med["two-step"]
        walls = lambda k: ", ".join(f"{r['wall_s']:.2f}" for r in res[k])
        print(f"| {set_name} | `{case_name}` | {n} | {e['wall_s']:.3f} [{walls('escpod')}] | "
              f"{p['wall_s']:.3f} [{walls('two-step')}] | {p['wall_s'] / e['wall_s']:.1f}x | "
              f"{e['cpu_s']:.3f} | {p['cpu_s']:.3f} | {p['cpu_s'] / max(e['cpu_s'], 1e-3):.1f}x | "
              f"{e['rss_mib']:.0f} | {p['rss_mib']:.0f} |")


if __name__ == "__main__":
    main()
