"""Files written by escpod.Writer read back equal through the official reader and ours."""
import numpy as np
import pod5
import pytest

import escpod
from compare import assert_same_record
from conftest import make_reads


def test_round_trip_through_official_reader(tmp_path):
    reads = make_reads(escpod, 1300, seed=11)
    path = tmp_path / "ours.pod5"
    with escpod.Writer(path, software_name="escpod test") as w:
        w.add_reads(reads[:1000])
        for r in reads[1000:]:
            w.add_read(r)
    with pod5.Reader(path) as theirs, escpod.Reader(path) as ours:
        assert theirs.writing_software == "escpod test"
        assert theirs.num_reads == 1300
        for src, b, a in zip(reads, theirs.reads(), ours.reads(), strict=True):
            assert b.read_id == src.read_id
            assert np.array_equal(b.signal, src.signal)
            assert b.read_number == src.read_number and b.start_sample == src.start_sample
            assert b.pore.channel == src.pore.channel and b.pore.pore_type == src.pore.pore_type
            assert b.end_reason.name == src.end_reason.name and b.end_reason.forced == src.end_reason.forced
            assert b.calibration.offset == src.calibration.offset
            assert b.calibration.scale == src.calibration.scale
            assert b.run_info.acquisition_id == src.run_info.acquisition_id
            assert b.run_info.context_tags == src.run_info.context_tags
            assert b.run_info.acquisition_start_time == src.run_info.acquisition_start_time
            assert b.selected_read_level == src.selected_read_level
            assert b.tracked_scaling.shift == src.tracked_scaling.shift
            assert_same_record(a, b, "round trip")


def test_same_reads_written_by_both_writers_read_equal(tmp_path):
    ours_path, theirs_path = tmp_path / "ours.pod5", tmp_path / "theirs.pod5"
    with escpod.Writer(ours_path) as w:
        w.add_reads(make_reads(escpod, 300, seed=5))
    with pod5.Writer(theirs_path) as w:
        w.add_reads(make_reads(pod5, 300, seed=5))
    with pod5.Reader(ours_path) as a, pod5.Reader(theirs_path) as b:
        for ra, rb in zip(a.reads(), b.reads(), strict=True):
            assert_same_record(ra, rb, "writers")


def test_exception_in_with_block_leaves_no_file(tmp_path):
    path = tmp_path / "partial.pod5"
    with pytest.raises(ZeroDivisionError):
        with escpod.Writer(path) as w:
            w.add_reads(make_reads(escpod, 10))
            1 / 0
    assert list(tmp_path.iterdir()) == []


def test_closed_writer_and_existing_file(tmp_path):
    path = tmp_path / "x.pod5"
    w = escpod.Writer(path)
    w.add_reads(make_reads(escpod, 3))
    w.close()
    with pytest.raises(escpod.Pod5ApiException):
        w.add_reads(make_reads(escpod, 1))
    with pytest.raises(FileExistsError) as e:
        escpod.Writer(path)
    assert "x.pod5" in str(e.value)
    with pytest.raises(TypeError):
        with escpod.Reader(path) as r, escpod.Writer(tmp_path / "y.pod5") as w2:
            w2.add_read(next(iter(r)))
    assert not (tmp_path / "y.pod5").exists()


def test_uncompressed_signal(tmp_path):
    path = tmp_path / "raw.pod5"
    reads = make_reads(escpod, 40)
    with escpod.Writer(path, signal_compression_type=escpod.SignalType.UncompressedSignal) as w:
        w.add_reads(reads)
    with pod5.Reader(path) as r:
        assert not r.is_vbz_compressed
        for src, b in zip(reads, r.reads(), strict=True):
            assert np.array_equal(src.signal, b.signal)
