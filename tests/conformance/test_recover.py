"""escpod recover, checked with the official pod5 package: files cut at every batch boundary and
at random offsets, damaged footers, damaged signal, and files left by a killed official writer
(compared with `pod5 recover` on the same inputs). What each damaged file still holds is computed
independently (recover_layout.py, from the intact file's message layout)."""
import os
import pathlib
import random
import re
import shutil
import signal
import subprocess
import sys

import pod5
import pytest

import recover_layout as layout
from conftest import run
from pod5_compare import assert_rows_equal, official_rows

HERE = pathlib.Path(__file__).parent
PYTHON = sys.executable
POD5_TOOL = pathlib.Path(sys.executable).parent / "pod5"


def ids_in_order(path):
    with pod5.Reader(path) as r:
        return [str(x.read_id) for x in r.reads()]


def kill_writer(tmp, name, n_reads, read_batch, signal_batch, chunk, mode="exit", acq=None):
    """Runs the official writer in a subprocess and kills it after n_reads reads; returns
    (folder with the killed writer's files, the killed file, a reference file of the same reads)."""
    folder = tmp / name
    folder.mkdir()
    out, ref = folder / f"{name}.pod5", tmp / f"{name}_reference.pod5"
    cmd = [PYTHON, HERE / "kill_writer.py", out, ref, n_reads, read_batch, signal_batch, chunk, mode]
    if acq:
        cmd.append(acq)
    cmd = [str(c) for c in cmd]
    if mode == "sigkill":
        p = subprocess.Popen(cmd, stdout=subprocess.PIPE, text=True)
        assert p.stdout.readline().strip() == "ready"
        p.send_signal(signal.SIGKILL)
        p.wait()
    else:
        subprocess.run(cmd, check=True)
    return folder, out, ref


def side_files(folder):
    reads = [p for p in folder.iterdir() if p.name.endswith(".tmp-reads")]
    runs = [p for p in folder.iterdir() if p.name.endswith(".tmp-run-info")]
    assert len(reads) == 1 and len(runs) == 1, list(folder.iterdir())
    return reads[0], runs[0]


def killed_expectation(main, reads_side, run_side):
    """What a killed writer's files hold completely: (read ids in order, orphan signal ids,
    bytes after the last complete record batch of each stream)."""
    data = main.read_bytes()
    sig = layout.stream_prefix(data, 24)
    assert sig is not None and sig.kind == "signal"
    n_signal = sum(sig.batch_rows)
    unused = len(data) - (sig.batch_ends[-1] if sig.batch_ends else sig.schema_end)
    # signal row -> owner, from the complete signal batches (pyarrow)
    import pyarrow as pa
    owners = []
    stream = pa.ipc.open_stream(pa.py_buffer(data[32:]))
    for _ in sig.batch_ends:  # the complete batches only
        batch = stream.read_next_batch()
        col = batch.column("read_id")
        storage = col.storage if hasattr(col, "storage") else col
        owners += [layout._uuid_text(storage[i].as_py()) for i in range(batch.num_rows)]
    owners = owners[:n_signal]
    expected, in_reads = [], set()
    runs = set()
    run_data = run_side.read_bytes()
    ri = layout.stream_prefix(run_data, 0)
    if ri is not None:
        for values in ri.batch_values:
            runs.update(values)
        unused += len(run_data) - (ri.batch_ends[-1] if ri.batch_ends else ri.schema_end)
    else:
        unused += len(run_data)
    reads_data = reads_side.read_bytes()
    rd = layout.stream_prefix(reads_data, 0)
    if rd is not None:
        unused += len(reads_data) - (rd.batch_ends[-1] if rd.batch_ends else rd.schema_end)
        for values in rd.batch_values:
            for read_id, rows, acq in values:
                in_reads.add(read_id)
                if all(r < n_signal for r in rows) and acq in runs:
                    expected.append(read_id)
    else:
        unused += len(reads_data)
    orphans = {o for o in owners if o not in in_reads}
    return expected, orphans, unused


def report_number(text, label):
    m = re.search(rf"^\s+{label}\s+(\d+)", text, re.M)
    assert m, f"no '{label}' in report:\n{text}"
    return int(m.group(1))


# ---- finished files cut short ---------------------------------------------------------------


@pytest.fixture(scope="module")
def cut_sources(shared_data, escpod, tmp_path_factory):
    """Intact files to cut: real official files (V0, V3, V4 layouts), a multi-batch official file
    with dictionary deltas, and files from our writer."""
    tmp = tmp_path_factory.mktemp("sources")
    _, _, official_multi = kill_writer(tmp, "official", 70, 9, 6, 900)
    ours_multi = tmp / "ours_multi.pod5"
    run([escpod, "merge", official_multi, "-o", ours_multi])
    ours_rna = tmp / "ours_rna.pod5"
    run([escpod, "merge", shared_data / "escapepod/charging/trna_reads.pod5", "-o", ours_rna])
    return {
        "v0": shared_data / "pod5/multi_fast5_zip_v0.pod5",
        "v3": shared_data / "pod5/multi_fast5_zip_v3.pod5",
        "trna": shared_data / "escapepod/charging/trna_reads.pod5",
        "official_multi": official_multi,
        "ours_multi": ours_multi,
        "ours_rna": ours_rna,
    }


def cut_points(data, tables, rng, n_random):
    """Every message boundary (and one byte either side of each record batch's end), plus random
    offsets, half of them in the last third of the file where the reads table lives."""
    points = set()
    for t in tables:
        points.update([t.start, t.start + 8, t.schema_end])
        for end in t.batch_ends:
            points.update([end - 1, end, end + 1])
    size = len(data)
    for k in range(n_random):
        lo = 0 if k % 2 == 0 else size * 2 // 3
        points.add(rng.randrange(lo, size))
    return sorted(p for p in points if 0 < p < size)


def test_cut_files_recover_exactly_the_complete_reads(escpod, cut_sources, tmp_path):
    rng = random.Random(16)
    cuts_dir, out_dir = tmp_path / "cuts", tmp_path / "out"
    cuts_dir.mkdir()
    cases = []  # (cut file, source name, expected ids)
    originals = {}
    for name, path in cut_sources.items():
        data = path.read_bytes()
        tables = layout.finished_tables(data)
        legacy = not any(t.kind == "run_info" for t in tables)
        originals[name] = official_rows(path)
        for cut in cut_points(data, tables, rng, 24):
            f = cuts_dir / f"{name}_{cut}.pod5"
            f.write_bytes(data[:cut])
            cases.append((f, name, layout.complete_reads(tables, cut, legacy)))
        # Damaged footers: every read is still there.
        all_ids = layout.complete_reads(tables, len(data), legacy)
        assert all_ids == ids_in_order(path)
        for label, damaged in [
            ("nolength", data[:-32] + b"\xff" * 8 + data[-24:]),
            ("flatbuffer", data[:-200] + bytes(168) + data[-32:]),
            ("nosignature", data[:-8]),
            ("nofooter", data[:len(data) - 40]),
        ]:
            f = cuts_dir / f"{name}_footer_{label}.pod5"
            f.write_bytes(damaged)
            cases.append((f, name, all_ids))
    assert len(cases) >= 300, len(cases)
    r = run([escpod, "recover", cuts_dir, "-o", out_dir], check=False)
    assert r.returncode in (0, 1), r.stderr
    n_nonempty = 0
    for f, name, expected in cases:
        out = out_dir / (f.stem + "_recovered.pod5")
        if not expected:
            assert not out.exists(), f"{f.name}: nothing complete, yet {out.name} was written"
            assert f"{f}: " in r.stdout, f"{f.name} missing from the report"
            continue
        n_nonempty += 1
        assert out.exists(), f"{f.name}: expected {len(expected)} reads, no output\n{r.stdout}"
        assert ids_in_order(out) == expected, f"{f.name}: recovered reads differ"
        got = official_rows(out)
        want = {k: originals[name][k] for k in expected}
        assert_rows_equal(got, want, f.name)
    assert n_nonempty >= 60, n_nonempty
    # Any file with something unrecoverable makes the exit status 1.
    assert r.returncode == 1


def test_cut_report_accounts_for_reads_and_bytes(escpod, cut_sources, tmp_path):
    """A cut inside the last reads batch: the rows of that batch are lost with a reason, the
    bytes after the last complete batch are reported unused."""
    src = cut_sources["official_multi"]
    data = src.read_bytes()
    tables = layout.finished_tables(data)
    reads = [t for t in tables if t.kind == "reads"][0]
    assert len(reads.batch_ends) >= 5
    cut = reads.batch_ends[-2] + 100  # inside the last batch's message
    f = tmp_path / "cut.pod5"
    f.write_bytes(data[:cut])
    r = run([escpod, "recover", f])
    expected = layout.complete_reads(tables, cut, False)
    assert report_number(r.stdout, "reads recovered") == len(expected) == sum(reads.batch_rows[:-1])
    assert report_number(r.stdout, "bytes unused") == cut - reads.batch_ends[-2]
    # The last batch's reads: signal present, reads rows lost.
    lost = report_number(r.stdout, "reads lost")
    assert lost == reads.batch_rows[-1], r.stdout
    assert "reads-table row lost (its reads batch is cut or damaged)" in r.stdout
    assert ids_in_order(tmp_path / "cut_recovered.pod5") == expected


def test_damaged_signal_chunk_loses_only_its_read(escpod, cut_sources, tmp_path):
    """A read whose signal row does not decode is lost (reason given); the others are kept."""
    src = cut_sources["v3"]
    data = bytearray(src.read_bytes())
    tables = layout.finished_tables(bytes(data))
    # Read 4 (007cc97e-...) owns signal rows 9-13: damage the zstd frame header of row 11 (VBZ
    # has no checksum: damage inside a raw block would decode, to other samples).
    with pod5.Reader(src) as r:
        target = [x for x in r.reads()][4]
    sig = [t for t in tables if t.kind == "signal"][0]
    import pyarrow as pa
    batch = next(iter(pa.ipc.open_stream(pa.py_buffer(bytes(data[sig.start + 8:])))))
    column = batch.column("signal")
    vbz = (column.storage if hasattr(column, "storage") else column)[11].as_py()
    start = bytes(data).find(vbz)
    assert start > sig.start
    data[start:start + 8] = bytes(8)
    f = tmp_path / "damaged.pod5"
    f.write_bytes(bytes(data[:-40]))  # and no footer, so it needs recovery
    r = run([escpod, "recover", f])
    got = ids_in_order(tmp_path / "damaged_recovered.pod5")
    all_ids = layout.complete_reads(tables, len(data), False)
    assert str(target.read_id) not in got
    assert got == [i for i in all_ids if i != str(target.read_id)]
    assert "signal damaged" in r.stdout


def test_intact_file_is_left_alone(escpod, shared_data, tmp_path):
    f = tmp_path / "ok.pod5"
    shutil.copy(shared_data / "pod5/multi_fast5_zip_v3.pod5", f)
    r = run([escpod, "recover", f])
    assert "intact" in r.stdout
    assert sorted(p.name for p in tmp_path.iterdir()) == ["ok.pod5"]


def test_not_a_pod5_is_a_clear_failure(escpod, tmp_path):
    f = tmp_path / "junk.pod5"
    f.write_bytes(b"this is not a pod5 file, not even close")
    r = run([escpod, "recover", f], check=False)
    assert r.returncode == 1
    assert "junk.pod5" in r.stdout and "not a POD5" in r.stdout


# ---- killed official writer -------------------------------------------------------------------

KILLS = [
    # n_reads, read_batch, signal_batch, chunk, mode
    (25, 8, 5, 1000, "exit"),
    (41, 8, 5, 700, "exit"),
    (60, 10, 7, 500, "sigkill"),
    (17, 4, 3, 1500, "exit"),
    (30, 30, 4, 800, "exit"),     # exactly one reads batch, flushed when full
]


@pytest.mark.parametrize("n_reads,read_batch,signal_batch,chunk,mode", KILLS)
def test_killed_writer_never_fewer_reads_than_pod5_recover(escpod, tmp_path, n_reads, read_batch,
                                                          signal_batch, chunk, mode):
    folder, killed, ref = kill_writer(tmp_path, "k", n_reads, read_batch, signal_batch, chunk, mode)
    reads_side, run_side = side_files(folder)
    expected, orphans, unused = killed_expectation(killed, reads_side, run_side)
    theirs_dir = tmp_path / "theirs"
    shutil.copytree(folder, theirs_dir)
    out_dir = tmp_path / "ours"
    r = run([escpod, "recover", killed, "-o", out_dir], check=False)
    ours = out_dir / "k_recovered.pod5"
    if expected:
        assert r.returncode == 0, r.stdout + r.stderr
        assert ids_in_order(ours) == expected
        truth = official_rows(ref)
        assert_rows_equal(official_rows(ours), {k: truth[k] for k in expected}, "recovered")
    else:
        assert r.returncode == 1 and not ours.exists()
    assert report_number(r.stdout, "reads recovered") == len(expected)
    assert report_number(r.stdout, "bytes unused") == unused
    if orphans:
        assert re.search(rf"^\s+{len(orphans)}\s+signal (written|present) but reads-table row",
                         r.stdout, re.M), r.stdout
    assert "unfinished (killed writer)" in r.stdout
    # The official tool on the same files.
    t = subprocess.run([str(POD5_TOOL), "recover", str(theirs_dir / "k.pod5")], capture_output=True,
                       text=True)
    theirs = theirs_dir / "k_recovered.pod5"
    their_ids = readable_reads(theirs) if theirs.exists() and t.returncode == 0 else []
    assert set(their_ids) <= set(expected)
    assert len(expected) >= len(their_ids)


def readable_reads(path):
    """Reads of a file whose signal can be read in full. `pod5 recover` copies whole reads
    batches, so it also writes reads whose signal rows were never flushed: reading their signal
    fails ("Batch number N out of range"); those do not count as recovered."""
    good = []
    with pod5.Reader(path) as r:
        for read in r.reads():
            try:
                if len(read.signal) == read.num_samples:
                    good.append(str(read.read_id))
            except (ValueError, RuntimeError, IndexError):
                pass
    return good


def test_killed_writer_with_empty_reads_side_file(escpod, tmp_path):
    """Killed before the first reads batch was flushed: nothing to recover (pod5 recover fails
    outright); the report says how many reads' signal was written without their reads rows."""
    folder, killed, _ = kill_writer(tmp_path, "k", 5, 50, 3, 1000)
    reads_side, run_side = side_files(folder)
    expected, orphans, _ = killed_expectation(killed, reads_side, run_side)
    assert expected == [] and len(orphans) >= 1
    r = run([escpod, "recover", killed], check=False)
    assert r.returncode == 1
    assert report_number(r.stdout, "reads recovered") == 0
    assert report_number(r.stdout, "reads lost") == len(orphans)
    assert "nothing written" in r.stdout
    assert not (folder / "k_recovered.pod5").exists()


def test_run_info_from_fills_a_missing_run_info(escpod, shared_data, tmp_path):
    folder, killed, ref = kill_writer(tmp_path, "k", 30, 6, 4, 900, acq="acq-for-fill")
    reads_side, run_side = side_files(folder)
    expected, _, _ = killed_expectation(killed, reads_side, run_side)
    assert len(expected) >= 20
    run_side.write_bytes(b"")  # the run info never reached the disk
    r = run([escpod, "recover", killed, "-o", tmp_path / "a"], check=False)
    assert r.returncode == 1
    assert re.search(rf"^\s+{len(expected)}\s+run info 'acq-for-fill' missing", r.stdout, re.M), r.stdout
    # Another file of the same run supplies it.
    r = run([escpod, "recover", killed, "-o", tmp_path / "b", "--run-info-from", ref])
    out = tmp_path / "b/k_recovered.pod5"
    assert ids_in_order(out) == expected
    truth = official_rows(ref)
    assert_rows_equal(official_rows(out), {k: truth[k] for k in expected}, "filled")
    with pod5.Reader(out) as got, pod5.Reader(ref) as want:
        assert next(got.reads()).run_info == next(want.reads()).run_info
    assert "run info filled      acq-for-fill" in r.stdout
    # A file of another run: a clear error naming the acquisition id.
    r = run([escpod, "recover", killed, "-o", tmp_path / "c", "--run-info-from",
             shared_data / "pod5/multi_fast5_zip_v3.pod5"], check=False)
    assert r.returncode == 1
    assert "acq-for-fill" in r.stdout and "a08e850aaa44c8b56765eee10b386fc3e516a62b" in r.stdout
    assert not (tmp_path / "c/k_recovered.pod5").exists()


# ---- --skip-bad -------------------------------------------------------------------------------


@pytest.fixture()
def mixed_inputs(shared_data, tmp_path):
    good1 = shared_data / "pod5/multi_fast5_zip_v3.pod5"
    good2 = shared_data / "escapepod/charging/trna_reads.pod5"
    bad1, bad2 = tmp_path / "bad1.pod5", tmp_path / "bad2.pod5"
    data = good2.read_bytes()
    bad1.write_bytes(data[: len(data) // 2])
    bad2.write_bytes(b"not a pod5")
    return [good1, bad1, good2, bad2], ids_in_order(good1) + ids_in_order(good2)


@pytest.mark.parametrize("command", ["merge", "filter", "subset"])
def test_skip_bad_skips_lists_and_exits_3(escpod, mixed_inputs, tmp_path, command):
    inputs, good_ids = mixed_inputs
    out = tmp_path / "out.pod5"
    args = {
        "merge": ["merge", *inputs, "-o", out],
        "filter": ["filter", *inputs, "--min-samples", "1", "-o", out],
        "subset": ["subset", *inputs, "--columns", "end_reason", "-o", tmp_path / "split"],
    }[command]
    r = run([escpod, *args], check=False)
    assert r.returncode == 1 and not out.exists()  # today's behaviour without the flag
    r = run([escpod, *args, "--skip-bad"], check=False)
    assert r.returncode == 3, r.stderr
    assert re.search(r"skipped .*bad1\.pod5: .*", r.stderr) and re.search(r"skipped .*bad2\.pod5: .*", r.stderr)
    assert "2 inputs skipped" in r.stderr
    if command == "subset":
        got = [i for f in sorted((tmp_path / "split").iterdir()) for i in ids_in_order(f)]
        assert sorted(got) == sorted(good_ids)
    else:
        assert ids_in_order(out) == good_ids


def test_skip_bad_all_bad_fails(escpod, tmp_path):
    bad = tmp_path / "bad.pod5"
    bad.write_bytes(b"nope")
    r = run([escpod, "merge", bad, "-o", tmp_path / "out.pod5", "--skip-bad"], check=False)
    assert r.returncode == 1 and "every input was skipped" in r.stderr


def test_summary_skip_bad_exit_status(escpod, mixed_inputs):
    inputs, good_ids = mixed_inputs
    # Without --skip-bad a bad input fails summary as it fails merge: exit 1, the file named,
    # nothing on stdout.
    r = run([escpod, "summary", *inputs, "--json"], check=False)
    assert r.returncode == 1 and r.stdout == "" and "--skip-bad" in r.stderr, r
    assert any(str(p) in r.stderr for p in inputs), r.stderr
    r = run([escpod, "summary", *inputs, "--json", "--skip-bad"], check=False)
    assert r.returncode == 3
    import json
    s = json.loads(r.stdout)
    assert s["reads"] == len(good_ids) and len(s["skipped"]) == 2


def test_killed_writer_with_cut_files(escpod, tmp_path):
    """The killed writer's last writes were cut short (its side file and the main file end inside
    a batch): the complete batches before the cut are recovered, the reads of the cut batch are
    listed as lost, and pod5 recover gets no more."""
    folder, killed, ref = kill_writer(tmp_path, "k", 41, 8, 5, 700)
    reads_side, run_side = side_files(folder)
    reads_side.write_bytes(reads_side.read_bytes()[:-300])
    killed.write_bytes(killed.read_bytes()[:-1000])
    expected, orphans, unused = killed_expectation(killed, reads_side, run_side)
    assert 8 <= len(expected) < 41 and orphans
    theirs_dir = tmp_path / "theirs"
    shutil.copytree(folder, theirs_dir)
    r = run([escpod, "recover", killed, "-o", tmp_path / "ours"])
    ours = tmp_path / "ours/k_recovered.pod5"
    assert ids_in_order(ours) == expected
    truth = official_rows(ref)
    assert_rows_equal(official_rows(ours), {k: truth[k] for k in expected}, "recovered")
    assert report_number(r.stdout, "bytes unused") == unused > 0
    assert "its reads batch is cut or damaged" in r.stdout
    t = subprocess.run([str(POD5_TOOL), "recover", str(theirs_dir / "k.pod5")], capture_output=True,
                       text=True)
    theirs = theirs_dir / "k_recovered.pod5"
    their_ids = readable_reads(theirs) if theirs.exists() and t.returncode == 0 else []
    assert set(their_ids) <= set(expected)
