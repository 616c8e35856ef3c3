"""A read-until client of MinKNOW's data service that makes live barcode decisions.

The pieces, each usable alone:
- `connect`: the MinKNOW services of one flow-cell position, over a plain gRPC channel (host:port,
  no TLS: the mock, or a MinKNOW that serves one), over TLS with minknow_api's credentials
  (`tls=True`), or found by position name through MinKNOW's manager (`position="X1"`).
- `read_device_info`: what a client must know before reading: the int16 signal type
  (data.get_data_types), the channels' calibration (device.get_calibration: pA = (adc + offset) *
  pa_range / digitisation), the sample rate and the read classification ids.
- `make_setup` and `LiveReadsStream`: one data.get_live_reads call: the StreamSetup request, then
  batches of actions (unblock with a duration, stop_further_data), while ReadData chunks and
  action responses come back.
- `LiveDecider`: per read, the classifier fed chunk by chunk, then the balancing policy; returns
  one `Outcome` (the action to send and the CSV row) per read.
- `run_live`: the loop joining them; `SessionStats` counts what happened.
"""
from __future__ import annotations

import logging
import queue
import statistics
import threading
import time
import uuid
from collections import Counter
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Callable, Dict, Iterator, List, Optional, Sequence, Tuple

import numpy as np

from ._feed import ChannelReads, TrackedRead, signal_from_bytes

log = logging.getLogger("escpod.live")

# Read classifications whose reads MinKNOW should stream (accepted_first_chunk_classifications);
# names the device does not know are dropped. The same set readfish asks for.
DEFAULT_ACCEPTED_CLASSES = ("strand", "strand2", "short_strand", "adapter", "unknown_positive")
# Large enough for a response carrying a chunk on every channel of a PromethION flow cell.
GRPC_OPTIONS = [
    ("grpc.max_send_message_length", 64 * 1024 * 1024),
    ("grpc.max_receive_message_length", 64 * 1024 * 1024),
]
# The CSV columns of one decided read, in order (run.py writes them).
ROW_FIELDS = ("read_id", "channel", "read_number", "action", "reason", "label", "confidence",
              "samples_seen", "decision_ms", "state", "call_reason", "unblock_seconds", "balancer",
              "samples_after_adapter")


def make_classifier(model: str, method: Optional[str] = None, cnn_model: Optional[str] = None,
                    min_confidence: Optional[float] = None):
    """escpod._core.LiveClassifier for a model file; None options keep the classifier's defaults."""
    from .. import _core

    options = {"method": method, "cnn_model": cnn_model, "min_confidence": min_confidence}
    return _core.LiveClassifier(model, **{k: v for k, v in options.items() if v is not None})


def _pb():
    """minknow_api's data messages (imported on first use: minknow_api is optional)."""
    from minknow_api import data_pb2

    return data_pb2


# ---------------------------------------------------------------------------------------------
# Connecting


@dataclass
class MinknowServices:
    """The services of one flow-cell position that the client uses (minknow_api wrappers)."""

    data: object
    device: object
    analysis_configuration: object
    channel: object = None  # the grpc.Channel, when we opened it (closed by close())

    def close(self) -> None:
        if self.channel is not None:
            self.channel.close()
            self.channel = None


def connect(host: str, port: Optional[int], *, tls: bool = False, position: Optional[str] = None,
            timeout: float = 10.0) -> MinknowServices:
    """Connects to one flow-cell position.

    position: a position name ("X1", "MN12345", "1A"): asks MinKNOW's manager on `host` (its
      default port unless `port` is given) for the position and connects with TLS.
    tls: connect to host:port with minknow_api.Connection (TLS; credentials from minknow_api's
      environment variables, e.g. MINKNOW_TRUSTED_CA, MINKNOW_API_CLIENT_CERTIFICATE_CHAIN).
    otherwise: a plain (insecure) gRPC channel to host:port, as the mock serves.
    Raises ConnectionError when nothing answers within `timeout` seconds."""
    if position is not None:
        return _wrap_connection(_connect_position(host, port, position))
    if port is None:
        raise ValueError("a port is needed unless a position name is given")
    if tls:
        import minknow_api

        return _wrap_connection(minknow_api.Connection(host=host, port=port))
    return _connect_insecure(host, port, timeout)


def _connect_insecure(host: str, port: int, timeout: float) -> MinknowServices:
    import grpc
    from minknow_api import analysis_configuration_service, data_service, device_service

    channel = grpc.insecure_channel(f"{host}:{port}", options=GRPC_OPTIONS)
    try:
        grpc.channel_ready_future(channel).result(timeout=timeout)
    except grpc.FutureTimeoutError:
        channel.close()
        raise ConnectionError(f"nothing answered at {host}:{port} within {timeout:g} s") from None
    return MinknowServices(
        data=data_service.DataService(channel),
        device=device_service.DeviceService(channel),
        analysis_configuration=analysis_configuration_service.AnalysisConfigurationService(channel),
        channel=channel,
    )


def _connect_position(host: str, port: Optional[int], name: str):
    from minknow_api.manager import Manager

    manager = Manager(host=host, port=port)
    for position in manager.flow_cell_positions():
        if position.name == name:
            return position.connect()
    raise ConnectionError(f"MinKNOW at {host} has no flow-cell position named {name!r}")


def _wrap_connection(connection) -> MinknowServices:
    return MinknowServices(connection.data, connection.device, connection.analysis_configuration)


# ---------------------------------------------------------------------------------------------
# What the client needs to know about the device


@dataclass(frozen=True)
class DeviceInfo:
    channel_count: int
    sample_rate: int
    signal_dtype: np.dtype  # of uncalibrated (ADC) raw_data
    calibration: Dict[int, Tuple[float, float]]  # channel -> (offset, scale): pA = (adc+offset)*scale
    classification_ids: Dict[str, int]  # read classification name -> id

    def channel_calibration(self, channel: int) -> Tuple[float, float]:
        return self.calibration[channel]


def numpy_dtype(data_type) -> np.dtype:
    """The numpy dtype of a GetDataTypesResponse.DataType (type, big_endian, size)."""
    kinds = {0: "i", 1: "u", 2: "f"}  # SIGNED_INTEGER, UNSIGNED_INTEGER, FLOATING_POINT
    order = ">" if data_type.big_endian else "<"
    return np.dtype(f"{order}{kinds[data_type.type]}{data_type.size}")


def read_device_info(services: MinknowServices, first_channel: int = 1,
                     last_channel: Optional[int] = None) -> DeviceInfo:
    """Asks the device for the signal type, sample rate, calibration of first..last channel (all
    channels when last_channel is None) and the read classification ids."""
    types = services.data.get_data_types()
    channel_count = int(services.device.get_flow_cell_info().channel_count)
    last = channel_count if last_channel is None else last_channel
    cal = services.device.get_calibration(first_channel=first_channel, last_channel=last)
    digitisation = float(cal.digitisation)
    calibration = {
        ch: (float(offset), float(pa_range) / digitisation)
        for ch, (offset, pa_range) in enumerate(zip(cal.offsets, cal.pa_ranges), start=first_channel)
    }
    classes = services.analysis_configuration.get_read_classifications().read_classifications
    return DeviceInfo(
        channel_count=channel_count,
        sample_rate=int(services.device.get_sample_rate().sample_rate),
        signal_dtype=numpy_dtype(types.uncalibrated_signal),
        calibration=calibration,
        classification_ids={name: int(i) for i, name in classes.items()},
    )


# ---------------------------------------------------------------------------------------------
# The live reads stream


def make_setup(first_channel: int, last_channel: int, classification_ids: Dict[str, int],
               accepted_classes: Sequence[str] = DEFAULT_ACCEPTED_CLASSES,
               sample_minimum_chunk_size: int = 0, max_unblock_read_length_seconds: float = 0.0):
    """The first request of a get_live_reads call: channels first..last (inclusive, from 1),
    uncalibrated (int16) raw data, reads whose first chunk is one of `accepted_classes` (names
    the device does not know are dropped; none known: every read), and unblocks of reads of any
    length when max_unblock_read_length_seconds is 0 (else longer reads only stop sending)."""
    data_pb2 = _pb()
    ids = [classification_ids[n] for n in accepted_classes if n in classification_ids]
    unknown = [n for n in accepted_classes if n not in classification_ids]
    if unknown:
        log.info("read classifications the device does not have (ignored): %s", ", ".join(unknown))
    setup = data_pb2.GetLiveReadsRequest.StreamSetup(
        first_channel=first_channel,
        last_channel=last_channel,
        raw_data_type=data_pb2.GetLiveReadsRequest.UNCALIBRATED,
        sample_minimum_chunk_size=sample_minimum_chunk_size,
        max_unblock_read_length_seconds=max_unblock_read_length_seconds,
        accepted_first_chunk_classifications=ids,
    )
    return data_pb2.GetLiveReadsRequest(setup=setup)


def unblock_action(channel: int, read_id: str, duration: float):
    """An Action unblocking `read_id` on `channel` for `duration` seconds (a fresh action_id)."""
    data_pb2 = _pb()
    return data_pb2.GetLiveReadsRequest.Action(
        action_id=str(uuid.uuid4()), channel=channel, id=read_id,
        unblock=data_pb2.GetLiveReadsRequest.UnblockAction(duration=duration))


def stop_action(channel: int, read_id: str):
    """An Action asking for no more data of `read_id` (the read goes on sequencing)."""
    data_pb2 = _pb()
    return data_pb2.GetLiveReadsRequest.Action(
        action_id=str(uuid.uuid4()), channel=channel, id=read_id,
        stop_further_data=data_pb2.GetLiveReadsRequest.StopFurtherData())


class LiveReadsStream:
    """One bidirectional get_live_reads call. Iterating yields GetLiveReadsResponse messages;
    `send` queues a batch of actions (an empty batch is sent too: see run_live's ack); `close`
    half-closes the request side, `cancel` ends the call at once."""

    _END = object()

    def __init__(self, data_service, setup_request):
        self._requests: "queue.Queue" = queue.Queue()
        self._requests.put(setup_request)
        self._call = data_service.get_live_reads(self._request_iter())

    def _request_iter(self) -> Iterator:
        while True:
            item = self._requests.get()
            if item is self._END:
                return
            yield item

    def send(self, actions: List) -> None:
        data_pb2 = _pb()
        batch = data_pb2.GetLiveReadsRequest.Actions(actions=actions)
        self._requests.put(data_pb2.GetLiveReadsRequest(actions=batch))

    def close(self) -> None:
        self._requests.put(self._END)

    def cancel(self) -> None:
        self._call.cancel()

    def __iter__(self) -> Iterator:
        return iter(self._call)


# ---------------------------------------------------------------------------------------------
# Deciding per read


@dataclass
class Outcome:
    """What happened to one read: `action` is "unblock", "stop_further_data" or "none" (the read
    ended, or the stream did, before a decision). `row` holds the CSV columns (ROW_FIELDS)."""

    channel: int
    read_id: str
    action: str
    unblock_seconds: float
    row: Dict[str, object]


class LiveDecider:
    """Turns chunks into one Outcome per read: feeds the classifier (new samples only, see
    _feed.ChannelReads), asks the policy once the call is final, and reports sequenced reads to
    the policy (record_sequenced) when the next read on their channel shows how long they were.

    classifier: LiveClassifier-like (barcode_names, new_read, feed).
    policy: BalancingPolicy-like (decide, record_sequenced), or None: every decided read is
      accepted (stop_further_data) - a dry run that never unblocks.
    calibration: channel -> (offset, scale).
    sample_rate, bases_per_second: turn a read's duration into kbases for record_sequenced
      (an estimate: MinKNOW does not send a read's final length).
    max_missed_start: a read whose first chunk starts more than this many samples after the read
      is accepted without classifying (its adapter was not seen), as WarpDemuX does.
    clock: wall time in seconds (decision_ms)."""

    def __init__(self, classifier, policy, calibration: Callable[[int], Tuple[float, float]],
                 sample_rate: int, bases_per_second: float = 130.0, max_missed_start: int = 400,
                 clock: Callable[[], float] = time.monotonic):
        self.policy = policy
        self.sample_rate = sample_rate
        self.bases_per_second = bases_per_second
        self.clock = clock
        self._ended: List[Outcome] = []
        self._accepted: Dict[int, Tuple[int, int]] = {}  # channel -> (start_sample, barcode)
        self.reads = ChannelReads(classifier, calibration, max_missed_start, clock,
                                  on_new_read=self._close_previous)

    def on_chunk(self, channel: int, read, signal: np.ndarray, now: float) -> List[Outcome]:
        """Feeds one ReadData chunk (`signal`: its raw_data as int16); see on_chunks."""
        return self.on_chunks([(channel, read, signal)], now)

    def on_chunks(self, chunks: List[Tuple[int, object, np.ndarray]], now: float,
                  executor=None) -> List[Outcome]:
        """Feeds the chunks of one response ((channel, ReadData, int16 signal), one per channel).
        Returns the Outcomes they settle, in chunk order: that of a read that ended undecided
        (a new read appeared on its channel), and each read whose decision became final.
        `now`: run time in seconds (the policy's clock). executor: a concurrent.futures
        executor to run the classifier on several channels at once; the outcomes are the same."""
        outcomes: List[Outcome] = []
        to_feed = []
        for channel, read, signal in chunks:
            self._record_previous_length(channel, int(read.start_sample))
            tracked = self.reads.current.get(channel)
            was_final = tracked is not None and tracked.read_id == read.id and tracked.final
            tracked, new = self.reads.take_chunk(channel, read.id, int(read.start_sample),
                                                 int(read.chunk_start_sample), signal)
            outcomes.extend(self._ended)
            self._ended = []
            to_feed.append((tracked, new, was_final))
        feeds = [(t, new) for t, new, _ in to_feed if new is not None]
        if executor is not None and len(feeds) > 1:
            list(executor.map(lambda job: self.reads.feed(*job), feeds))
        else:
            for job in feeds:
                self.reads.feed(*job)
        for tracked, _, was_final in to_feed:
            if tracked.final and not was_final:
                outcomes.append(self._decide(tracked, now))
        return outcomes

    def finish(self, reason: str = "stream ended before a decision") -> List[Outcome]:
        """Outcomes ("none") of the reads still undecided when the stream ends."""
        outcomes = []
        for channel in sorted(self.reads.current):
            tracked = self.reads.forget(channel)
            if not tracked.final:
                outcomes.append(self._ended_outcome(self.reads.end_read(tracked), reason))
        return outcomes

    # -- internals

    def _close_previous(self, tracked: TrackedRead) -> None:
        # A read that ended undecided was never registered by the policy: nothing to record.
        if not tracked.final:
            ended = self.reads.end_read(tracked)
            self._ended.append(self._ended_outcome(ended, "read ended before a decision"))

    def _record_previous_length(self, channel: int, new_start: int) -> None:
        previous = self._accepted.get(channel)
        if previous is None or previous[0] == new_start or self.policy is None:
            return
        del self._accepted[channel]
        seconds = max(0, new_start - previous[0]) / self.sample_rate
        self.policy.record_sequenced(channel, previous[1], seconds * self.bases_per_second / 1000.0)

    def _decide(self, tracked: TrackedRead, now: float) -> Outcome:
        if tracked.skip_reason:
            return self._outcome(tracked, "stop_further_data", 0.0, tracked.skip_reason, "")
        decision = tracked.decision
        if self.policy is None:
            return self._outcome(tracked, "stop_further_data", 0.0, "no policy (dry run)", "")
        adapter_end = int(getattr(decision, "adapter_end", 0))
        after = max(0, tracked.samples_in_read - adapter_end) if adapter_end > 0 else 0
        tracked.extra["samples_after_adapter"] = after
        action = self.policy.decide(tracked.channel, decision, float(now), after)
        if action.unblock:
            return self._outcome(tracked, "unblock", float(action.unblock_seconds), action.reason,
                                 action.balancer)
        if _registered(action) and _barcode(decision) >= 0:
            self._accepted[tracked.channel] = (tracked.start_sample, _barcode(decision))
        return self._outcome(tracked, "stop_further_data", 0.0, action.reason, action.balancer)

    def _ended_outcome(self, tracked: TrackedRead, reason: str) -> Outcome:
        return self._outcome(tracked, "none", 0.0, reason, "")

    def _outcome(self, tracked: TrackedRead, action: str, seconds: float, reason: str,
                 balancer: str) -> Outcome:
        d = tracked.decision
        row = {
            "read_id": tracked.read_id,
            "channel": tracked.channel,
            "read_number": tracked.ordinal,
            "action": action,
            "reason": reason,
            "label": getattr(d, "label", "") if d is not None else "",
            "confidence": float(getattr(d, "confidence", 0.0)) if d is not None else 0.0,
            "samples_seen": int(getattr(d, "samples_seen", 0)) if d is not None else tracked.samples_in_read,
            "decision_ms": round(1000.0 * (self.clock() - tracked.first_seen), 3),
            "state": getattr(d, "state", "skipped") if d is not None else "skipped",
            "call_reason": getattr(d, "reason", "") if d is not None else tracked.skip_reason,
            "unblock_seconds": seconds,
            "balancer": balancer,
            "samples_after_adapter": tracked.extra.get("samples_after_adapter", ""),
        }
        return Outcome(tracked.channel, tracked.read_id, action, seconds, row)


# Accepts that a balancer does not register as a classified read (docs/live_config.md §5.6), for a
# PolicyAction without the `registered` flag.
_UNREGISTERED_REASONS = {"too_late_to_reject", "below_conf_pred", "untracked_channel",
                         "invalid_barcode", "outlier_detected", "failed_read"}


def _registered(action) -> bool:
    """Whether an accepted read should be reported to record_sequenced once sequenced."""
    flag = getattr(action, "registered", None)
    return bool(flag) if flag is not None else action.reason not in _UNREGISTERED_REASONS


def _barcode(decision) -> int:
    return -1 if decision is None else int(getattr(decision, "barcode", -1))


# ---------------------------------------------------------------------------------------------
# The loop


@dataclass
class SessionStats:
    """Counts of one run_live call."""

    responses: int = 0
    chunks: int = 0
    signal_bytes: int = 0
    actions_sent: Counter = field(default_factory=Counter)  # "unblock"/"stop_further_data" -> n
    action_responses: Counter = field(default_factory=Counter)  # (kind, response name) -> n
    outcomes: Counter = field(default_factory=Counter)  # action -> reads
    labels: Counter = field(default_factory=Counter)  # label -> reads decided with an action
    decision_ms: List[float] = field(default_factory=list)
    samples_seen: List[int] = field(default_factory=list)
    wall_seconds: float = 0.0
    ended_by: str = ""  # "stream end", "duration", "interrupted"

    def add(self, outcome: Outcome) -> None:
        self.outcomes[outcome.action] += 1
        if outcome.action != "none":
            self.labels[outcome.row["label"] or "(not classified)"] += 1
            self.decision_ms.append(float(outcome.row["decision_ms"]))
            self.samples_seen.append(int(outcome.row["samples_seen"]))

    def summary(self) -> Dict[str, object]:
        def quantiles(values):
            if not values:
                return {}
            ordered = sorted(values)
            return {"median": statistics.median(ordered),
                    "p90": ordered[min(len(ordered) - 1, int(0.9 * len(ordered)))],
                    "max": ordered[-1]}
        return {
            "reads": sum(self.outcomes.values()),
            "actions": dict(self.outcomes),
            "labels": dict(sorted(self.labels.items())),
            "actions_sent": dict(self.actions_sent),
            "action_responses": {f"{k}:{r}": n for (k, r), n in sorted(self.action_responses.items())},
            "decision_ms": quantiles(self.decision_ms),
            "samples_seen": quantiles(self.samples_seen),
            "responses": self.responses,
            "chunks": self.chunks,
            "signal_mb": round(self.signal_bytes / 1e6, 3),
            "wall_seconds": round(self.wall_seconds, 3),
            "ended_by": self.ended_by,
        }


def run_live(stream: LiveReadsStream, decider: LiveDecider, dtype: np.dtype, *,
             on_outcome: Callable[[Outcome], None] = lambda o: None, ack: bool = False,
             duration: Optional[float] = None, threads: int = 1) -> SessionStats:
    """Reads the stream until it ends, `duration` seconds pass or Ctrl-C; for each response
    feeds its chunks (in channel order) to the decider, sends the actions of the reads it settles
    as one batch, and calls on_outcome for every settled read (undecided ones included, as
    "none", when the stream ends).

    ack: send a batch after every response that carries chunks, empty or not. The mock's `ack`
      pace waits for it, which makes a replay deterministic; MinKNOW needs no such answer.
    threads: classifier threads (the channels of one response are fed in parallel).
    The stream ending with CANCELLED, ABORTED or FAILED_PRECONDITION (MinKNOW stopping
    acquisition) is a normal end (ended_by says which); other gRPC errors propagate."""
    import grpc

    normal_ends = {grpc.StatusCode.CANCELLED, grpc.StatusCode.ABORTED,
                   grpc.StatusCode.FAILED_PRECONDITION}
    stats = SessionStats(ended_by="stream end")
    kinds: Dict[str, str] = {}  # action_id -> kind, to count responses
    started = time.monotonic()
    timer = _start_timer(duration, stream, stats)
    executor = ThreadPoolExecutor(threads) if threads > 1 else None
    try:
        for response in stream:
            _count_responses(response, kinds, stats)
            batch = _decide_response(response, decider, dtype, stats, on_outcome, executor)
            if batch or (ack and len(response.channels)):
                _send(stream, batch, kinds, stats)
    except grpc.RpcError as exc:
        if exc.code() not in normal_ends:
            raise
        if stats.ended_by != "duration":
            stats.ended_by = f"stream end ({exc.code().name})"
    except KeyboardInterrupt:
        stats.ended_by = "interrupted"
        stream.cancel()
    finally:
        if timer is not None:
            timer.cancel()
        if executor is not None:
            executor.shutdown()
        stream.close()
        _finish(decider, stats, on_outcome)
        stats.wall_seconds = time.monotonic() - started
    return stats


def _send(stream: LiveReadsStream, batch: List, kinds: Dict[str, str], stats: SessionStats) -> None:
    for action in batch:
        kinds[action.action_id] = action.WhichOneof("action")
        stats.actions_sent[kinds[action.action_id]] += 1
    stream.send(batch)


def _finish(decider: LiveDecider, stats: SessionStats, on_outcome: Callable[[Outcome], None]) -> None:
    for outcome in decider.finish():
        stats.add(outcome)
        on_outcome(outcome)


def _start_timer(duration: Optional[float], stream: LiveReadsStream,
                 stats: SessionStats) -> Optional[threading.Timer]:
    if duration is None:
        return None

    def expire():
        stats.ended_by = "duration"
        stream.cancel()

    timer = threading.Timer(duration, expire)
    timer.daemon = True
    timer.start()
    return timer


def _decide_response(response, decider: LiveDecider, dtype, stats: SessionStats,
                     on_outcome: Callable[[Outcome], None], executor=None) -> List:
    stats.responses += 1
    chunks = []
    for channel in sorted(response.channels):
        read = response.channels[channel]
        stats.chunks += 1
        stats.signal_bytes += len(read.raw_data)
        chunks.append((int(channel), read, signal_from_bytes(read.raw_data, dtype)))
    batch = []
    for outcome in decider.on_chunks(chunks, float(response.seconds_since_start), executor):
        stats.add(outcome)
        on_outcome(outcome)
        if outcome.action == "unblock":
            batch.append(unblock_action(outcome.channel, outcome.read_id, outcome.unblock_seconds))
        elif outcome.action == "stop_further_data":
            batch.append(stop_action(outcome.channel, outcome.read_id))
    return batch


def _count_responses(response, kinds: Dict[str, str], stats: SessionStats) -> None:
    data_pb2 = _pb()
    names = data_pb2.GetLiveReadsResponse.ActionResponse.Response
    for r in response.action_responses:
        stats.action_responses[(kinds.pop(r.action_id, "unknown"), names.Name(r.response))] += 1
