"""escpod's extensions: many signals at once on all cores, the read-id index across files, the
GIL released during long calls."""
import gc
import shutil
import threading
import time

import numpy as np
import pod5
import pytest

import escpod
from compare import assert_same_record


def test_reader_get_signals_equal_official(shared_data):
    path = shared_data / "warpdemux/sample/small_pod5_1.pod5"
    with pod5.Reader(path) as theirs, escpod.Reader(path) as ours:
        expected = {str(r.read_id): (r.signal, r.signal_pa) for r in theirs.reads()}
        for threads in (1, 4):
            all_pa = ours.get_signals(pa=True, threads=threads)
            all_adc = ours.get_signals(pa=False, threads=threads)
            assert len(all_pa) == len(expected)
            for rid, a, b in zip(ours.read_ids, all_pa, all_adc, strict=True):
                assert a.dtype == np.float32 and np.array_equal(a, expected[rid][1])
                assert b.dtype == np.int16 and np.array_equal(b, expected[rid][0])
        # Views of one buffer: no copy per read.
        assert all_pa[1].base is not None and all_pa[1].base is all_pa[0].base
        sel = list(expected)[::-3]
        for rid, a in zip(sel, ours.get_signals(sel, pa=True), strict=True):
            assert np.array_equal(a, expected[rid][1])
        with pytest.raises(KeyError) as e:
            ours.get_signals(sel + ["00000000-0000-0000-0000-000000000001"])
        assert "00000000-0000-0000-0000-000000000001" in str(e.value)


def _sample_tree(shared_data, tmp_path):
    """The WarpDemuX sample files copied one per folder (d0, d1, ...) under tmp_path."""
    files = sorted((shared_data / "warpdemux/sample").glob("*.pod5"))
    for i, f in enumerate(files):
        (tmp_path / f"d{i}").mkdir()
        shutil.copy(f, tmp_path / f"d{i}" / f.name)
    return files


def test_dataset_index_and_signals(shared_data, tmp_path):
    files = _sample_tree(shared_data, tmp_path)
    expected = {}
    for f in files:
        with pod5.Reader(f) as r:
            for rec in r:
                expected[str(rec.read_id)] = (f.name, rec.signal_pa, rec.num_samples)
    ids = list(expected)
    rng = np.random.default_rng(1)
    pick = [ids[i] for i in rng.integers(0, len(ids), 300)]
    with escpod.DatasetReader(tmp_path, recursive=True, threads=2) as ds:
        assert len(ds) == len(expected) == 800
        assert not ds.has_duplicate()
        for rid in pick[:50]:
            rec = ds.get_read(rid)
            assert str(rec.read_id) == rid and rec.num_samples == expected[rid][2]
            assert ds.get_path(rid).name == expected[rid][0]
            assert np.array_equal(rec.signal_pa, expected[rid][1])
        for rid, sig in zip(pick, ds.get_signals(pick, pa=True), strict=True):
            assert np.array_equal(sig, expected[rid][1])
        # Streamed: the same arrays in the order asked, across files, repeats included; kept
        # arrays stay intact while later chunks decode, dropped ones give their buffer back.
        kept = list(ds.iter_signals(pick, pa=True, threads=2, chunk_samples=40_000))
        assert len(kept) == len(pick)
        for rid, sig in zip(pick, kept, strict=True):
            assert sig.dtype == np.float32 and np.array_equal(sig, expected[rid][1])
        # Chunks above the longest read: every buffer has one size, so each freed one is reused.
        chunk = 2 * max(expected[rid][2] for rid in pick)
        buffers, n = set(), 0
        for sig in ds.iter_signals(pick, pa=False, threads=2, chunk_samples=chunk):
            assert sig.dtype == np.int16 and len(sig) == expected[pick[n]][2]
            buffers.add(sig.base.__array_interface__["data"][0])
            n += 1
        assert n == len(pick) and 1 <= len(buffers) <= 4, len(buffers)
        assert list(ds.iter_signals([])) == []
        missing = "00000000-0000-0000-0000-000000000003"
        with pytest.raises(KeyError, match=missing):
            next(ds.iter_signals(pick[:3] + [missing]))
        recs = ds.get_reads(pick[:5] + ["00000000-0000-0000-0000-000000000001"])
        assert recs[-1] is None and [str(r.read_id) for r in recs[:5]] == pick[:5]
        # Bulk records (rows read alone on random-access opens, across files, repeats and an
        # absent id in between): field for field the official reader's, signal included.
        asked = pick[:120] + ["00000000-0000-0000-0000-000000000004"] + pick[:3]
        assert all(ds._reader_at(i)._file_handle().rows_alone for i in range(len(files)))
        got = ds.get_reads(asked)
        assert len(got) == len(asked) and got[120] is None
        assert [str(r.read_id) for r in got[:120] + got[121:]] == pick[:120] + pick[:3]
        n_checked = 0
        for f in files:
            with pod5.Reader(f) as r:
                theirs = {str(x.read_id): x for x in r.reads(selection=list(set(pick[:120])), missing_ok=True)}
                for k, rid in enumerate(asked):
                    if rid in theirs:
                        assert_same_record(got[k], theirs[rid], f.name)
                        assert np.array_equal(got[k].signal_pa, theirs[rid].signal_pa)
                        n_checked += 1
        assert n_checked == 123


def test_duplicates_warn(shared_data, tmp_path):
    f = shared_data / "escapepod/charging/trna_reads.pod5"
    shutil.copy(f, tmp_path / "a.pod5")
    shutil.copy(f, tmp_path / "b.pod5")
    with escpod.DatasetReader(tmp_path) as ds:
        assert ds.has_duplicate() and len(ds) == 40
        with pytest.warns(UserWarning, match="duplicate"):
            ds.get_read(next(ds.read_ids))


def ticks_during(call):
    """How often another Python thread ran (a tick about every ms) while one call was in progress:
    a call holding the GIL throughout lets it run at most around the call's edges."""
    ticks = []
    stop = threading.Event()

    def ticker():
        while not stop.is_set():
            ticks.append(time.perf_counter())
            time.sleep(0.001)

    t = threading.Thread(target=ticker)
    t.start()
    time.sleep(0.01)  # the ticker is running
    t0 = time.perf_counter()
    call()
    t1 = time.perf_counter()
    stop.set()
    t.join()
    return sum(1 for x in ticks if t0 <= x <= t1)


def test_gil_released_during_get_signals(shared_data):
    # One long decode (800 reads, one thread: tens of ms or more): the other thread keeps running
    # inside it. Ticks between calls do not count: a single call is measured.
    files = sorted((shared_data / "warpdemux/sample").glob("*.pod5"))
    with escpod.DatasetReader(files) as ds:
        ids = [str(i) for i in ds.read_ids]
        ds.get_signals(ids[:1])  # the read-id index is built outside the measured call
        n = ticks_during(lambda: ds.get_signals(ids, pa=True, threads=1))
    assert n >= 5, n


def test_the_gil_check_fails_for_a_call_holding_the_gil():
    # The check above can fail: a C call that holds the GIL as long (sum over a range runs in C
    # without releasing it) lets the ticker run at most at its edges.
    assert ticks_during(lambda: sum(range(3_000_000))) <= 2


def test_closed_reader_raises(shared_data):
    r = escpod.Reader(shared_data / "escapepod/charging/trna_reads.pod5")
    rec = next(iter(r))
    r.close()
    assert rec.num_samples > 0  # fields stay readable
    with pytest.raises(RuntimeError, match="closed"):
        rec.signal


def test_iter_signals_equal_official_and_reuses_buffers(shared_data):
    path = shared_data / "warpdemux/sample/small_pod5_1.pod5"
    with pod5.Reader(path) as theirs, escpod.Reader(path) as ours:
        expected = {str(r.read_id): (r.signal, r.signal_pa) for r in theirs.reads()}
        ids = ours.read_ids
        # Small chunks: many chunks, each read still whole; arrays kept alive stay intact even
        # though later chunks are decoded while they are held.
        for pa, k in ((True, 1), (False, 0)):
            kept = list(ours.iter_signals(pa=pa, threads=2, chunk_samples=50_000))
            assert len(kept) == len(ids) == 200
            for rid, a in zip(ids, kept, strict=True):
                assert a.dtype == (np.float32 if pa else np.int16)
                assert np.array_equal(a, expected[rid][k])
        # Dropped arrays give their chunk buffer back: a whole-file pass cycles through a few.
        buffers, n = set(), 0
        for a in ours.iter_signals(pa=True, threads=2, chunk_samples=50_000):
            buffers.add(a.base.__array_interface__["data"][0])
            n += 1
        assert n == 200 and 1 <= len(buffers) <= 4, len(buffers)
        sel = ids[::-7]
        for rid, a in zip(sel, ours.iter_signals(sel, pa=True, chunk_samples=30_000), strict=True):
            assert np.array_equal(a, expected[rid][1])
        with pytest.raises(KeyError, match="00000000-0000-0000-0000-000000000002"):
            list(ours.iter_signals(sel + ["00000000-0000-0000-0000-000000000002"]))
        # A stream left early, its next chunk decoding in the background, ends cleanly; the
        # array already taken stays intact.
        for threads in (1, 2):
            stream = ours.iter_signals(pa=True, threads=threads, chunk_samples=50_000)
            first = next(stream)
            del stream
            gc.collect()
            assert np.array_equal(first, expected[ids[0]][1])


def _indexed_copy(shared_data, tmp_path, escpod_bin):
    import subprocess

    files = _sample_tree(shared_data, tmp_path)
    subprocess.run([str(escpod_bin), "index", str(tmp_path), "-q"], check=True)
    return files


def test_dataset_uses_persistent_index(shared_data, tmp_path, escpod_bin):
    files = _indexed_copy(shared_data, tmp_path, escpod_bin)
    expected = {}
    for f in files:
        with pod5.Reader(f) as r:
            for rec in r:
                expected[str(rec.read_id)] = (f.name, rec.signal_pa, rec.read_number)
    ids = list(expected)
    pick = [ids[i] for i in np.random.default_rng(2).integers(0, len(ids), 200)]
    with escpod.DatasetReader(tmp_path, recursive=True) as ds:
        ds.index_read_ids()
        assert ds._index.n_indexed_files == len(files) == 4 and not ds._index.complete
        for rid in pick:
            rec = ds.get_read(rid)
            assert str(rec.read_id) == rid and rec.read_number == expected[rid][2]
            assert np.array_equal(rec.signal_pa, expected[rid][1])
            assert ds.get_path(rid).name == expected[rid][0]
        assert ds.get_read("00000000-0000-0000-0000-000000000003") is None
        assert ds.get_read("not-an-id") is None
        assert not ds.has_duplicate()
        for rid, sig in zip(pick, ds.get_signals(pick), strict=True):
            assert np.array_equal(sig, expected[rid][1])
    with escpod.DatasetReader(tmp_path, recursive=True, use_read_index=False) as ds:
        ds.index_read_ids()
        assert ds._index.n_indexed_files == 0 and ds._index.complete
        assert str(ds.get_read(pick[0]).read_id) == pick[0]


def test_dataset_persistent_index_stale_file_scanned(shared_data, tmp_path, escpod_bin):
    files = _indexed_copy(shared_data, tmp_path, escpod_bin)
    # Replace the second file by the first's reads: the index no longer describes it (size,
    # mtime, file identifier), so it is scanned; its ids now duplicate the first file's.
    stale = tmp_path / "d1" / files[1].name
    stale.unlink()
    shutil.copy(files[0], stale)
    with pod5.Reader(files[0]) as r:
        first_ids = [str(x) for x in r.read_ids[:5]]
    with escpod.DatasetReader(tmp_path, recursive=True) as ds:
        ds.index_read_ids()
        assert ds._index.n_indexed_files == 3
        with pytest.warns(UserWarning, match="duplicate"):
            rec = ds.get_read(first_ids[0])
        assert str(rec.read_id) == first_ids[0] and ds.get_path(first_ids[0]).parent.name == "d0"
        assert ds.has_duplicate()


def test_dataset_damaged_index_is_said_and_scanned(shared_data, tmp_path, escpod_bin, capfd):
    """A read-id index that cannot be opened is not used: the files are scanned, reads are found
    all the same, and the library says why on stderr (before, it was dropped without a word)."""
    files = _indexed_copy(shared_data, tmp_path, escpod_bin)
    manifest = tmp_path / ".escpod-index" / "manifest"
    manifest.write_bytes(b"not a manifest\n")
    with pod5.Reader(files[0]) as r:
        rid = str(r.read_ids[3])
        signal = next(rec.signal_pa for rec in r if str(rec.read_id) == rid)
    with escpod.DatasetReader(tmp_path, recursive=True) as ds:
        ds.index_read_ids()
        assert ds._index.n_indexed_files == 0 and ds._index.complete
        assert np.array_equal(ds.get_signals([rid])[0], signal)
    assert "read-id index not used" in capfd.readouterr().err
