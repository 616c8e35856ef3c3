"""escpod: POD5 files through the official pod5 Python API on the escapepod C++ engine.

`import escpod as pod5` runs scripts written for the official package (see docs/python.md for
what is covered). Beyond pod5: Reader.iter_signals / get_signals and DatasetReader.get_signals
(many reads on all cores), DatasetReader's read-id index (an `escpod index` where one covers the
files, else their read-id columns), and escpod.demux (the demultiplexer).
"""
from ._core import __version__  # CMakeLists.txt project(VERSION), like escpod --version

from .pod5_types import (
    BaseRead,
    Calibration,
    CompressedRead,
    EndReason,
    EndReasonEnum,
    Pore,
    Read,
    RunInfo,
    ShiftScalePair,
)
from .reader import (
    Pod5ApiException,
    Reader,
    ReadRecord,
    ReadRecordBatch,
    SignalRowInfo,
    format_read_ids,
    pack_read_ids,
)
from . import signal_tools
from .signal_tools import (
    vbz_compress_signal,
    vbz_compress_signal_chunked,
    vbz_decompress_signal,
    vbz_decompress_signal_chunked,
    vbz_decompress_signal_into,
)
from .dataset import DatasetReader
from .writer import SignalType, Writer
from . import demux

__all__ = (
    "__version__",
    "BaseRead",
    "Calibration",
    "CompressedRead",
    "DatasetReader",
    "EndReason",
    "EndReasonEnum",
    "Pod5ApiException",
    "Pore",
    "Read",
    "ReadRecord",
    "ReadRecordBatch",
    "Reader",
    "RunInfo",
    "ShiftScalePair",
    "SignalRowInfo",
    "SignalType",
    "Writer",
    "demux",
    "format_read_ids",
    "pack_read_ids",
    "signal_tools",
    "vbz_compress_signal",
    "vbz_compress_signal_chunked",
    "vbz_decompress_signal",
    "vbz_decompress_signal_chunked",
    "vbz_decompress_signal_into",
)
