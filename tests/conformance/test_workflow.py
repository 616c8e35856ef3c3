"""The Snakemake workflow (workflow/Snakefile): a simulated run of several POD5 files, sharded and
demultiplexed with 2 cores, gives barcode by barcode the same reads (and signal) as one
`escpod demux` over all files; a shard job killed mid-way is redone on the next run, and only it
and the shards not yet run are redone."""
import csv
import os
import shutil
import uuid
import pathlib
import signal
import subprocess
import sys
import time

import psutil
import pytest

from conftest import run
from test_report import simulate

REPO = pathlib.Path(__file__).resolve().parents[2]
SNAKEFILE = REPO / "workflow" / "Snakefile"
SNAKEMAKE = pathlib.Path(sys.executable).parent / "snakemake"


@pytest.fixture(scope="module")
def sim_run(escpod, tmp_path_factory):
    d = tmp_path_factory.mktemp("workflow")
    barcodes = REPO / "data" / "barcodes" / "escpod_demo4.csv"
    simulate(escpod, d / "train.pod5", 400, 1, barcodes)
    run([escpod, "demux", "train", d / "train.pod5", "--labels", d / "train.truth.csv", "--method", "llr",
         "-o", d / "model.json", "-f", "-q", "-t", "2"])
    (d / "in").mkdir()
    for i in range(5):
        simulate(escpod, d / "in" / f"run_{i}.pod5", 40, 20 + i, barcodes)
        (d / "in" / f"run_{i}.truth.csv").unlink()
    run([escpod, "demux", d / "in", "--model", d / "model.json", "-d", d / "single",
         "--classifications", d / "single.csv", "-t", "2", "-q"])
    return d


def snakemake_cmd(escpod, d, out, **extra):
    config = {"input": d / "in", "model": d / "model.json", "out": out, "escpod": escpod, "shard_size": 2,
              "threads": 2, **extra}
    return [str(SNAKEMAKE), "-s", str(SNAKEFILE), "--cores", "2", "--directory", str(d), "--config",
            *[f"{k}={v}" for k, v in config.items()]]


def view(escpod, path):
    return run([escpod, "view", path, "--include", "read_id,num_samples,signal_hash"]).stdout


def assert_same_as_single(escpod, d, out):
    single = sorted(p.name for p in (d / "single").glob("*.pod5"))
    merged = sorted(p.name for p in out.glob("*.pod5"))
    assert merged == single and len(single) >= 3, (merged, single)
    for name in single:
        a, b = view(escpod, out / name), view(escpod, d / "single" / name)
        assert a == b and a.count("\n") > 1, name  # same reads, same order, same signal
    rows = lambda p: sorted(tuple(r.values()) for r in csv.DictReader(open(p)))
    assert rows(out / "classifications.csv") == rows(d / "single.csv")
    assert (out / "report.html").stat().st_size > 0 and (out / "report_reads_per_barcode_mqc.json").exists()


def test_workflow_equals_one_demux(escpod, sim_run):
    d = sim_run
    out = d / "out"
    r = subprocess.run(snakemake_cmd(escpod, d, out), capture_output=True, text=True, timeout=600)
    assert r.returncode == 0, r.stderr[-4000:]
    assert sorted(p.name for p in (out / "work" / "shards").iterdir()) == ["shard00000", "shard00001", "shard00002"]
    assert_same_as_single(escpod, d, out)
    # A second run has nothing to do.
    r = subprocess.run(snakemake_cmd(escpod, d, out), capture_output=True, text=True, timeout=600)
    assert r.returncode == 0 and "Nothing to be done" in r.stdout + r.stderr, r.stderr[-4000:]


def test_workflow_annotate_mode_equals_one_demux(escpod, sim_run, tmp_path):
    """annotate=true: no copies; every input's sidecar holds, read by read, the barcode one
    `escpod demux` over all files calls."""
    d = sim_run
    work = tmp_path / "annot"
    shutil.copytree(d / "in", work / "in")
    shutil.copy(d / "model.json", work / "model.json")
    out = work / "out"
    r = subprocess.run(snakemake_cmd(escpod, work, out, annotate="true"), capture_output=True, text=True,
                       timeout=600)
    assert r.returncode == 0, r.stderr[-4000:]
    assert not list(out.glob("*.pod5"))  # no per-barcode copies
    assert sorted(p.name for p in (work / "in").glob("*.p5s")) == [f"run_{i}.pod5.p5s" for i in range(5)]
    single = {uuid.UUID(r["read_id"]): r["barcode"] for r in csv.DictReader(open(d / "single.csv"))}
    shown = run([escpod, "view", work / "in", "--include", "read_id,barcode"]).stdout.splitlines()
    assert shown[0].split("\t") == ["read_id", "barcode"]
    annotated = {uuid.UUID(line.split("\t")[0]): line.split("\t")[1] for line in shown[1:]}
    assert annotated == single and len(single) == 200
    assert len(set(single.values())) >= 3
    rows = lambda p: sorted(tuple(r.values()) for r in csv.DictReader(open(p)))
    assert rows(out / "classifications.csv") == rows(d / "single.csv")
    assert (out / "report.html").stat().st_size > 0
    r = subprocess.run(snakemake_cmd(escpod, work, out, annotate="true"), capture_output=True, text=True,
                       timeout=600)
    assert r.returncode == 0 and "Nothing to be done" in r.stdout + r.stderr, r.stderr[-4000:]


def shard_demux_processes(out):
    found = []
    for p in psutil.process_iter(["cmdline"]):
        cmd = p.info["cmdline"] or []
        if len(cmd) > 1 and cmd[1] == "demux" and any(str(out) in c and "/shards/" in c for c in cmd):
            found.append(p)
    return found


def test_killed_shard_is_redone(escpod, sim_run):
    d = sim_run
    out = d / "out_killed"
    shards = out / "work" / "shards"
    env = dict(os.environ, ESCPOD_TEST_PROGRESS_DELAY_US="30000")  # ~2.4 s a shard
    proc = subprocess.Popen(snakemake_cmd(escpod, d, out), env=env, stdout=subprocess.PIPE,
                            stderr=subprocess.STDOUT, text=True)
    killed = None
    done_before = {}
    try:
        deadline = time.time() + 300
        while killed is None and time.time() < deadline and proc.poll() is None:
            done = {p.parent.name: p.stat().st_mtime_ns for p in shards.glob("*/classifications.csv")}
            running = shard_demux_processes(out)
            # One shard finished and the next one well under way: kill that one.
            if done and running:
                time.sleep(0.8)
                done_before = {p.parent.name: p.stat().st_mtime_ns for p in shards.glob("*/classifications.csv")}
                victims = [p for p in shard_demux_processes(out)
                           if not any(f"/{s}/" in " ".join(p.cmdline()) for s in done_before)]
                if victims:
                    killed = next(s for s in ("shard00000", "shard00001", "shard00002")
                                  if f"/{s}/" in " ".join(victims[0].cmdline()))
                    victims[0].send_signal(signal.SIGKILL)
            time.sleep(0.1)
        output, _ = proc.communicate(timeout=300)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert killed, "no shard was caught running"
    assert proc.returncode != 0, output[-3000:]
    assert not (shards / killed / "classifications.csv").exists()
    assert not (out / "classifications.csv").exists()
    # The next run redoes the killed shard (and any not yet run), not the finished ones.
    r = subprocess.run(snakemake_cmd(escpod, d, out), capture_output=True, text=True, timeout=600)
    assert r.returncode == 0, r.stderr[-4000:]
    for s, mtime in done_before.items():
        assert (shards / s / "classifications.csv").stat().st_mtime_ns == mtime, f"{s} was redone"
    assert (shards / killed / "classifications.csv").exists()
    assert_same_as_single(escpod, d, out)


def test_workflow_bam_option_gives_per_barcode_bams(escpod, sim_run, tmp_path):
    """bam=BAM: the run's basecalled BAM (here unaligned, one record per read plus a split read's
    second record) split per barcode by the merged calls, as one `escpod bam-demux` would."""
    import pysam

    d = sim_run
    calls = {r["read_id"]: r["barcode"] for r in csv.DictReader(open(d / "single.csv"))}
    bam = tmp_path / "basecalls.bam"
    header = {"HD": {"VN": "1.6", "SO": "unknown"}, "RG": [{"ID": "run1", "SM": "sim"}]}
    with pysam.AlignmentFile(str(bam), "wb", header=header) as out:
        for i, read_id in enumerate(sorted(calls)):
            names = [(read_id, None)] + ([(str(uuid.uuid4()), read_id)] if i % 10 == 0 else [])
            for name, parent in names:
                a = pysam.AlignedSegment(out.header)
                a.query_name, a.flag = name, 4
                a.query_sequence, a.query_qualities = "ACGT" * 5, pysam.qualitystring_to_array("I" * 20)
                a.set_tag("RG", "run1")
                if parent:
                    a.set_tag("pi", parent)
                out.write(a)
    out = tmp_path / "out"
    cmd = snakemake_cmd(escpod, d, out, bam=bam)
    r = subprocess.run(cmd, capture_output=True, text=True, timeout=600)
    assert r.returncode == 0, r.stderr[-4000:]
    files = sorted(p.name for p in (out / "bam").glob("*.bam"))
    assert files == sorted(f"barcode_{label}.bam" for label in set(calls.values()))
    for f in files:
        label = f[len("barcode_"):-len(".bam")]
        with pysam.AlignmentFile(str(out / "bam" / f), check_sq=False) as reader:
            records = list(reader)
        reads = {(r.get_tag("pi") if r.has_tag("pi") else r.query_name) for r in records}
        assert reads == {k for k, v in calls.items() if v == label}, f
        assert all(r.get_tag("BC") == label for r in records)
        want_rg = "run1" if label == "unclassified" else f"run1_{label}"
        assert all(r.get_tag("RG") == want_rg for r in records)
