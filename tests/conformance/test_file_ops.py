"""merge / filter / subset / summary, checked with the official pod5 package, plus safety:
kills at random points, a full disk and a read-only destination."""
import json
import os
import random
import signal
import subprocess
import time
import uuid

import numpy as np
import pod5
import pytest

from conftest import run
from pod5_compare import assert_rows_equal, official_rows


@pytest.fixture(scope="module")
def rna_file(shared_data):
    return shared_data / "escapepod/drna/yeast_trna_reads.pod5"


@pytest.fixture(scope="module")
def big_file(tmp_path_factory, shared_data):
    """~6000 real RNA004 reads (the 180 real ones, re-identified), several batches."""
    path = tmp_path_factory.mktemp("big") / "big.pod5"
    with pod5.Reader(shared_data / "escapepod/drna/yeast_trna_reads.pod5") as src:
        reads = [r.to_read() for r in src.reads()]
    with pod5.Writer(path) as writer:
        for k in range(33):
            for r in reads:
                r.read_id = uuid.uuid4()
                writer.add_read(r)
    return path


def ids_of(path):
    # Reader.read_ids fails on an empty file (official files too), reads() does not.
    with pod5.Reader(path) as r:
        return [str(x.read_id) for x in r.reads()]


def test_filter_by_ids_and_criteria(escpod, rna_file, tmp_path):
    all_rows = official_rows(rna_file)
    ids = sorted(all_rows)[:37]
    id_file = tmp_path / "ids.txt"
    # dashes optional, comments and blank lines ignored
    id_file.write_text("# wanted\n\n" + "\n".join(i.replace("-", "") if k % 2 else i
                                                 for k, i in enumerate(ids)) + "\n")
    out = tmp_path / "ids.pod5"
    run([escpod, "filter", rna_file, "--ids", id_file, "-o", out])
    assert sorted(ids_of(out)) == ids
    assert_rows_equal({i: all_rows[i] for i in ids}, official_rows(out), "filter --ids")

    out2 = tmp_path / "len.pod5"
    run([escpod, "filter", rna_file, "--min-samples", "9000", "--max-samples", "12000", "-o", out2])
    want = {i for i, r in all_rows.items() if 9000 <= int(r["num_samples"]) <= 12000}
    assert set(ids_of(out2)) == want and want

    out3 = tmp_path / "reason.pod5"
    run([escpod, "filter", rna_file, "--exclude-end-reason", "signal_positive", "-o", out3])
    want = {i for i, r in all_rows.items() if r["end_reason"] != "signal_positive"}
    assert set(ids_of(out3)) == want


def test_filter_missing_ids_and_no_criterion(escpod, rna_file, tmp_path):
    id_file = tmp_path / "ids.txt"
    id_file.write_text(str(uuid.uuid4()) + "\n")
    out = tmp_path / "x.pod5"
    r = run([escpod, "filter", rna_file, "--ids", id_file, "-o", out], check=False)
    assert r.returncode == 1 and "in no input" in r.stderr and not out.exists()
    run([escpod, "filter", rna_file, "--ids", id_file, "--missing-ok", "-o", out])
    assert ids_of(out) == []
    r = run([escpod, "filter", rna_file, "-o", tmp_path / "y.pod5"], check=False)
    assert r.returncode == 2 and "at least one criterion" in r.stderr


def test_merge_of_filter_partition_equals_original(escpod, big_file, tmp_path):
    """merge(filter(A, S), filter(A, not S)) has the same reads and signal as A."""
    ids = ids_of(big_file)
    rng = random.Random(3)
    chosen = set(rng.sample(ids, len(ids) // 3))
    (tmp_path / "s.txt").write_text("\n".join(chosen))
    (tmp_path / "not_s.txt").write_text("\n".join(i for i in ids if i not in chosen))
    run([escpod, "filter", big_file, "--ids", tmp_path / "s.txt", "-o", tmp_path / "a.pod5"])
    run([escpod, "filter", big_file, "--ids", tmp_path / "not_s.txt", "-o", tmp_path / "b.pod5"])
    run([escpod, "merge", tmp_path / "a.pod5", tmp_path / "b.pod5", "-o", tmp_path / "m.pod5"])
    assert_rows_equal(official_rows(big_file), official_rows(tmp_path / "m.pod5"), "merge(filter)")


def test_merge_duplicates(escpod, rna_file, tmp_path):
    r = run([escpod, "merge", rna_file, tmp_path.parent / "nope.pod5", "-o", tmp_path / "m.pod5"],
            check=False)
    assert r.returncode != 0 and "nope.pod5" in r.stderr
    copy = tmp_path / "copy.pod5"
    run([escpod, "repack", rna_file, "-o", tmp_path / "c"])
    os.rename(tmp_path / "c" / rna_file.name, copy)
    r = run([escpod, "merge", rna_file, copy, "-o", tmp_path / "m.pod5"], check=False)
    assert r.returncode != 0 and "duplicate read id" in r.stderr
    assert str(rna_file) in r.stderr and str(copy) in r.stderr
    assert not (tmp_path / "m.pod5").exists()
    run([escpod, "merge", rna_file, copy, "-o", tmp_path / "m.pod5", "--duplicate-ok"])
    assert sorted(ids_of(tmp_path / "m.pod5")) == sorted(ids_of(rna_file))


def test_subset_partitions_its_input(escpod, shared_data, tmp_path):
    src = shared_data / "warpdemux/sample"
    files = sorted(src.glob("*.pod5"))
    rows = {}
    for f in files:
        rows.update(official_rows(f))
    ids = sorted(rows)
    mapping = tmp_path / "map.csv"
    with open(mapping, "w") as out:
        out.write("read_id,output,extra\n")
        for k, i in enumerate(ids[:-50]):  # 50 unmapped reads are dropped
            out.write(f"{i},group{k % 5},x\n")
    run([escpod, "subset", src, "--csv", mapping, "-o", tmp_path / "out"])
    outs = sorted((tmp_path / "out").glob("*.pod5"))
    assert [o.name for o in outs] == [f"group{k}.pod5" for k in range(5)]
    seen = {}
    for k, o in enumerate(outs):
        got = official_rows(o)
        for i in got:
            assert i not in seen
            seen[i] = o.name
        assert_rows_equal({i: rows[i] for i in got}, got, f"subset {o.name}")
    assert sorted(seen) == ids[:-50]
    assert all(seen[i] == f"group{ids.index(i) % 5}.pod5" for i in seen)

    run([escpod, "subset", src, "--columns", "end_reason,well", "--template",
         "{end_reason}-w{well}.pod5", "-o", tmp_path / "cols"])
    total = 0
    for o in (tmp_path / "cols").glob("*.pod5"):
        for i, r in official_rows(o).items():
            assert o.name == f"{r['end_reason']}-w{r['well']}.pod5"
            total += 1
    assert total == len(ids)


def test_repack_in_place_equals_original(escpod, rna_file, tmp_path):
    work = tmp_path / "work"
    work.mkdir()
    target = work / rna_file.name
    target.write_bytes(rna_file.read_bytes())
    run([escpod, "repack", target, "-o", work])
    assert_rows_equal(official_rows(rna_file), official_rows(target), "repack in place")
    assert [p.name for p in work.iterdir()] == [rna_file.name]


def test_summary_json(escpod, shared_data, rna_file):
    s = json.loads(run([escpod, "summary", rna_file, "--json"]).stdout)
    rows = official_rows(rna_file)
    lengths = sorted(int(r["num_samples"]) for r in rows.values())
    assert s["reads"] == 180 and s["samples"] == sum(lengths)
    assert s["read_length_samples"]["min"] == lengths[0]
    assert s["read_length_samples"]["max"] == lengths[-1]
    assert s["read_length_samples"]["median"] == (lengths[89] + lengths[90]) // 2
    total, acc = sum(lengths), 0
    for length in reversed(lengths):
        acc += length
        if 2 * acc >= total:
            assert s["read_length_samples"]["n50"] == length
            break
    assert s["channels"] == len({r["channel"] for r in rows.values()})
    assert s["duration_s"] == pytest.approx(sum(lengths) / 4000)


def test_refuses_overwrite_without_force(escpod, rna_file, tmp_path):
    out = tmp_path / "out.pod5"
    out.write_bytes(b"precious")
    r = run([escpod, "merge", rna_file, "-o", out], check=False)
    assert r.returncode == 1 and "--force" in r.stderr
    assert out.read_bytes() == b"precious"
    run([escpod, "merge", rna_file, "-o", out, "--force"])
    assert len(ids_of(out)) == 180


@pytest.mark.parametrize("command", ["merge", "filter", "subset"])
def test_sigkill_never_leaves_a_partial_file(escpod, big_file, tmp_path, command):
    """SIGKILL at random points: the final path holds the previous file or a complete new one."""
    out_dir = tmp_path / "out"
    out_dir.mkdir()
    final = out_dir / ("group0.pod5" if command == "subset" else "out.pod5")
    mapping = tmp_path / "map.csv"
    mapping.write_text("read_id,output\n" + "".join(f"{i},group0\n" for i in ids_of(big_file)))
    args = {
        "merge": [escpod, "merge", big_file, "-o", final, "--force"],
        "filter": [escpod, "filter", big_file, "--min-samples", "1", "-o", final, "--force"],
        "subset": [escpod, "subset", big_file, "--csv", mapping, "-o", out_dir, "--force"],
    }[command]
    previous = b"previous contents"
    final.write_bytes(previous)
    # How long a full run takes, to spread the kills over it.
    t0 = time.monotonic()
    run(args)
    full = time.monotonic() - t0
    # Kill points spread evenly over the run, the first at once (before the process can have
    # written anything, so "previous" is always observed however loaded the machine is), the
    # rest jittered so repeated CI runs probe different moments.
    rng = random.Random(11)
    outcomes = set()
    for trial in range(12):
        final.write_bytes(previous)
        proc = subprocess.Popen([str(a) for a in args], stdout=subprocess.DEVNULL,
                                stderr=subprocess.DEVNULL)
        if trial > 0:
            time.sleep(full * 1.1 * (trial - rng.uniform(0, 1)) / 11)
        proc.send_signal(signal.SIGKILL)
        proc.wait()
        data = final.read_bytes()
        if data == previous:
            outcomes.add("previous")
        else:
            assert len(ids_of(final)) == 5940, f"trial {trial}: partial file at {final}"
            outcomes.add("complete")
    # Whatever was killed, the next run succeeds and is complete.
    run(args)
    assert len(ids_of(final)) == 5940
    assert "previous" in outcomes


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGINT])
def test_signal_cleans_up_and_exits_128_plus_signal(escpod, big_file, tmp_path, sig):
    out = tmp_path / "out.pod5"
    proc = subprocess.Popen([str(escpod), "merge", str(big_file), "-o", str(out)],
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    # Signal only once the staging file exists: the handlers are installed before any file is
    # created, so this never races process start-up (slow under sanitizers).
    deadline = time.monotonic() + 60
    while not list(tmp_path.iterdir()):
        if proc.poll() is not None or time.monotonic() > deadline:
            proc.kill()
            pytest.fail(f"merge never created its staging file (exit {proc.returncode})")
        time.sleep(0.001)
    proc.send_signal(sig)
    proc.wait()
    if proc.returncode == 0:
        pytest.fail("merge finished before the signal arrived; input too small for this test")
    assert proc.returncode == 128 + sig
    assert list(tmp_path.iterdir()) == [], "staging files left behind"


def _mount_tmpfs(path, options):
    path.mkdir()
    r = subprocess.run(["mount", "-t", "tmpfs", "-o", options, "tmpfs", str(path)],
                       capture_output=True, text=True)
    if r.returncode != 0:
        pytest.fail(f"cannot mount a tmpfs for this test (needs root): {r.stderr}")


def test_full_disk_gives_clear_error_and_no_partial_output(escpod, big_file, tmp_path):
    small = tmp_path / "small"
    _mount_tmpfs(small, "size=2m")
    try:
        out = small / "out.pod5"
        r = run([escpod, "merge", big_file, "-o", out], check=False)
        assert r.returncode == 1
        assert "No space left on device" in r.stderr and "out.pod5" in r.stderr, r.stderr
        assert list(small.iterdir()) == [], "partial or staging files left on the full disk"
    finally:
        subprocess.run(["umount", str(small)])


def test_read_only_destination_is_a_clear_error(escpod, rna_file, tmp_path):
    ro = tmp_path / "ro"
    _mount_tmpfs(ro, "ro,size=1m")
    try:
        r = run([escpod, "filter", rna_file, "--min-samples", "1", "-o", ro / "x.pod5"], check=False)
        assert r.returncode == 1
        assert "Read-only file system" in r.stderr and str(ro) in r.stderr, r.stderr
    finally:
        subprocess.run(["umount", str(ro)])


@pytest.mark.parametrize("command", ["merge", "filter", "view"])
def test_bad_inputs_fail_before_any_output_and_name_the_first(escpod, rna_file, tmp_path, command):
    """Inputs are opened in parallel, but the error is always the first bad input's, in order,
    and nothing is written."""
    bad1, bad2 = tmp_path / "bad1.pod5", tmp_path / "bad2.pod5"
    data = open(rna_file, "rb").read()
    bad1.write_bytes(data[: len(data) // 2])  # truncated: no footer
    bad2.write_bytes(b"not a pod5 file at all")
    out = tmp_path / "out.pod5"
    inputs = [rna_file, rna_file, bad1, rna_file, bad2]
    args = {
        "merge": ["merge", *inputs, "-o", out, "--duplicate-ok"],
        "filter": ["filter", *inputs, "--min-samples", "1", "-o", out],
        "view": ["view", *inputs],
    }[command]
    for _ in range(3):
        r = run([escpod, *args, "-t", "2"], check=False)
        assert r.returncode != 0
        assert "bad1.pod5" in r.stderr and "bad2.pod5" not in r.stderr, r.stderr
        assert not out.exists()
    assert sorted(p.name for p in tmp_path.iterdir()) == ["bad1.pod5", "bad2.pod5"]


def test_outputs_identical_for_1_and_2_threads(escpod, big_file, rna_file, tmp_path):
    """merge, filter and subset prepare batches on several threads and write in input order:
    the same reads, in the same order, with the same fields and signal, for -t 1 and -t 2."""
    ids = ids_of(big_file)
    (tmp_path / "ids.txt").write_text("\n".join(random.Random(5).sample(ids, len(ids) // 4)))
    (tmp_path / "map.csv").write_text("read_id,output\n" + "".join(
        f"{i},{'a' if k % 3 else 'b'}\n" for k, i in enumerate(ids) if k % 5))

    def ordered(path):
        with pod5.Reader(path) as r:
            return [str(x.read_id) for x in r.reads()]

    for t in ("1", "2"):
        d = tmp_path / f"t{t}"
        d.mkdir()
        run([escpod, "merge", big_file, rna_file, "-o", d / "m.pod5", "-t", t])
        run([escpod, "filter", big_file, rna_file, "--ids", tmp_path / "ids.txt", "--missing-ok",
             "-o", d / "f.pod5", "-t", t])
        run([escpod, "subset", big_file, "--csv", tmp_path / "map.csv", "-o", d / "s", "-t", t])
    for name in ("m.pod5", "f.pod5", "s/a.pod5", "s/b.pod5"):
        one, two = tmp_path / "t1" / name, tmp_path / "t2" / name
        assert ordered(one) == ordered(two), name
        assert_rows_equal(official_rows(one), official_rows(two), name)
    assert len(ordered(tmp_path / "t1" / "m.pod5")) == len(ids) + len(ids_of(rna_file))
