"""A readfish caller plugin: barcode calls from the raw signal, for readfish's barcode targets.

readfish (>= 2024.3) loads its caller from the experiment TOML's [caller_settings] table by module
path and calls `Caller.basecall(chunks, signal_dtype, daq_values)` each loop with the latest read
chunks. This caller feeds each read's new samples to escpod's streaming LiveClassifier and yields,
for every read whose call is final, a readfish `Result` whose `barcode` is the call: a barcode
name of the model (e.g. "BC03") or "unclassified". readfish then applies the [barcodes.<name>]
table of its TOML (names it has no table for fall to [barcodes.classified]). Pair it with the
no-op aligner: with no sequence and no alignment, readfish's decision for the read is `no_seq`,
so each barcode table's `no_seq` action is what happens to its reads.

    [caller_settings."escpod.live.readfish_caller"]
    model = "/path/to/WDX4_rna004_v1_0.json"    # required; method, cnn_model, min_confidence optional

    [mapper_settings.no_op]

Contract of basecall(): reads still undecided yield nothing (readfish takes no action and hands
them over again with more signal); a decided read yields the same Result every time readfish
hands it over again; reads whose start was missed (more than max_missed_start samples) or whose
chunks have a gap are never classified and yield nothing, so they sequence, as WarpDemuX keeps
them. readfish's AccumulatingCache passes a read's whole signal so far each time: only the
samples after those already fed reach the classifier.
"""
from __future__ import annotations

import logging
from pathlib import Path
from typing import Dict, Iterable, List, Optional, Tuple

from readfish.plugins.abc import CallerABC
from readfish.plugins.utils import Result

from ._feed import ChannelReads, TrackedRead, signal_from_bytes

log = logging.getLogger("escpod.live.readfish")

UNCLASSIFIED = "unclassified"


def make_classifier(model: str, method: Optional[str], cnn_model: Optional[str],
                    min_confidence: Optional[float]):
    """The LiveClassifier the caller feeds (a function so that tests can substitute one)."""
    from .readuntil import make_classifier as make

    return make(model, method, cnn_model, min_confidence)


class Caller(CallerABC):
    """readfish caller: `barcode` of each Result is the live classifier's call.

    TOML parameters: model (path, required), method, cnn_model, min_confidence (as
    LiveClassifier takes them), max_missed_start (samples, default 400). readfish itself passes
    run_information and sample_rate (unused)."""

    def __init__(self, run_information=None, sample_rate=None, debug_log=None, *,
                 model: Optional[str] = None, method: Optional[str] = None,
                 cnn_model: Optional[str] = None, min_confidence: Optional[float] = None,
                 max_missed_start: int = 400, **unknown):
        self.model, self.method, self.cnn_model = model, method, cnn_model
        self.min_confidence = min_confidence
        self.max_missed_start = int(max_missed_start)
        self.unknown = unknown
        self.validate()
        self.classifier = make_classifier(model, method, cnn_model, min_confidence)
        self._daq: Dict[int, Tuple[float, float]] = {}
        self.reads = ChannelReads(self.classifier, self._calibration, self.max_missed_start)
        self.calls = 0  # Results yielded for newly decided reads

    def validate(self) -> None:
        """Raises ValueError for a missing model or a parameter this caller does not take."""
        if self.unknown:
            raise ValueError(f"escpod.live.readfish_caller: unknown parameter(s) "
                             f"{', '.join(sorted(self.unknown))} (takes model, method, cnn_model, "
                             "min_confidence, max_missed_start)")
        if not self.model:
            raise ValueError("escpod.live.readfish_caller needs `model` (a WarpDemuX model file)")
        for name in ("model", "cnn_model"):
            path = getattr(self, name)
            if path and not Path(path).is_file():
                raise ValueError(f"escpod.live.readfish_caller: {name} {path!r} is not a file")

    def basecall(self, chunks, signal_dtype, daq_values=None) -> Iterable[Result]:
        """Yields a Result (channel, read_id, seq="", barcode=<call>) for each decided read among
        `chunks` ((channel, ReadData) pairs); see the module's contract."""
        self._daq = daq_values if daq_values is not None else {}
        for channel, read in chunks:
            tracked = self._feed(int(channel), read, signal_dtype)
            if tracked.final and not tracked.skip_reason:
                yield self._result(tracked)

    def describe(self) -> str:
        names = ", ".join(self.classifier.barcode_names)
        lines = [f"escpod live caller: model {self.model}", f"barcodes: {names} (and {UNCLASSIFIED})"]
        if hasattr(self.classifier, "describe"):
            lines.append(str(self.classifier.describe()))
        return "\n".join(lines)

    def disconnect(self) -> None:
        self.reads.current.clear()

    # -- internals

    def _feed(self, channel: int, read, signal_dtype) -> TrackedRead:
        tracked = self.reads.current.get(channel)
        if tracked is not None and tracked.read_id == read.id and tracked.final:
            return tracked
        signal = signal_from_bytes(read.raw_data, signal_dtype)
        return self.reads.feed_chunk(channel, read.id, int(read.start_sample),
                                     int(read.chunk_start_sample), signal)

    def _calibration(self, channel: int) -> Tuple[float, float]:
        cal = self._daq[channel]  # readfish's CALIBRATION(scaling, offset)
        return float(cal.offset), float(cal.scaling)

    def _result(self, tracked: TrackedRead) -> Result:
        d = tracked.decision
        if "result" not in tracked.extra:
            self.calls += 1
            barcode = d.label if d.state == "decided" and int(d.barcode) >= 0 else UNCLASSIFIED
            tracked.extra["result"] = dict(
                barcode=barcode,
                basecall_data={"state": d.state, "label": d.label, "confidence": float(d.confidence),
                               "reason": d.reason, "samples_seen": int(d.samples_seen)})
        kept = tracked.extra["result"]
        return Result(channel=tracked.channel, read_id=tracked.read_id, seq="",
                      barcode=kept["barcode"], basecall_data=dict(kept["basecall_data"]))


def barcodes_toml(barcode_names: List[str], reject: Iterable[str] = (),
                  unclassified: str = "stop_receiving") -> str:
    """readfish [barcodes] tables for our calls: reads of a barcode in `reject` are unblocked,
    other barcodes sequence, `unclassified` (the action for unclassified and undecidable reads)
    as given. Every decision readfish can reach with the no-op aligner (no_seq, no_map) maps to
    that action, so the aligner's outcome cannot matter."""
    reject = set(reject)
    unknown = reject - set(barcode_names)
    if unknown:
        raise ValueError(f"not barcodes of the model: {', '.join(sorted(unknown))}")
    tables = [(name, "unblock" if name in reject else "stop_receiving") for name in barcode_names]
    tables += [(UNCLASSIFIED, unclassified), ("classified", "stop_receiving")]
    return "\n".join(_barcode_table(name, action) for name, action in tables)


def _barcode_table(name: str, action: str) -> str:
    decisions = ("single_on", "single_off", "multi_on", "multi_off", "no_map", "no_seq")
    body = "\n".join(f'{d} = "{action}"' for d in decisions)
    return (f'[barcodes.{name}]\nname = "{name}"\ncontrol = false\nmin_chunks = 0\n'
            f'max_chunks = 100\ntargets = []\n{body}\n')
