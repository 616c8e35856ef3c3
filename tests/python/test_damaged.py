"""Damaged files raise (an exception naming the file), never crash the interpreter."""
import subprocess
import sys

import numpy as np
import pod5
import pytest

import escpod

SCRIPT = r"""
import sys, escpod
path, how = sys.argv[1], sys.argv[2]
try:
    if how == "reader":
        with escpod.Reader(path) as r:
            for rec in r.reads():
                rec.signal; rec.run_info; rec.pore
    else:  # a DatasetReader's random-access opens: batches validated as they are read
        with escpod.DatasetReader(path, threads=2) as ds:
            ids = list(ds.read_ids)
            ds.get_signals(ids, pa=True, threads=2)
            for sig in ds.iter_signals(ids[::3], pa=False, threads=2, chunk_samples=20_000):
                pass
            for rid in ids[::7]:
                rec = ds.get_read(rid); rec.signal; rec.run_info; rec.pore
except Exception as e:
    print("RAISED", type(e).__name__, e)
else:
    print("OK")
"""


def _variants(data: bytes, seed=3):
    rng = np.random.default_rng(seed)
    yield "empty", b""
    for cut in (8, 100, len(data) // 3, len(data) // 2, len(data) - 40, len(data) - 1):
        yield f"truncated{cut}", data[:cut]
    for k in range(12):
        b = bytearray(data)
        for pos in rng.integers(0, len(b), size=8):
            b[pos] ^= 0xFF
        yield f"flipped{k}", bytes(b)
    b = bytearray(data)
    b[len(b) // 2 : len(b) // 2 + 4096] = bytes(4096)
    yield "zeroed", bytes(b)


@pytest.mark.parametrize("how", ["reader", "dataset"])
def test_damaged_files_raise_never_crash(shared_data, tmp_path, how):
    src = shared_data / "escapepod/charging/trna_reads.pod5"
    data = src.read_bytes()
    raised = 0
    for name, blob in _variants(data):
        path = tmp_path / f"{name}.pod5"
        path.write_bytes(blob)
        r = subprocess.run([sys.executable, "-c", SCRIPT, str(path), how], capture_output=True, text=True, timeout=120)
        assert r.returncode == 0, f"{name}: interpreter died ({r.returncode}): {r.stderr[-2000:]}"
        out = r.stdout.strip()
        assert out.startswith(("RAISED", "OK")), out
        if out.startswith("RAISED"):
            raised += 1
            assert name in out or str(tmp_path) in out or "read" in out, f"{name}: message names no file: {out}"
    assert raised >= 7  # at least the empty and truncated files


def test_truncated_file_raises_runtime_error_like_official(shared_data, tmp_path):
    data = (shared_data / "escapepod/charging/trna_reads.pod5").read_bytes()
    path = tmp_path / "cut.pod5"
    path.write_bytes(data[: len(data) // 2])
    with pytest.raises(Exception) as theirs:
        pod5.Reader(path)
    with pytest.raises(Exception) as ours:
        escpod.Reader(path)
    assert isinstance(ours.value, type(theirs.value)) or type(ours.value).__name__ == type(theirs.value).__name__
    assert "cut.pod5" in str(ours.value)


def test_dataset_opening_in_parallel_names_the_damaged_file(shared_data, tmp_path):
    # A DatasetReader opens its files together (on its threads): one damaged file fails the
    # open with an error naming it; the good files alone still work.
    src = shared_data / "escapepod/charging/trna_reads.pod5"
    data = src.read_bytes()
    for i in range(3):
        (tmp_path / f"good{i}.pod5").write_bytes(data)
    (tmp_path / "cut.pod5").write_bytes(data[: len(data) // 2])
    with escpod.DatasetReader(tmp_path, threads=2) as ds:
        with pytest.raises(escpod.Pod5ApiException, match="cut.pod5"):
            ds.index_read_ids()
    (tmp_path / "cut.pod5").unlink()
    with pod5.Reader(src) as r:
        ids = [str(x) for x in r.read_ids[:5]]
        expected = {str(rec.read_id): rec.signal_pa for rec in r.reads(selection=ids)}
    with escpod.DatasetReader(tmp_path, threads=2, warn_duplicate_indexing=False) as ds:
        for rid, sig in zip(ids, ds.get_signals(ids), strict=True):
            assert np.array_equal(sig, expected[rid])
