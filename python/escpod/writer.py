"""Writer: pod5.Writer's API over our C++ writer (files the official reader reads back equal)."""
import datetime
import enum
from pathlib import Path
from typing import Any, Dict, List, Sequence, Tuple, Union

import numpy as np

from . import _core
from .pod5_types import CompressedRead, EndReason, PathOrStr, Read, RunInfo
from .reader import Pod5ApiException, ReadRecord

DEFAULT_SOFTWARE_NAME = "Python API"
PoreType = str


class SignalType(enum.Enum):
    UncompressedSignal = 0
    VbzSignal = 1


def _map_to_tuples(info_map: Any) -> List[Tuple[str, str]]:
    if isinstance(info_map, dict):
        return [(str(k), str(v)) for k, v in info_map.items()]
    if isinstance(info_map, list):
        return [(str(item[0]), str(item[1])) for item in info_map]
    raise TypeError(f"Unknown input type for context tags {type(info_map)}")


def _timestamp_to_int(ts: Union[datetime.datetime, int]) -> int:
    if isinstance(ts, int):
        return ts
    return int(ts.astimezone(datetime.timezone.utc).timestamp() * 1000)


class Writer:
    """Writes a new POD5 file. The file appears at `path` only when close() completes; leaving a
    with block by an exception (or dropping an unclosed writer) leaves nothing behind."""

    def __init__(
        self,
        path: PathOrStr,
        software_name: str = DEFAULT_SOFTWARE_NAME,
        signal_compression_type: SignalType = SignalType.VbzSignal,
    ):
        self._path = Path(path).absolute()
        self._software_name = software_name
        self._signal_compression_type = signal_compression_type
        self._writer = None
        if self._path.is_file():
            raise FileExistsError(f"Input path already exists. Refusing to overwrite: {self._path}")
        vbz = getattr(signal_compression_type, "name", str(signal_compression_type)) != "UncompressedSignal"
        self._vbz = vbz
        self._writer = _core.Writer(str(self._path), software_name, vbz)
        self._run_infos: Dict[RunInfo, int] = {}
        self._pores: Dict[str, int] = {}
        self._end_reasons: Dict[EndReason, int] = {}

    def __enter__(self) -> "Writer":
        return self

    def __exit__(self, exc_type, *exc_details) -> None:
        if exc_type is not None and self._writer is not None:
            self._writer.abort()
            self._writer = None
            return
        self.close()

    def __del__(self):
        if getattr(self, "_writer", None) is not None:
            self._writer.abort()

    def close(self) -> None:
        if self._writer is not None:
            w, self._writer = self._writer, None
            w.close()

    @property
    def path(self) -> Path:
        return self._path

    @property
    def software_name(self) -> str:
        return self._software_name

    @property
    def signal_compression_type(self) -> SignalType:
        return self._signal_compression_type

    def _live(self):
        if self._writer is None:
            raise Pod5ApiException("Writer handle has been closed")
        return self._writer

    def add(self, obj: Union[EndReason, PoreType, RunInfo]) -> int:
        if isinstance(obj, RunInfo):
            idx = self._run_infos.get(obj)
            if idx is None:
                self._live().add_run_info(
                    {
                        **{f: getattr(obj, f) for f in obj.__dataclass_fields__},
                        "acquisition_start_time": _timestamp_to_int(obj.acquisition_start_time),
                        "protocol_start_time": _timestamp_to_int(obj.protocol_start_time),
                        "context_tags": _map_to_tuples(obj.context_tags),
                        "tracking_id": _map_to_tuples(obj.tracking_id),
                    }
                )
                idx = self._run_infos[obj] = len(self._run_infos)
            return idx
        if isinstance(obj, EndReason):
            return self._end_reasons.setdefault(obj, obj.reason.value)
        if isinstance(obj, str):
            return self._pores.setdefault(obj, len(self._pores))
        raise KeyError(type(obj))

    def contains(self, obj) -> bool:
        cache = {RunInfo: self._run_infos, EndReason: self._end_reasons, str: self._pores}[type(obj)]
        return obj in cache

    def find(self, obj) -> int:
        cache = {RunInfo: self._run_infos, EndReason: self._end_reasons, str: self._pores}[type(obj)]
        try:
            return cache[obj]
        except KeyError as exc:
            raise KeyError(f"Could not find index of {obj} in Pod5 file writer: {self}") from exc

    def add_read(self, read: Union[Read, CompressedRead]) -> None:
        self.add_reads([read])

    def add_reads(self, reads: Sequence[Read]) -> None:
        if not reads:
            return
        w = self._live()
        for read in reads:
            if isinstance(read, ReadRecord):
                raise TypeError("Writer.add_reads(reads) does not take ReadRecords - see ReadRecord.to_read()")
            if not isinstance(read, (Read, CompressedRead)):
                raise TypeError(f"Writer.add_reads(reads) - unexpected type: {type(read)=}")
            self.add(read.run_info)
            self.add(read.pore.pore_type)
            fields = (
                read.read_number,
                read.start_sample,
                read.median_before,
                read.num_minknow_events,
                read.tracked_scaling.scale,
                read.tracked_scaling.shift,
                read.predicted_scaling.scale,
                read.predicted_scaling.shift,
                read.num_reads_since_mux_change,
                read.time_since_mux_change,
                read.pore.channel,
                read.pore.well,
                read.pore.pore_type,
                read.calibration.offset,
                read.calibration.scale,
                read.end_reason.name,
                bool(read.end_reason.forced),
                read.run_info.acquisition_id,
                read.open_pore_level,
                read.expected_open_pore_level,
                read.selected_read_level,
            )
            try:
                if isinstance(read, Read):
                    w.add_read(read.read_id.bytes, fields, np.ascontiguousarray(read.signal, dtype=np.int16))
                elif self._vbz:
                    # VBZ cells stored as they are, once each decodes to its stated sample count.
                    chunks = [np.ascontiguousarray(np.frombuffer(c, dtype=np.uint8)) for c in read.signal_chunks]
                    w.add_read_chunks(read.read_id.bytes, fields, chunks, [int(n) for n in read.signal_chunk_lengths])
                else:
                    w.add_read(read.read_id.bytes, fields, read.decompressed_signal)
            except (RuntimeError, ValueError) as exc:
                raise type(exc)(f"{self._path}: read {read.read_id}: {exc}") from None
