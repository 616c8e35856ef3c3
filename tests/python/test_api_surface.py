"""pod5 API surface beyond records: signal chunks and rows, the Arrow tables through pyarrow,
signal_tools' VBZ functions and CompressedRead, each against the official package."""
import math
import uuid

import numpy as np
import pod5
import pyarrow as pa
import pytest

import escpod
from conftest import make_reads


def _same_table(a: pa.Table, b: pa.Table):
    # Table.equals treats NaN as unequal; compare values with NaN == NaN.
    assert a.schema.equals(b.schema, check_metadata=True) and a.num_rows == b.num_rows
    for name in a.schema.names:
        x, y = a[name].to_pylist(), b[name].to_pylist()
        same = [u == v or (isinstance(u, float) and math.isnan(u) and math.isnan(v)) for u, v in zip(x, y)]
        assert all(same), f"column {name} differs"


def test_signal_rows_and_chunks_equal_official(shared_pod5_files, official_written_file):
    n_multi = 0
    for path in [*shared_pod5_files, official_written_file]:
        with pod5.Reader(path) as theirs, escpod.Reader(path) as ours:
            for k, (a, b) in enumerate(zip(theirs.reads(), ours.reads(), strict=True)):
                if k == 60:
                    break
                rows_a, rows_b = a.signal_rows, b.signal_rows
                assert [tuple(r) for r in rows_a] == [tuple(r) for r in rows_b], f"{path} {a.read_id}"
                assert rows_b and rows_b[0].sample_count > 0 and rows_b[0].byte_count > 0
                n_multi += len(rows_a) > 1
                for i in (*range(len(rows_a)), -1):
                    sa, sb = a.signal_for_chunk(i), b.signal_for_chunk(i)
                    assert sb.dtype == np.int16 and np.array_equal(sa, sb), f"{path} {a.read_id} chunk {i}"
                with pytest.raises(IndexError):
                    b.signal_for_chunk(len(rows_a))
    assert n_multi >= 10  # reads stored in several chunks were compared


def test_arrow_tables_equal_official(official_written_file, shared_data):
    with pod5.Reader(official_written_file) as theirs, escpod.Reader(official_written_file) as ours:
        _same_table(ours.read_table.read_all(), theirs.read_table.read_all())
        _same_table(ours.run_info_table.read_all(), theirs.run_info_table.read_all())
        assert ours.signal_table.num_record_batches == theirs.signal_table.num_record_batches
        assert ours.read_table.num_record_batches == ours.batch_count >= 2
        for i in range(ours.batch_count):
            batch = ours.get_batch(i)
            _same_table(pa.Table.from_batches([batch.arrow]), pa.Table.from_batches([theirs.read_table.get_batch(i)]))
            cols = batch.columns
            assert cols.read_number.to_pylist() == theirs.get_batch(i).columns.read_number.to_pylist()
            assert cols.read_id.equals(theirs.get_batch(i).columns.read_id)
    # A file of a layout older than run-info tables: ours has none to give (pod5 migrates).
    with escpod.Reader(shared_data / "pod5/multi_fast5_zip_v0.pod5") as old:
        assert old.read_table.num_record_batches == old.batch_count
        with pytest.raises(RuntimeError, match="multi_fast5_zip_v0.pod5: the file has no run info table"):
            old.run_info_table
    ours.close()
    with pytest.raises(RuntimeError, match="closed"):
        ours.read_table


def test_vbz_functions_equal_official():
    rng = np.random.default_rng(5)
    for n in (1, 7, 8, 9, 1000, 102400, 250_001):
        signal = np.cumsum(rng.integers(-40, 40, size=n)).astype(np.int16)
        ours, theirs = escpod.vbz_compress_signal(signal), pod5.vbz_compress_signal(signal)
        assert ours.dtype == np.uint8
        # Same codec and zstd level: the same bytes (zstd versions could differ; decoding
        # each other's cells is what must hold).
        assert np.array_equal(ours, theirs), n
        assert np.array_equal(pod5.vbz_decompress_signal(ours, n), signal)
        assert np.array_equal(escpod.vbz_decompress_signal(theirs, n), signal)
        assert np.array_equal(escpod.vbz_decompress_signal(memoryview(theirs.tobytes()), n), signal)
        into = np.empty(n, dtype=np.int16)
        assert escpod.vbz_decompress_signal_into(theirs, into) is into and np.array_equal(into, signal)
        chunks, lengths = escpod.vbz_compress_signal_chunked(signal, 1000)
        their_chunks, their_lengths = pod5.signal_tools.vbz_compress_signal_chunked(signal, 1000)
        assert lengths == their_lengths and all(np.array_equal(a, b) for a, b in zip(chunks, their_chunks))
        assert np.array_equal(escpod.vbz_decompress_signal_chunked(chunks, lengths), signal)
    assert escpod.vbz_compress_signal(np.array([], dtype=np.int16)).size == 0
    assert escpod.vbz_decompress_signal(np.array([], dtype=np.uint8), 0).size == 0
    cell = escpod.vbz_compress_signal(np.arange(100, dtype=np.int16))
    with pytest.raises(ValueError):
        escpod.vbz_decompress_signal(cell, 99)  # not the count the cell holds
    with pytest.raises(ValueError):
        escpod.vbz_decompress_signal(cell[:-3], 100)  # truncated
    with pytest.raises(ValueError, match="Inconsistent number of chunks"):
        escpod.vbz_decompress_signal_chunked([cell], [100, 1])


def _compressed(mod, read, chunk_size):
    chunks, lengths = mod.signal_tools.vbz_compress_signal_chunked(read.signal, chunk_size)
    fields = {k: getattr(read, k) for k in read.__dataclass_fields__ if k != "signal"}
    return mod.CompressedRead(**fields, signal_chunks=chunks, signal_chunk_lengths=lengths)


@pytest.mark.parametrize("signal_type", ["VbzSignal", "UncompressedSignal"])
def test_writer_compressed_reads_read_back_by_official(tmp_path, signal_type):
    reads = make_reads(escpod, 60, seed=11)
    compressed = [_compressed(escpod, r, 5000) for r in reads]
    assert compressed[0].sample_count == len(reads[0].signal)
    assert np.array_equal(compressed[0].decompressed_signal, reads[0].signal)
    path = tmp_path / "compressed.pod5"
    with escpod.Writer(path, signal_compression_type=getattr(escpod.SignalType, signal_type)) as w:
        w.add_reads(compressed[:30])
        for r in compressed[30:]:
            w.add_read(r)
    with pod5.Reader(path) as theirs:
        got = {rec.read_id: rec for rec in theirs.reads()}
        assert len(got) == 60
        for r in reads:
            rec = got[r.read_id]
            assert np.array_equal(rec.signal, r.signal) and rec.read_number == r.read_number
            if signal_type == "VbzSignal":
                # Cells stored as given: one stored chunk per 5000 samples.
                assert len(rec.signal_rows) == -(-len(r.signal) // 5000)


def test_writer_rejects_bad_compressed_chunk(tmp_path):
    read = make_reads(escpod, 1, seed=3)[0]
    bad = _compressed(escpod, read, 1000)
    bad.signal_chunk_lengths[0] += 1
    path = tmp_path / "bad.pod5"
    with pytest.raises(ValueError, match=rf"read {read.read_id}: signal chunk 0 \(1001 samples stated\)"):
        with escpod.Writer(path) as w:
            w.add_read(bad)
    assert not path.exists()
