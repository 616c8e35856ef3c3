"""Chunk bookkeeping shared by the read-until client and the readfish caller.

MinKNOW's live reads stream sends, per channel, chunks of the read in progress. A client may see
a chunk that starts before the read (the first chunk can hold a few samples of the previous
state), after it (the client joined late or fell behind), or that repeats samples already seen
(readfish's AccumulatingCache hands over the whole read so far each time). The classifier wants
each new sample exactly once, in order, from the read's first sample: `new_samples` cuts a chunk
down to that, and `ChannelReads` keeps one classifier state per channel's read in progress.

Contracts:
- Sample indices are MinKNOW's absolute ones (samples since acquisition start), so a chunk covers
  [chunk_start_sample, chunk_start_sample + len(raw)).
- A chunk is handed over as raw ADC values (int16, MinKNOW's "uncalibrated" signal).
"""
from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Callable, Dict, Optional, Tuple

import numpy as np


def new_samples(raw: np.ndarray, chunk_start: int, want_from: int) -> Tuple[np.ndarray, int]:
    """The part of a chunk at or after absolute sample `want_from`, and how many samples before
    the chunk's start were never received (0 when the chunk reaches back to `want_from`).

    `want_from` is the read's start_sample for a read's first chunk, else one past the last sample
    already fed."""
    skip = want_from - chunk_start
    if skip >= 0:
        return raw[skip:], 0
    return raw, -skip


def signal_from_bytes(raw_data: bytes, dtype: np.dtype) -> np.ndarray:
    """A chunk's raw_data as a native-endian, writable int16 array (a copy). Raises ValueError
    when the stream's signal type is not 16-bit signed integers (calibrated float data)."""
    dtype = np.dtype(dtype)
    if dtype.kind != "i" or dtype.itemsize != 2:
        raise ValueError(f"live chunks must be int16 ADC values (uncalibrated), not {dtype}")
    return np.frombuffer(raw_data, dtype=dtype).astype(np.int16)


@dataclass
class TrackedRead:
    """One read in progress on a channel, as this client has seen it."""

    read_id: str
    channel: int
    ordinal: int  # 1 for the first read this client saw on the channel, then 2, 3, ...
    start_sample: int  # MinKNOW's absolute start of the read
    first_seen: float  # clock() when its first chunk arrived
    state: object = None  # the classifier's LiveRead; None once final (memory released)
    fed_end: Optional[int] = None  # one past the last sample fed; None before the first feed
    missed_start: int = 0  # samples of the read's start never received (first chunk)
    gap: int = 0  # samples lost between two chunks (a later chunk started past fed_end)
    decision: object = None  # the classifier's final LiveDecision, once there is one
    final: bool = False  # no more feeding: decided, undecidable, or given up (skip_reason)
    skip_reason: str = ""  # why the classifier was not asked (missed start, signal gap)
    extra: dict = field(default_factory=dict)  # the owner's per-read notes

    @property
    def samples_in_read(self) -> int:
        """Samples of the read up to the last one received (from start_sample)."""
        return 0 if self.fed_end is None else max(0, self.fed_end - self.start_sample)


class ChannelReads:
    """The read in progress on each channel, fed chunk by chunk to a LiveClassifier.

    `feed_chunk` returns the read's TrackedRead after feeding; its `final` flag says whether a
    decision (or a reason not to decide) is there. A new read id on a channel replaces the old
    read: `on_new_read` (if given) is called with the old one first, so the owner can close it."""

    def __init__(self, classifier, calibration: Callable[[int], Tuple[float, float]],
                 max_missed_start: int = 400, clock: Callable[[], float] = time.monotonic,
                 on_new_read: Optional[Callable[[TrackedRead], None]] = None):
        # calibration(channel) -> (offset, scale) with pA = (adc + offset) * scale.
        self.classifier = classifier
        self.calibration = calibration
        self.max_missed_start = max_missed_start
        self.clock = clock
        self.on_new_read = on_new_read
        self.current: Dict[int, TrackedRead] = {}
        self._ordinals: Dict[int, int] = {}

    def track(self, channel: int, read_id: str, start_sample: int) -> TrackedRead:
        """The channel's TrackedRead for `read_id`, starting a new one if the id is new."""
        tracked = self.current.get(channel)
        if tracked is not None and tracked.read_id == read_id:
            return tracked
        if tracked is not None and self.on_new_read is not None:
            self.on_new_read(tracked)
        ordinal = self._ordinals.get(channel, 0) + 1
        self._ordinals[channel] = ordinal
        tracked = TrackedRead(read_id, channel, ordinal, int(start_sample), self.clock())
        self.current[channel] = tracked
        return tracked

    def feed_chunk(self, channel: int, read_id: str, start_sample: int, chunk_start: int,
                   signal: np.ndarray) -> TrackedRead:
        """Feeds the new part of one chunk (see new_samples) to the read's classifier state."""
        tracked, new = self.take_chunk(channel, read_id, start_sample, chunk_start, signal)
        return tracked if new is None else self.feed(tracked, new)

    def take_chunk(self, channel: int, read_id: str, start_sample: int, chunk_start: int,
                   signal: np.ndarray) -> Tuple[TrackedRead, Optional[np.ndarray]]:
        """The bookkeeping half of feed_chunk: tracks the read (closing the channel's previous
        one), cuts the chunk to its new samples and returns them (None: nothing to feed, e.g. the
        read is final). Not thread-safe: call it for one chunk at a time."""
        tracked = self.track(channel, read_id, start_sample)
        if tracked.final:
            return tracked, None
        first = tracked.fed_end is None
        want_from = tracked.start_sample if first else tracked.fed_end
        new, missing = new_samples(signal, int(chunk_start), want_from)
        if first:
            tracked.missed_start = missing
        elif missing:
            tracked.gap = missing
            return self._give_up(tracked, f"signal gap ({missing} samples lost between chunks)"), None
        tracked.fed_end = max(want_from, int(chunk_start)) + len(new)
        if first and missing > self.max_missed_start:
            return self._give_up(tracked, f"missed read start ({missing} samples)"), None
        if first:
            offset, scale = self.calibration(channel)
            tracked.state = self.classifier.new_read(read_id, offset, scale)
        return tracked, (new if len(new) else None)

    def feed(self, tracked: TrackedRead, new: np.ndarray) -> TrackedRead:
        """The classifier half of feed_chunk. Calls for different reads may run in parallel
        (the classifier releases the GIL); it touches only `tracked`."""
        return self._feed(tracked, new, end=False)

    def end_read(self, tracked: TrackedRead) -> TrackedRead:
        """Tells the classifier the read ended (no more chunks) and takes its final decision."""
        if tracked.final or tracked.state is None:
            return tracked
        return self._feed(tracked, np.zeros(0, dtype=np.int16), end=True)

    def forget(self, channel: int) -> Optional[TrackedRead]:
        """Drops the channel's read (its state included) and returns it."""
        return self.current.pop(channel, None)

    def _feed(self, tracked: TrackedRead, new: np.ndarray, end: bool) -> TrackedRead:
        decision = self.classifier.feed(tracked.state, new, end)
        if decision.state != "need_more":
            tracked.decision = decision
            tracked.final = True
            tracked.state = None
        return tracked

    @staticmethod
    def _give_up(tracked: TrackedRead, reason: str) -> TrackedRead:
        tracked.skip_reason = reason
        tracked.final = True
        tracked.state = None
        return tracked
