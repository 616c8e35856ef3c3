"""Record types of the pod5 API (same names, fields, defaults and equality as pod5.pod5_types)."""
import datetime
import enum
import math
import os
from dataclasses import dataclass, field
from typing import Dict, List, Union
from uuid import UUID

import numpy as np

PathOrStr = Union[os.PathLike, str]


class EndReasonEnum(enum.Enum):
    """Why a read ended; values are the POD5 dictionary indices."""

    UNKNOWN = 0
    MUX_CHANGE = 1
    UNBLOCK_MUX_CHANGE = 2
    DATA_SERVICE_UNBLOCK_MUX_CHANGE = 3
    SIGNAL_POSITIVE = 4
    SIGNAL_NEGATIVE = 5
    API_REQUEST = 6
    DEVICE_DATA_ERROR = 7
    ANALYSIS_CONFIG_CHANGE = 8
    PAUSED = 9


# Reasons whose read break is not forced by default; every other reason is.
_UNFORCED = {EndReasonEnum.UNKNOWN, EndReasonEnum.SIGNAL_POSITIVE, EndReasonEnum.SIGNAL_NEGATIVE}


@dataclass(frozen=True)
class EndReason:
    reason: EndReasonEnum
    forced: bool

    @property
    def name(self) -> str:
        return self.reason.name.lower()

    @classmethod
    def from_reason_with_default_forced(cls, reason: EndReasonEnum) -> "EndReason":
        return cls(reason=reason, forced=reason not in _UNFORCED)


@dataclass()
class Calibration:
    """pA = (adc + offset) * scale."""

    offset: float
    scale: float

    @classmethod
    def from_range(cls, offset: float, adc_range: float, digitisation: float) -> "Calibration":
        return cls(offset, adc_range / digitisation)


@dataclass()
class Pore:
    channel: int
    well: int
    pore_type: str


@dataclass(frozen=True)
class RunInfo:
    acquisition_id: str
    acquisition_start_time: datetime.datetime
    adc_max: int
    adc_min: int
    context_tags: Dict[str, str] = field(hash=False, compare=True)
    experiment_name: str
    flow_cell_id: str
    flow_cell_product_code: str
    protocol_name: str
    protocol_run_id: str
    protocol_start_time: datetime.datetime
    sample_id: str
    sample_rate: int
    sequencing_kit: str
    sequencer_position: str
    sequencer_position_type: str
    software: str
    system_name: str
    system_type: str
    tracking_id: Dict[str, str] = field(hash=False, compare=True)


@dataclass()
class ShiftScalePair:
    shift: float = field(default=float("nan"))
    scale: float = field(default=float("nan"))

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, type(self)):
            return False
        values = (self.shift, self.scale, other.shift, other.scale)
        if all(math.isnan(v) for v in values):
            return True
        return self.shift == other.shift and self.scale == other.scale


@dataclass()
class BaseRead:
    read_id: UUID
    pore: Pore
    calibration: Calibration
    read_number: int
    start_sample: int
    median_before: float
    end_reason: EndReason
    run_info: RunInfo
    num_minknow_events: int = field(default=0)
    tracked_scaling: ShiftScalePair = field(default_factory=ShiftScalePair)
    predicted_scaling: ShiftScalePair = field(default_factory=ShiftScalePair)
    num_reads_since_mux_change: int = field(default=0)
    time_since_mux_change: float = field(default=0.0)
    open_pore_level: float = field(default=float("nan"))
    expected_open_pore_level: float = field(default=float("nan"))
    selected_read_level: float = field(default=float("nan"))


@dataclass()
class Read(BaseRead):
    """A read with its signal (int16 ADC counts), as given to Writer.add_read."""

    signal: np.ndarray = field(default_factory=lambda: np.array([], dtype=np.int16))

    @property
    def sample_count(self) -> int:
        return len(self.signal)


@dataclass()
class CompressedRead(BaseRead):
    """A read with its signal already VBZ-compressed (pod5.CompressedRead): one cell per chunk
    and each chunk's sample count before compression. Writer.add_read stores the cells as they
    are."""

    signal_chunks: List[np.ndarray] = field(default_factory=list)
    signal_chunk_lengths: List[int] = field(default_factory=list)

    @property
    def sample_count(self) -> int:
        return sum(self.signal_chunk_lengths)

    @property
    def decompressed_signal(self) -> np.ndarray:
        from .signal_tools import vbz_decompress_signal_chunked

        return vbz_decompress_signal_chunked(self.signal_chunks, self.signal_chunk_lengths)
