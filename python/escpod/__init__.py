"""escpod: POD5 files through the official pod5 Python API on the escapepod C++ engine.

`import escpod as pod5` runs scripts written for the official package (see docs/python.md for
what is covered). Beyond pod5: Reader.get_signals / DatasetReader.get_signals (many reads on all
cores), DatasetReader's in-memory read-id index, and escpod.demux (the demultiplexer).
"""
__version__ = "0.1.0"

from .pod5_types import (
    BaseRead,
    Calibration,
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
    format_read_ids,
    pack_read_ids,
)
from .dataset import DatasetReader
from .writer import SignalType, Writer
from . import demux

__all__ = (
    "__version__",
    "BaseRead",
    "Calibration",
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
    "SignalType",
    "Writer",
    "demux",
    "format_read_ids",
    "pack_read_ids",
)
