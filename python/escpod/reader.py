"""Reader, ReadRecord and ReadRecordBatch: pod5.reader's API over escpod._core."""
import datetime
from collections import namedtuple
from pathlib import Path
from typing import Dict, Generator, Iterable, List, Optional, Set
from uuid import UUID

import numpy as np
import packaging.version
import pyarrow as pa

from . import _core
from .pod5_types import (
    Calibration,
    EndReason,
    EndReasonEnum,
    PathOrStr,
    Pore,
    Read,
    RunInfo,
    ShiftScalePair,
)

# The logical (post-migration) file version the official reader reports for files written by
# older libraries: every layout is presented as the newest it knows.
_LOGICAL_FILE_VERSION = packaging.version.Version("0.3.48")
try:
    # pyarrow (and so pod5) gives tz-aware timestamps pytz's UTC object; the same one here.
    import pytz

    _UTC = pytz.utc
except ImportError:  # pragma: no cover - pytz comes with pandas, which pod5 needs
    _UTC = datetime.timezone.utc
_EPOCH = datetime.datetime(1970, 1, 1, tzinfo=_UTC)


class Pod5ApiException(Exception):
    """Generic API exception (same name as pod5.api_utils.Pod5ApiException)."""


# Where one chunk of a read's signal is stored (pod5.reader.SignalRowInfo): signal-table batch,
# row in that batch, samples, and stored size (bytes for VBZ; for uncompressed signal pod5 gives
# the sample count, and so do we).
SignalRowInfo = namedtuple("SignalRowInfo", ["batch_index", "batch_row_index", "sample_count", "byte_count"])


def _timestamp(ms: int) -> datetime.datetime:
    # What pyarrow's as_py() returns for a timestamp("ms", tz="UTC"), built without it: its first
    # tz-aware conversion imports pandas (~0.5 s, paid by the first run_info access).
    return _EPOCH + datetime.timedelta(milliseconds=ms)


def _run_info(d: dict) -> RunInfo:
    values = dict(d)
    values["acquisition_start_time"] = _timestamp(d["acquisition_start_time"])
    values["protocol_start_time"] = _timestamp(d["protocol_start_time"])
    values["context_tags"] = {k: v for k, v in d["context_tags"]}
    values["tracking_id"] = {k: v for k, v in d["tracking_id"]}
    return RunInfo(**values)


def pack_read_ids(read_ids, invalid_ok: bool = False) -> np.ndarray:
    """Read id strings (or UUIDs) as an (n, 16) uint8 array; invalid ids raise RuntimeError
    unless invalid_ok, which drops them."""
    try:
        return _core.pack_ids([str(r) for r in read_ids], invalid_ok)
    except ValueError as exc:
        raise RuntimeError(f"Invalid read id passed: {exc}") from None


def format_read_ids(read_ids) -> List[str]:
    """An (n, 16) uint8 array (or pyarrow FixedSizeBinaryArray) of ids as strings."""
    if isinstance(read_ids, pa.FixedSizeBinaryArray):
        read_ids = np.frombuffer(read_ids.buffers()[1], dtype=np.uint8)[
            16 * read_ids.offset : 16 * (read_ids.offset + len(read_ids))
        ]
    arr = np.ascontiguousarray(read_ids, dtype=np.uint8).reshape(-1, 16)
    return _core.format_ids(arr)


class ReadRecordBatch:
    """One reads-table batch (optionally a selection of its rows)."""

    def __init__(self, reader: "Reader", index: int, columns: dict):
        self._reader = reader
        self._index = index
        self._cols = columns
        self._lists: Dict[str, list] = {}
        self._ids: Optional[bytes] = None
        self._selected_batch_rows = None

    def _list(self, name: str) -> list:
        values = self._lists.get(name)
        if values is None:
            values = self._cols[name].tolist()
            self._lists[name] = values
        return values

    def _id_bytes(self, row: int) -> bytes:
        if self._ids is None:
            self._ids = self._cols["read_id"].tobytes()
        return self._ids[16 * row : 16 * row + 16]

    def set_selected_batch_rows(self, rows) -> None:
        self._selected_batch_rows = rows

    def reads(self) -> Generator["ReadRecord", None, None]:
        rows = self._selected_batch_rows
        if rows is None:
            rows = range(self.num_reads)
        for row in rows:
            yield ReadRecord(self._reader, self, int(row))

    def get_read(self, row: int) -> "ReadRecord":
        return ReadRecord(self._reader, self, row)

    @property
    def num_reads(self) -> int:
        return len(self._cols["read_number"])

    @property
    def read_id_column(self) -> pa.FixedSizeBinaryArray:
        ids = self._cols["read_id"]
        return pa.Array.from_buffers(pa.binary(16), len(ids), [None, pa.py_buffer(ids)])

    @property
    def read_number_column(self) -> pa.UInt32Array:
        return pa.array(self._cols["read_number"])

    @property
    def columns_numpy(self) -> dict:
        """escpod extension: the batch's columns as numpy arrays (dictionary columns as indices)."""
        return self._cols

    @property
    def arrow(self) -> pa.RecordBatch:
        """escpod extension: this reads batch as stored, a pyarrow RecordBatch of Reader.read_table
        (the file's own layout and column names: no migration of older layouts)."""
        return self._reader.read_table.get_batch(self._index)

    @property
    def columns(self):
        """The batch's columns as pyarrow arrays in a namedtuple by column name (pod5's
        ReadRecordBatch.columns for current files; older layouts keep their own columns)."""
        batch = self.arrow
        return namedtuple("ReadRecordColumns", batch.schema.names)(*batch.columns)


class ReadRecord:
    """One read of a file; fields are read from the batch on access, signal decoded on access."""

    __slots__ = ("_reader", "_batch", "_row")

    def __init__(self, reader: "Reader", batch: ReadRecordBatch, row: int):
        self._reader = reader
        self._batch = batch
        self._row = row

    def __repr__(self) -> str:
        return f"ReadRecord(read_id={self.read_id}, file={self._reader.path})"

    @property
    def read_id(self) -> UUID:
        return UUID(bytes=self._batch._id_bytes(self._row))

    @property
    def read_number(self) -> int:
        return self._batch._list("read_number")[self._row]

    @property
    def start_sample(self) -> int:
        return self._batch._list("start_sample")[self._row]

    @property
    def num_samples(self) -> int:
        return self._batch._list("num_samples")[self._row]

    @property
    def median_before(self) -> float:
        return self._batch._list("median_before")[self._row]

    @property
    def num_minknow_events(self) -> int:
        return self._batch._list("num_minknow_events")[self._row]

    @property
    def tracked_scaling(self) -> ShiftScalePair:
        b = self._batch
        return ShiftScalePair(
            b._list("tracked_scaling_shift")[self._row], b._list("tracked_scaling_scale")[self._row]
        )

    @property
    def predicted_scaling(self) -> ShiftScalePair:
        b = self._batch
        return ShiftScalePair(
            b._list("predicted_scaling_shift")[self._row],
            b._list("predicted_scaling_scale")[self._row],
        )

    @property
    def num_reads_since_mux_change(self) -> int:
        return self._batch._list("num_reads_since_mux_change")[self._row]

    @property
    def time_since_mux_change(self) -> float:
        return self._batch._list("time_since_mux_change")[self._row]

    @property
    def open_pore_level(self) -> float:
        return self._batch._list("open_pore_level")[self._row]

    @property
    def expected_open_pore_level(self) -> float:
        return self._batch._list("expected_open_pore_level")[self._row]

    @property
    def selected_read_level(self) -> float:
        return self._batch._list("selected_read_level")[self._row]

    @property
    def pore(self) -> Pore:
        b = self._batch
        return Pore(
            b._list("channel")[self._row],
            b._list("well")[self._row],
            self._reader._pore_types[b._list("pore_type")[self._row]],
        )

    @property
    def calibration(self) -> Calibration:
        b = self._batch
        return Calibration(
            b._list("calibration_offset")[self._row], b._list("calibration_scale")[self._row]
        )

    @property
    def calibration_digitisation(self) -> int:
        ri = self.run_info
        return ri.adc_max - ri.adc_min + 1

    @property
    def calibration_range(self) -> float:
        return self.calibration.scale * self.calibration_digitisation

    @property
    def end_reason(self) -> EndReason:
        b = self._batch
        name = self._reader._end_reasons[b._list("end_reason")[self._row]]
        return EndReason(
            reason=EndReasonEnum[name.upper()], forced=bool(b._list("end_reason_forced")[self._row])
        )

    @property
    def end_reason_index(self) -> int:
        return self._batch._list("end_reason")[self._row]

    @property
    def run_info_index(self) -> int:
        return self._batch._list("run_info")[self._row]

    @property
    def run_info(self) -> RunInfo:
        return self._reader._run_info_by_index(self._batch._list("run_info")[self._row])

    @property
    def sample_count(self) -> int:
        return self.num_samples

    def _signal_rows(self) -> np.ndarray:
        c = self._batch._cols
        offsets = c["signal_offsets"]
        return c["signal_rows"][offsets[self._row] : offsets[self._row + 1]]

    @property
    def byte_count(self) -> int:
        return self._reader._file_handle().byte_count(self._signal_rows())

    @property
    def signal_rows(self) -> List[SignalRowInfo]:
        """Where each chunk of this read's signal is stored (pod5's ReadRecord.signal_rows)."""
        f = self._reader._file_handle()
        rows = self._signal_rows()
        batches, batch_rows = f.signal_row_positions(rows)
        vbz = self._reader.is_vbz_compressed
        out = []
        for row, b, br in zip(rows.tolist(), batches.tolist(), batch_rows.tolist()):
            stored, n_samples, _ = f.chunk(row)
            out.append(SignalRowInfo(b, br, n_samples, len(stored) if vbz else n_samples))
        return out

    def signal_for_chunk(self, index: int) -> np.ndarray:
        """The samples (int16) of chunk `index` of this read's signal (IndexError when the read
        has no such chunk)."""
        one = self._signal_rows()[[index]]  # IndexError as pod5 (a Python list index there)
        f = self._reader._file_handle()
        n_samples = f.chunk(int(one[0]))[1]
        try:
            return f.signal(one, n_samples)
        except RuntimeError as exc:
            raise RuntimeError(f"read {self.read_id}: {exc}") from None

    @property
    def has_cached_signal(self) -> bool:
        return False

    @property
    def signal(self) -> np.ndarray:
        try:
            return self._reader._file_handle().signal(self._signal_rows(), self.num_samples)
        except RuntimeError as exc:
            raise RuntimeError(f"read {self.read_id}: {exc}") from None

    @property
    def signal_pa(self) -> np.ndarray:
        # Decoded and calibrated in one pass (same float32 formula as calibrate_signal_array).
        c = self._batch._cols
        try:
            return self._reader._file_handle().signal_pa(
                self._signal_rows(),
                self.num_samples,
                c["calibration_offset"][self._row],
                c["calibration_scale"][self._row],
            )
        except RuntimeError as exc:
            raise RuntimeError(f"read {self.read_id}: {exc}") from None

    def calibrate_signal_array(self, signal_array_adc: np.ndarray) -> np.ndarray:
        offset = np.float32(self.calibration.offset)
        scale = np.float32(self.calibration.scale)
        return (signal_array_adc + offset) * scale

    def to_read(self) -> Read:
        return Read(
            read_id=self.read_id,
            pore=self.pore,
            calibration=self.calibration,
            median_before=self.median_before,
            end_reason=self.end_reason,
            read_number=self.read_number,
            run_info=self.run_info,
            start_sample=self.start_sample,
            num_minknow_events=self.num_minknow_events,
            tracked_scaling=self.tracked_scaling,
            predicted_scaling=self.predicted_scaling,
            num_reads_since_mux_change=self.num_reads_since_mux_change,
            time_since_mux_change=self.time_since_mux_change,
            open_pore_level=self.open_pore_level,
            expected_open_pore_level=self.expected_open_pore_level,
            selected_read_level=self.selected_read_level,
            signal=self.signal,
        )


def stream_arrays(stream) -> Generator[np.ndarray, None, None]:
    """One array per read from a `_core.SignalStream`, chunk after chunk. A chunk's arrays are
    views of its buffer, which goes back to the stream's pool once they are all freed."""
    while True:
        chunk = stream.next()
        if chunk is None:
            return
        buf, offsets = chunk[0], chunk[1].tolist()
        del chunk
        for i in range(len(offsets) - 1):
            yield buf[offsets[i] : offsets[i + 1]]
        del buf  # the caller's last array still holds it; the pool keeps the others


class Reader:
    """A POD5 file opened for reading (pod5.Reader's API)."""

    def __init__(self, path: PathOrStr, _random_access: bool = False, _file=None):
        self._path = Path(path).absolute()
        self._file = None
        if _file is None and not self._path.is_file():
            raise FileNotFoundError(f"Failed to open pod5 file at: {self._path}")
        # Random access (a DatasetReader's files): each reads batch is validated when first
        # decoded rather than all at open, and single rows are read straight from the file.
        # (_file: already opened that way, by _core.open_files.)
        if _file is None:
            _file = _core.File(str(self._path), validate_all_batches=not _random_access)
        self._file = _file
        info = self._file.info()
        self._info = info
        self._pore_types = self._file.pore_types()
        self._end_reasons = self._file.end_reasons()
        self._run_info_ids = self._file.run_info_ids()
        self._run_info_dicts = {d["acquisition_id"]: d for d in self._file.run_infos()}
        self._run_infos: Dict[int, RunInfo] = {}
        self._batches: Dict[int, ReadRecordBatch] = {}
        self._index = None

    def __enter__(self) -> "Reader":
        return self

    def __exit__(self, *exc_details) -> None:
        self.close()

    def __iter__(self) -> Generator[ReadRecord, None, None]:
        yield from self.reads()

    def __del__(self):
        self.close()

    def close(self) -> None:
        """Releases the file's mapping now (records read before keep their fields, not signal)."""
        if getattr(self, "_file", None) is not None:
            self._file.close()
        self._index = None
        self._tables = {}

    def _table(self, name: str) -> pa.ipc.RecordBatchFileReader:
        # The embedded Arrow IPC file, opened by pyarrow over a memory map of the .pod5 (no
        # copy), once; the same Arrow library as escpod's, so pod5's extension types apply when
        # the official package is imported.
        tables = self.__dict__.setdefault("_tables", {})
        table = tables.get(name)
        if table is None:
            self._file_handle()
            offset, length = self._info[name]
            if offset < 0:
                raise RuntimeError(f"{self._path}: the file has no {name.replace('_', ' ')}")
            mapped = pa.memory_map(str(self._path))
            table = pa.ipc.open_file(pa.BufferReader(mapped.read_at(length, offset)))
            tables[name] = table
        return table

    @property
    def read_table(self) -> pa.ipc.RecordBatchFileReader:
        """The reads table as stored, for pyarrow (pod5's Reader.read_table; no migration of
        older layouts: a V0-V3 file shows its own columns)."""
        return self._table("reads_table")

    @property
    def run_info_table(self) -> pa.ipc.RecordBatchFileReader:
        """The run-info table as stored, for pyarrow (pod5's Reader.run_info_table)."""
        return self._table("run_info_table")

    @property
    def signal_table(self) -> pa.ipc.RecordBatchFileReader:
        """The signal table as stored, for pyarrow (pod5's Reader.signal_table)."""
        return self._table("signal_table")

    def _file_handle(self):
        if self._file is None or self._file.closed:
            raise RuntimeError(f"{self._path}: the reader has been closed")
        return self._file

    def _run_info_by_index(self, idx: int) -> RunInfo:
        ri = self._run_infos.get(idx)
        if ri is None:
            acquisition_id = self._run_info_ids[idx]
            d = self._run_info_dicts.get(acquisition_id)
            if d is None:
                raise Exception(f"Failed to find run info '{acquisition_id}' in run info table of {self._path}")
            ri = _run_info(d)
            self._run_infos[idx] = ri
        return ri

    @property
    def path(self) -> Path:
        return self._path

    @property
    def file_version(self) -> packaging.version.Version:
        return self.logical_file_version

    @property
    def logical_file_version(self) -> packaging.version.Version:
        return max(self.original_file_version, _LOGICAL_FILE_VERSION)

    @property
    def original_file_version(self) -> packaging.version.Version:
        return packaging.version.Version(self._info["pod5_version"])

    @property
    def file_version_pre_migration(self) -> packaging.version.Version:
        return self.original_file_version

    @property
    def writing_software(self) -> str:
        return self._info["software"]

    @property
    def file_identifier(self) -> UUID:
        return UUID(self._info["file_identifier"])

    @property
    def reads_table_version(self) -> int:
        return 7

    @property
    def is_vbz_compressed(self) -> bool:
        return bool(self._info["is_vbz"])

    @property
    def batch_count(self) -> int:
        return self._info["n_read_batches"]

    @property
    def num_reads(self) -> int:
        return self._info["n_reads"]

    @property
    def read_ids(self) -> List[str]:
        ids = [self.get_batch(i)._cols["read_id"] for i in range(self.batch_count)]
        if not ids:
            return []
        return _core.format_ids(np.concatenate(ids))

    @property
    def read_ids_raw(self) -> pa.ChunkedArray:
        return pa.chunked_array(
            [self.get_batch(i).read_id_column for i in range(self.batch_count)], type=pa.binary(16)
        )

    def get_batch(self, index: int) -> ReadRecordBatch:
        batch = self._batches.get(index)
        if batch is None:
            if not 0 <= index < self.batch_count:
                raise IndexError(f"{self._path}: read batch {index} out of range ({self.batch_count} batches)")
            batch = ReadRecordBatch(self, index, self._file_handle().batch(index))
            self._batches[index] = batch
        return batch

    def _records_at(self, batches: np.ndarray, rows: np.ndarray, threads: int) -> List[ReadRecord]:
        """Records at (batches[k], rows[k]): on a random-access open each row read alone, on
        `threads` cores, into one selection batch; otherwise from the decoded batches."""
        handle = self._file_handle()
        if not handle.rows_alone:
            return [self.get_batch(int(b)).get_read(int(r)) for b, r in zip(batches.tolist(), rows.tolist())]
        selection = ReadRecordBatch(self, -1, handle.rows(batches, rows, threads))
        return [ReadRecord(self, selection, k) for k in range(len(rows))]

    def _fresh_batch(self, index: int) -> ReadRecordBatch:
        shared = self.get_batch(index)
        batch = ReadRecordBatch(self, index, shared._cols)
        batch._lists = shared._lists
        batch._ids = shared._ids
        return batch

    def read_batches(
        self,
        selection: Optional[List[str]] = None,
        batch_selection: Optional[Iterable[int]] = None,
        missing_ok: bool = False,
        preload: Optional[Set[str]] = None,
    ) -> Generator[ReadRecordBatch, None, None]:
        if selection is not None:
            if batch_selection is not None:
                raise ValueError("selection and batch_selection are mutually exclusive")
            yield from self._select_read_batches(list(selection), missing_ok)
        elif batch_selection is not None:
            for i in batch_selection:
                yield self.get_batch(i)
        else:
            for i in range(self.batch_count):
                yield self.get_batch(i)

    def reads(
        self,
        selection: Optional[Iterable[str]] = None,
        missing_ok: bool = False,
        preload: Optional[Set[str]] = None,
    ) -> Generator[ReadRecord, None, None]:
        """All reads in file order, or those of `selection` (still in file order, duplicates
        repeated). Missing ids raise RuntimeError unless missing_ok."""
        if selection is None:
            for batch in self.read_batches():
                yield from batch.reads()
        else:
            for batch in self._select_read_batches(list(selection), missing_ok):
                yield from batch.reads()

    def _file_index(self):
        if self._index is None:
            self._index = _core.Index([self._file_handle()], 1, use_read_index=False)
        return self._index

    def _locate(self, ids: np.ndarray):
        _, batches, rows = self._file_index().lookup(ids)
        return batches, rows

    def _select_read_batches(self, selection: List[str], missing_ok: bool):
        ids = pack_read_ids(selection, invalid_ok=missing_ok)
        batches, rows = self._locate(ids)
        found = batches >= 0
        if not missing_ok and int(found.sum()) != len(selection):
            missing = [selection[i] for i in np.flatnonzero(~found)[:3]]
            raise RuntimeError(
                f"Failed to find {len(selection) - int(found.sum())} requested reads in the file "
                f"{self._path} (e.g. {', '.join(str(m) for m in missing)})"
            )
        batches, rows = batches[found], rows[found]
        order = np.lexsort((rows, batches))
        batches, rows = batches[order], rows[order]
        for b in np.unique(batches):
            batch = self._fresh_batch(int(b))
            batch.set_selected_batch_rows(rows[batches == b].tolist())
            yield batch

    # ---- escpod extensions -------------------------------------------------------------------

    def get_signals(self, ids=None, pa: bool = True, threads: int = 0) -> List[np.ndarray]:
        """Signals of `ids` (all reads, in file order, when None) decoded on `threads` cores (0:
        all), as picoamps (float32) or ADC counts (int16). The arrays are views of one buffer."""
        buf, offsets = self.get_signals_buffer(ids, pa=pa, threads=threads)[:2]
        return [buf[offsets[i] : offsets[i + 1]] for i in range(len(offsets) - 1)]

    def iter_signals(
        self, ids=None, pa: bool = True, threads: int = 0, chunk_samples: int = 1 << 20
    ) -> Generator[np.ndarray, None, None]:
        """The signals of `ids` (all reads in file order when None; KeyError naming the first id
        absent), one array per read, decoded chunk by chunk (about `chunk_samples` samples) on
        `threads` cores (0: all). The streaming form of get_signals, for loops that use each
        signal and drop it: a chunk's buffer is reused once its arrays are freed, so the memory
        held and first touched stays a few chunks whatever the file size. Arrays of one chunk
        are views of one buffer."""
        if ids is None:
            stream = _core.all_signal_stream(self._file_handle(), pa, threads, chunk_samples)
        else:
            batches, rows = self._locate_all(list(ids))
            stream = _core.file_signal_stream(self._file_handle(), batches, rows, pa, threads, chunk_samples)
        yield from stream_arrays(stream)

    def _locate_all(self, ids: List[str]):
        packed = pack_read_ids(ids)
        batches, rows = self._locate(packed)
        if (batches < 0).any():
            missing = format_read_ids(packed[batches < 0][:1])[0]
            raise KeyError(f"read {missing} is not in {self._path}")
        return batches, rows

    def get_signals_buffer(self, ids=None, pa: bool = True, threads: int = 0):
        """Like get_signals, as (buffer, offsets[, read ids]): read i is buffer[offsets[i]:offsets[i+1]]."""
        if ids is None:
            return _core.all_signals(self._file_handle(), pa, threads)
        batches, rows = self._locate_all(list(ids))
        return _core.file_signals(self._file_handle(), batches, rows, pa, threads)
