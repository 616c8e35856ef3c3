"""Every shared POD5 (layouts V0-V4) and an official-writer V7 file read field by field equal
through escpod and the official pod5 package."""
import uuid

import numpy as np
import pod5
import pytest

import escpod
from compare import assert_same_record


def _assert_same_file(path):
    with escpod.Reader(path) as ours, pod5.Reader(path) as theirs:
        assert ours.num_reads == theirs.num_reads
        assert ours.batch_count == theirs.batch_count
        assert ours.read_ids == theirs.read_ids
        assert ours.file_version == theirs.file_version
        assert ours.original_file_version == theirs.original_file_version
        assert ours.writing_software == theirs.writing_software
        assert ours.file_identifier == theirs.file_identifier
        assert ours.is_vbz_compressed == theirs.is_vbz_compressed
        assert ours.reads_table_version == theirs.reads_table_version
        n = 0
        for a, b in zip(ours.reads(), theirs.reads(), strict=True):
            assert isinstance(a.read_id, uuid.UUID)
            assert_same_record(a, b, str(path))
            n += 1
        assert n == theirs.num_reads > 0
        for ba, bb in zip(ours.read_batches(), theirs.read_batches(), strict=True):
            assert ba.num_reads == bb.num_reads
            assert ba.read_id_column.equals(bb.read_id_column)


def test_every_shared_file_matches_official(shared_pod5_files):
    for path in shared_pod5_files:
        _assert_same_file(path)


def test_official_writer_file_matches(official_written_file):
    with pod5.Reader(official_written_file) as r:
        assert r.batch_count > 1  # a multi-batch file
    _assert_same_file(official_written_file)


def test_to_read_equals_official(shared_data):
    path = shared_data / "pod5/multi_fast5_zip_v0.pod5"
    with escpod.Reader(path) as ours, pod5.Reader(path) as theirs:
        for a, b in zip(ours, theirs, strict=True):
            ra, rb = a.to_read(), b.to_read()
            for k in rb.__dataclass_fields__:
                va, vb = getattr(ra, k), getattr(rb, k)
                if k == "signal":
                    assert np.array_equal(va, vb)
                elif k in ("pore", "calibration", "tracked_scaling", "predicted_scaling", "run_info"):
                    fa = {f: getattr(va, f) for f in va.__dataclass_fields__}
                    fb = {f: getattr(vb, f) for f in vb.__dataclass_fields__}
                    assert fa.keys() == fb.keys() and all(
                        fa[f] == fb[f] or (fa[f] != fa[f] and fb[f] != fb[f]) for f in fa), k
                elif k == "end_reason":
                    assert (va.name, va.forced) == (vb.name, vb.forced)
                else:
                    assert va == vb or (va != va and vb != vb), k


def test_selection_order_duplicates_and_missing(shared_data):
    path = shared_data / "warpdemux/sample/small_pod5_0.pod5"
    with escpod.Reader(path) as ours, pod5.Reader(path) as theirs:
        ids = theirs.read_ids
        sel = [ids[50], ids[3], ids[199], ids[3], ids[0].upper()]
        a = [str(r.read_id) for r in ours.reads(selection=sel)]
        b = [str(r.read_id) for r in theirs.reads(selection=sel)]
        assert a == b and len(a) == 5
        missing = sel + [str(uuid.UUID(int=12345))]
        with pytest.raises(RuntimeError) as ea:
            list(ours.reads(selection=missing))
        with pytest.raises(RuntimeError):
            list(theirs.reads(selection=missing))
        assert "Failed to find 1 requested reads" in str(ea.value) and str(path) in str(ea.value)
        assert "00000000-0000-0000-0000-000000003039" in str(ea.value)
        assert [str(r.read_id) for r in ours.reads(selection=missing, missing_ok=True)] == b
        with pytest.raises(RuntimeError):
            list(ours.reads(selection=["not-a-read-id"]))
        assert list(ours.reads(selection=["not-a-read-id"], missing_ok=True)) == []
        assert list(theirs.reads(selection=["not-a-read-id"], missing_ok=True)) == []


def test_missing_file_raises_file_not_found(tmp_path):
    with pytest.raises(FileNotFoundError):
        pod5.Reader(tmp_path / "absent.pod5")
    with pytest.raises(FileNotFoundError) as e:
        escpod.Reader(tmp_path / "absent.pod5")
    assert "absent.pod5" in str(e.value)


def test_official_package_still_reads_signal_after_ours(shared_data, tmp_path):
    # One process, one libarrow: our reader and writer must not change what pyarrow/pod5 read.
    import escpod
    src = shared_data / "escapepod/drna/yeast_trna_reads.pod5"
    with escpod.Reader(src) as r:
        reads = [x.to_read() for x in r]
    with escpod.Writer(tmp_path / "w.pod5") as w:
        w.add_reads(reads)
    for path in (src, tmp_path / "w.pod5", shared_data / "pod5/multi_fast5_zip_v2.pod5"):
        with pod5.Reader(path) as theirs:
            assert theirs.is_vbz_compressed
            assert sum(len(x.signal) for x in theirs) > 0
