"""A mock of MinKNOW's live reads service, for tests: a real gRPC server on localhost that replays
POD5 reads as a sequencer would stream them, honours read-until actions and records them.

Served (minknow_api's own messages, so a client cannot tell it from MinKNOW by their shape):
- data.get_live_reads: after the client's StreamSetup, one GetLiveReadsResponse per "tick" of
  `chunk_seconds` of signal, with a ReadData chunk for every channel (first..last) whose read is
  in progress and still wanted, and the responses to the actions received since the last tick.
- data.get_data_types (int16 little-endian ADC, float32 pA), device.get_calibration (per channel,
  from the reads' POD5 calibration), device.get_flow_cell_info, device.get_sample_rate,
  analysis_configuration.get_read_classifications.

The replay: each channel plays its reads back to back (`gap_seconds` of open pore between two,
the first staggered inside the first tick), each tick advancing every channel by chunk_seconds.
A read whose end falls inside a tick ends there: its unsent tail is not sent (MinKNOW streams
reads in progress only). Actions are applied at the tick boundary they arrive at:
- unblock: SUCCESS if the read is in progress on that channel (it ends there; the channel is idle
  for the unblock duration plus the gap), FAILED_READ_TOO_LONG past the setup's
  max_unblock_read_length (the read then only stops sending, as MinKNOW does), else
  FAILED_READ_FINISHED.
- stop_further_data: SUCCESS if in progress (no more chunks; the read sequences to its end),
  else FAILED_READ_FINISHED.

Pace: "ack" (default) sends the next tick as soon as the client answered the last one (one
request, empty or not, per tick that carried chunks; see readuntil.run_live's ack), waiting at
most ack_timeout; "realtime" sleeps chunk_seconds between ticks; "free" never waits.

What it records: `setups` (every StreamSetup), `actions` (RecordedAction per action received)
and `served` (ServedRead per read that started on a streamed channel). docs/live_readuntil.md
lists what it does not reproduce.
"""
from __future__ import annotations

import logging
import queue
import threading
import time
from collections import deque
from concurrent import futures
from dataclasses import dataclass, field
from typing import Deque, Dict, Iterable, List, Optional, Sequence, Tuple

import numpy as np

log = logging.getLogger("escpod.live.mock")

# The read classifications the mock reports (id -> name) and the one each read's chunks carry.
CLASSIFICATIONS = {1: "pore", 2: "strand", 3: "adapter", 4: "unavailable", 5: "unknown_positive",
                   6: "short_strand", 7: "strand2", 8: "zero"}
READ_CLASS = 2  # "strand"


@dataclass
class ReplayRead:
    """One read to replay: raw ADC signal and its channel's calibration (pA = (adc+offset)*scale)."""

    read_id: str
    channel: int
    signal: np.ndarray  # int16
    offset: float
    scale: float


@dataclass
class RecordedAction:
    """One action the mock received, with the response it gave."""

    action_id: str
    channel: int
    read_id: str
    kind: str  # "unblock" or "stop_further_data"
    duration: float  # unblock seconds (0 for stop_further_data)
    response: str  # "SUCCESS", "FAILED_READ_FINISHED" or "FAILED_READ_TOO_LONG"
    at_sample: int  # the replay clock when applied
    read_samples: int  # samples of the read elapsed then (0 if it was not in progress)


@dataclass
class ServedRead:
    """A read that started on a streamed channel, and what became of it."""

    read_id: str
    channel: int
    start_sample: int
    num_samples: int
    chunks: int = 0
    samples_sent: int = 0
    chunk_lengths: List[int] = field(default_factory=list)  # of the chunks sent, in order
    actions: List[str] = field(default_factory=list)  # kinds of the actions received for it
    # "in_progress", "completed" (no action took effect), "unblocked", "stopped"
    # (stop_further_data, then sequenced to its end) or "not_streamed" (its classification
    # is not in the setup's accepted_first_chunk_classifications)
    outcome: str = "in_progress"
    samples_sequenced: int = 0  # set when it ends: all of it, or up to the unblock


def load_pod5_reads(paths: Iterable, channels: Optional[int] = None,
                    max_reads: Optional[int] = None) -> Tuple[List[ReplayRead], int, int]:
    """Reads of POD5 files (escpod.Reader) as ReplayReads, with the sample rate and digitisation.

    channels=None: each read on its POD5 channel (pore.channel), in file order. channels=N: reads
    dealt round-robin to channels 1..N; a read whose calibration differs from its new channel's
    (that of the channel's first read) is re-quantised to it (round((adc+o)*s/s_c - o_c)), so the
    pA signal is kept within half an ADC step."""
    from ..reader import Reader

    reads, sample_rate, digitisation = [], 0, 0
    for path in paths:
        with Reader(path) as reader:
            for r in reader.reads():
                if max_reads is not None and len(reads) >= max_reads:
                    break
                sample_rate = sample_rate or int(r.run_info.sample_rate)
                digitisation = digitisation or int(r.calibration_digitisation)
                channel = r.pore.channel if channels is None else len(reads) % channels + 1
                reads.append(ReplayRead(str(r.read_id), int(channel), np.asarray(r.signal, np.int16),
                                        float(r.calibration.offset), float(r.calibration.scale)))
    if channels is not None:
        _requantise(reads)
    return reads, sample_rate, digitisation


def _requantise(reads: List[ReplayRead]) -> None:
    first: Dict[int, ReplayRead] = {}
    for r in reads:
        ref = first.setdefault(r.channel, r)
        if (r.offset, r.scale) != (ref.offset, ref.scale):
            pa = (r.signal.astype(np.float64) + r.offset) * r.scale
            adc = np.rint(pa / ref.scale - ref.offset)
            r.signal = np.clip(adc, -32768, 32767).astype(np.int16)
            r.offset, r.scale = ref.offset, ref.scale


# ---------------------------------------------------------------------------------------------
# The replay engine (no gRPC: one thread drives it)


@dataclass
class _Live:
    read: ReplayRead
    start: int
    sent_end: int
    served: ServedRead
    streamed: bool
    stopped: bool = False

    @property
    def end(self) -> int:
        return self.start + len(self.read.signal)


@dataclass
class _Channel:
    reads: Deque[ReplayRead]
    free_at: int  # the sample at which the next read may start
    cur: Optional[_Live] = None


class ReplayEngine:
    """The replay's state: the clock (samples since the replay began), each channel's read in
    progress, and the records. `setup`, `apply` and `tick` are called by one thread."""

    def __init__(self, reads: Sequence[ReplayRead], sample_rate: int, chunk_seconds: float = 0.4,
                 gap_seconds: float = 0.5):
        if not reads:
            raise ValueError("the mock needs at least one read to replay")
        self.sample_rate = sample_rate
        self.chunk = max(1, int(round(chunk_seconds * sample_rate)))
        self.gap = int(round(gap_seconds * sample_rate))
        self.clock = 0
        self.channels: Dict[int, _Channel] = {}
        for r in reads:
            stagger = (r.channel * 7919) % self.chunk
            self.channels.setdefault(r.channel, _Channel(deque(), stagger)).reads.append(r)
        self.first_channel, self.last_channel = 1, max(self.channels)
        self.raw_type = 0
        self.max_unblock_samples = 0
        self.accepted: set = set()
        self.setups: List[object] = []
        self.actions: List[RecordedAction] = []
        self.served: Dict[str, ServedRead] = {}
        self._pending: List[object] = []  # ActionResponses not yet sent

    # -- requests

    def setup(self, setup) -> None:
        """Applies a StreamSetup (the first request, and any later one)."""
        from minknow_api import data_pb2

        self.setups.append(setup)
        self.first_channel, self.last_channel = setup.first_channel, setup.last_channel
        if setup.raw_data_type != data_pb2.GetLiveReadsRequest.KEEP_LAST:
            self.raw_type = setup.raw_data_type
        self.accepted = set(setup.accepted_first_chunk_classifications)
        which = setup.WhichOneof("max_unblock_read_length")
        seconds = setup.max_unblock_read_length_seconds if which == "max_unblock_read_length_seconds" else 0
        samples = setup.max_unblock_read_length_samples if which == "max_unblock_read_length_samples" else 0
        self.max_unblock_samples = int(samples or round(seconds * self.sample_rate))

    def apply(self, action) -> None:
        """Applies one Action at the current clock; its response goes out with the next tick."""
        from minknow_api import data_pb2

        Response = data_pb2.GetLiveReadsResponse.ActionResponse
        kind = action.WhichOneof("action") or ""
        channel = self.channels.get(action.channel)
        live = channel.cur if channel is not None else None
        if live is None or live.read.read_id != action.id:
            response, elapsed = Response.FAILED_READ_FINISHED, 0
        else:
            elapsed = self.clock - live.start
            live.served.actions.append(kind)
            response = self._act(channel, live, kind, action, elapsed)
        self._pending.append(Response(action_id=action.action_id, response=response))
        self.actions.append(RecordedAction(
            action.action_id, action.channel, action.id, kind,
            action.unblock.duration if kind == "unblock" else 0.0,
            Response.Response.Name(response), self.clock, elapsed))

    def _act(self, channel: _Channel, live: _Live, kind: str, action, elapsed: int) -> int:
        from minknow_api import data_pb2

        Response = data_pb2.GetLiveReadsResponse.ActionResponse
        if kind == "unblock" and self.max_unblock_samples and elapsed > self.max_unblock_samples:
            live.stopped = True
            live.served.outcome = "stopped"
            return Response.FAILED_READ_TOO_LONG
        if kind == "unblock":
            self._end(channel, "unblocked", elapsed)
            channel.free_at = self.clock + int(round(action.unblock.duration * self.sample_rate)) + self.gap
            return Response.SUCCESS
        if kind == "stop_further_data":
            live.stopped = True
            live.served.outcome = "stopped"
            return Response.SUCCESS
        return Response.FAILED_READ_FINISHED

    # -- ticks

    @property
    def finished(self) -> bool:
        """No streamed channel has a read in progress or to come."""
        return all(c.cur is None and not c.reads for ch, c in self.channels.items() if self._wanted(ch))

    def tick(self):
        """Advances the clock by one chunk; returns the response for it (its `channels` may be
        empty) with the action responses pending."""
        from minknow_api import data_pb2

        response = data_pb2.GetLiveReadsResponse(
            samples_since_start=self.clock, seconds_since_start=self.clock / self.sample_rate)
        self.clock += self.chunk
        for number in sorted(self.channels):
            if self._wanted(number):
                self._advance(self.channels[number])
                self._emit(number, self.channels[number], response)
        response.action_responses.extend(self._pending)
        self._pending = []
        return response

    def _wanted(self, channel: int) -> bool:
        return self.first_channel <= channel <= self.last_channel

    def _advance(self, channel: _Channel) -> None:
        while True:
            live = channel.cur
            if live is not None and live.end <= self.clock:
                self._end(channel, "stopped" if live.stopped else "completed", len(live.read.signal))
                channel.free_at = live.end + self.gap
            elif live is None and channel.reads and channel.free_at < self.clock:
                self._start(channel, channel.reads.popleft())
            else:
                return

    def _start(self, channel: _Channel, read: ReplayRead) -> None:
        streamed = not self.accepted or READ_CLASS in self.accepted
        served = ServedRead(read.read_id, read.channel, channel.free_at, len(read.signal),
                            outcome="in_progress" if streamed else "not_streamed")
        self.served[read.read_id] = served
        channel.cur = _Live(read, channel.free_at, channel.free_at, served, streamed)

    def _end(self, channel: _Channel, outcome: str, sequenced: int) -> None:
        live = channel.cur
        if live.served.outcome != "not_streamed":
            live.served.outcome = outcome
        live.served.samples_sequenced = sequenced
        channel.cur = None

    def _emit(self, number: int, channel: _Channel, response) -> None:
        live = channel.cur
        if live is None or live.stopped or not live.streamed or live.sent_end >= self.clock:
            return
        chunk = live.read.signal[live.sent_end - live.start:self.clock - live.start]
        data = response.channels[number]
        data.id = live.read.read_id
        data.start_sample = live.start
        data.chunk_start_sample = live.sent_end
        data.chunk_length = len(chunk)
        data.chunk_classifications.append(READ_CLASS)
        data.raw_data = self._raw_bytes(chunk, live.read)
        data.median = float(np.median((chunk.astype(np.float32) + live.read.offset) * live.read.scale))
        live.sent_end = self.clock
        live.served.chunks += 1
        live.served.samples_sent += len(chunk)
        live.served.chunk_lengths.append(len(chunk))

    def _raw_bytes(self, chunk: np.ndarray, read: ReplayRead) -> bytes:
        from minknow_api import data_pb2

        if self.raw_type == data_pb2.GetLiveReadsRequest.UNCALIBRATED:
            return chunk.astype("<i2").tobytes()
        if self.raw_type == data_pb2.GetLiveReadsRequest.CALIBRATED:
            return ((chunk.astype(np.float32) + read.offset) * read.scale).astype("<f4").tobytes()
        return b""


# ---------------------------------------------------------------------------------------------
# gRPC services


class _Inbox:
    """The requests of one get_live_reads call, read on their own thread."""

    CLOSED = object()

    def __init__(self, request_iterator):
        self.queue: "queue.Queue" = queue.Queue()
        self.closed = False
        self._thread = threading.Thread(target=self._read, args=(request_iterator,), daemon=True)
        self._thread.start()

    def _read(self, request_iterator) -> None:
        try:
            for request in request_iterator:
                self.queue.put(request)
        except Exception:  # the call was cancelled or broke: the stream loop sees CLOSED
            pass
        self.queue.put(self.CLOSED)

    def get(self, timeout: Optional[float]):
        """The next request, CLOSED, or None after `timeout` seconds (0: do not wait)."""
        if self.closed:
            return self.CLOSED
        try:
            item = self.queue.get(timeout=timeout) if timeout else self.queue.get_nowait()
        except queue.Empty:
            return None
        self.closed = item is self.CLOSED
        return item


def _data_servicer(mock: "MockMinknow"):
    from minknow_api import data_pb2, data_pb2_grpc

    class DataServicer(data_pb2_grpc.DataServiceServicer):
        def get_data_types(self, request, context):
            DataType = data_pb2.GetDataTypesResponse.DataType
            return data_pb2.GetDataTypesResponse(
                uncalibrated_signal=DataType(type=DataType.SIGNED_INTEGER, big_endian=False, size=2),
                calibrated_signal=DataType(type=DataType.FLOATING_POINT, big_endian=False, size=4),
                bias_voltages=DataType(type=DataType.SIGNED_INTEGER, big_endian=False, size=2))

        def get_live_reads(self, request_iterator, context):
            import grpc

            if not mock._stream_lock.acquire(blocking=False):
                context.abort(grpc.StatusCode.FAILED_PRECONDITION,
                              "the mock serves one get_live_reads call at a time")
            try:
                yield from mock._serve_stream(_Inbox(request_iterator), context)
            finally:
                mock._stream_lock.release()

    return DataServicer()


def _device_servicer(mock: "MockMinknow"):
    from minknow_api import device_pb2, device_pb2_grpc

    class DeviceServicer(device_pb2_grpc.DeviceServiceServicer):
        def get_calibration(self, request, context):
            channels = range(request.first_channel, request.last_channel + 1)
            cal = [mock.calibration(ch) for ch in channels]
            return device_pb2.GetCalibrationResponse(
                digitisation=mock.digitisation, offsets=[o for o, _ in cal],
                pa_ranges=[s * mock.digitisation for _, s in cal], has_calibration=True)

        def get_flow_cell_info(self, request, context):
            return device_pb2.GetFlowCellInfoResponse(
                has_flow_cell=True, channel_count=mock.channel_count, wells_per_channel=1,
                flow_cell_id="MOCK0001", product_code="MOCK")

        def get_sample_rate(self, request, context):
            return device_pb2.GetSampleRateResponse(sample_rate=mock.sample_rate)

    return DeviceServicer()


def _analysis_servicer():
    from minknow_api import analysis_configuration_pb2 as pb, analysis_configuration_pb2_grpc as pb_grpc

    class AnalysisConfigurationServicer(pb_grpc.AnalysisConfigurationServiceServicer):
        def get_read_classifications(self, request, context):
            return pb.GetReadClassificationsResponse(read_classifications=CLASSIFICATIONS)

    return AnalysisConfigurationServicer()


class MockMinknow:
    """The mock server. Use as a context manager, or start() / stop():

        with MockMinknow.from_pod5(["reads.pod5"]) as mock:
            ... connect to ("127.0.0.1", mock.port) ...
        mock.served, mock.actions, mock.setups  # the records

    pace: "ack", "realtime" or "free" (see the module's doc); ack_timeout: seconds the "ack"
    pace waits for the client's answer to a tick before going on."""

    def __init__(self, reads: Sequence[ReplayRead], sample_rate: int, digitisation: int = 2048,
                 chunk_seconds: float = 0.4, gap_seconds: float = 0.5, pace: str = "ack",
                 ack_timeout: float = 5.0, channel_count: Optional[int] = None):
        if pace not in ("ack", "realtime", "free"):
            raise ValueError(f"pace must be ack, realtime or free, not {pace!r}")
        self.engine = ReplayEngine(reads, sample_rate, chunk_seconds, gap_seconds)
        self.sample_rate = int(sample_rate)
        self.digitisation = int(digitisation)
        self.chunk_seconds = chunk_seconds
        self.pace = pace
        self.ack_timeout = ack_timeout
        self.channel_count = int(channel_count or max(self.engine.channels))
        self._calibration = {r.channel: (r.offset, r.scale) for r in reversed(list(reads))}
        self._stream_lock = threading.Lock()
        self._done = threading.Event()
        self._server = None
        self.port: Optional[int] = None

    @classmethod
    def from_pod5(cls, paths: Iterable, channels: Optional[int] = None,
                  max_reads: Optional[int] = None, **kwargs) -> "MockMinknow":
        """A mock replaying the reads of POD5 files (see load_pod5_reads)."""
        reads, sample_rate, digitisation = load_pod5_reads(paths, channels, max_reads)
        return cls(reads, sample_rate, digitisation, **kwargs)

    # -- records (read them once wait_finished() returned, or after stop())

    @property
    def setups(self) -> List[object]:
        return self.engine.setups

    @property
    def actions(self) -> List[RecordedAction]:
        return self.engine.actions

    @property
    def served(self) -> Dict[str, ServedRead]:
        return self.engine.served

    def calibration(self, channel: int) -> Tuple[float, float]:
        """(offset, scale) of a channel; the identity for a channel without reads."""
        return self._calibration.get(channel, (0.0, 1.0))

    # -- server

    def start(self, host: str = "127.0.0.1", port: int = 0) -> int:
        """Starts serving on host:port (0: a free port); returns the port."""
        import grpc
        from minknow_api import analysis_configuration_pb2_grpc, data_pb2_grpc, device_pb2_grpc

        from .readuntil import GRPC_OPTIONS

        server = grpc.server(futures.ThreadPoolExecutor(max_workers=8), options=GRPC_OPTIONS)
        data_pb2_grpc.add_DataServiceServicer_to_server(_data_servicer(self), server)
        device_pb2_grpc.add_DeviceServiceServicer_to_server(_device_servicer(self), server)
        analysis_configuration_pb2_grpc.add_AnalysisConfigurationServiceServicer_to_server(
            _analysis_servicer(), server)
        self.port = server.add_insecure_port(f"{host}:{port}")
        if not self.port:
            raise OSError(f"cannot listen on {host}:{port}")
        server.start()
        self._server = server
        return self.port

    def stop(self, grace: Optional[float] = 1.0) -> None:
        if self._server is not None:
            self._server.stop(grace).wait()
            self._server = None

    def wait_finished(self, timeout: Optional[float] = None) -> bool:
        """True once a get_live_reads call has played every read to its end."""
        return self._done.wait(timeout)

    def __enter__(self) -> "MockMinknow":
        if self._server is None:
            self.start()
        return self

    def __exit__(self, *exc) -> None:
        self.stop()

    # -- the stream

    def _serve_stream(self, inbox: _Inbox, context):
        first = inbox.get(timeout=30.0)
        if first is None or first is _Inbox.CLOSED or first.WhichOneof("request") != "setup":
            import grpc

            context.abort(grpc.StatusCode.INVALID_ARGUMENT, "the first request must be a setup")
        self.engine.setup(first.setup)
        while context.is_active():
            self._drain(inbox, timeout=0)
            if self.engine.finished:
                yield self.engine.tick()  # the last action responses, no chunks
                self._done.set()
                return
            response = self.engine.tick()
            if len(response.channels) or len(response.action_responses):
                yield response
            self._wait(inbox, bool(len(response.channels)))

    def _drain(self, inbox: _Inbox, timeout: Optional[float]) -> None:
        """Applies the requests waiting, after waiting up to `timeout` for the first."""
        item = inbox.get(timeout)
        while item is not None and item is not _Inbox.CLOSED:
            self._apply_request(item)
            item = inbox.get(0)

    def _wait(self, inbox: _Inbox, carried_chunks: bool) -> None:
        if self.pace == "realtime":
            time.sleep(self.chunk_seconds)
        elif self.pace == "ack" and carried_chunks:
            # The "ack" pace: apply the one request that answers this tick.
            item = inbox.get(self.ack_timeout)
            if item is None:
                log.warning("no answer to a tick within %.1f s; going on", self.ack_timeout)
            elif item is not _Inbox.CLOSED:
                self._apply_request(item)

    def _apply_request(self, request) -> None:
        if request.WhichOneof("request") == "setup":
            self.engine.setup(request.setup)
        else:
            for action in request.actions.actions:
                self.engine.apply(action)
