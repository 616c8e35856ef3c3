"""escpod.live: the read-until client against the mock MinKNOW service, the command, and the
readfish caller plugin.

The chunk bookkeeping and the stream machinery are checked with a small deterministic fake
classifier and policy (same interface as escpod._core's); the end-to-end runs use the real
LiveClassifier (WDX4 RNA004 model) and BalancingPolicy on the shared yeast tRNA reads.
Needs requirements-live.txt installed (grpcio, minknow-api, readfish).
"""
import csv
import json
import os
import pathlib
from collections import Counter
from dataclasses import dataclass

import numpy as np
import pytest

from escpod.live import _feed, readuntil as ru
from escpod.live.mock_minknow import MockMinknow, ReplayEngine, ReplayRead, load_pod5_reads
from minknow_api import data_pb2

REPO = pathlib.Path(__file__).resolve().parents[2]
DATA = pathlib.Path(os.environ.get("ESCPOD_SHARED_DATA", REPO.parent / "shared" / "data"))
TRNA_POD5 = DATA / "escapepod" / "drna" / "yeast_trna_reads.pod5"
WDX4_MODEL = DATA / "warpdemux" / "WDX4_rna004_v1_0.json"
RNA002_POD5 = DATA / "warpdemux" / "sample" / "small_pod5_0.pod5"
RNA002_MODEL = DATA / "warpdemux" / "joblib" / "rna002" / "WDX4_rna002_v0_4_4.joblib"
Req = data_pb2.GetLiveReadsRequest
Resp = data_pb2.GetLiveReadsResponse


def _need(*paths):
    for path in paths:
        if not path.is_file():
            pytest.fail(f"shared test data missing: {path} (set ESCPOD_SHARED_DATA)")
    return paths


@pytest.fixture(scope="module")
def data_files():
    return _need(TRNA_POD5, WDX4_MODEL)


# ---------------------------------------------------------------------------------------------
# Fakes with LiveClassifier's and BalancingPolicy's interface


@dataclass
class FakeDecision:
    state: str = "need_more"
    label: str = ""
    barcode: int = -1
    confidence: float = 0.0
    reason: str = ""
    samples_seen: int = 0
    adapter_end: int = 0


class FakeRead:
    def __init__(self, read_id, offset, scale):
        self.read_id, self.offset, self.scale = read_id, offset, scale
        self.fed = []  # every array fed, in order
        self.decision = FakeDecision()


class FakeClassifier:
    """Decides once `decide_at` samples were fed: barcode int(read_id[:8], 16) % 5, where 4 is
    unclassified. A read ending earlier is undecidable."""

    barcode_names = ["BC00", "BC01", "BC02", "BC03"]

    def __init__(self, decide_at=3000):
        self.decide_at = decide_at
        self.reads = {}

    def new_read(self, read_id, offset, scale):
        self.reads[read_id] = FakeRead(read_id, offset, scale)
        return self.reads[read_id]

    def expected_label(self, read_id):
        b = int(read_id[:8], 16) % 5
        return self.barcode_names[b] if b < 4 else "unclassified"

    def feed(self, read, raw, end=False):
        assert raw.dtype == np.int16 and raw.ndim == 1
        if read.decision.state != "need_more":
            return read.decision
        read.fed.append(raw.copy())
        seen = sum(len(a) for a in read.fed)
        if seen >= self.decide_at:
            label = self.expected_label(read.read_id)
            barcode = self.barcode_names.index(label) if label in self.barcode_names else -1
            read.decision = FakeDecision("decided", label, barcode, 0.9, "", seen, 1500)
        elif end:
            read.decision = FakeDecision("undecidable", "", -1, 0.0, "read ended", seen, 0)
        else:
            read.decision = FakeDecision(samples_seen=seen)
        return read.decision


@dataclass
class FakeAction:
    unblock: bool
    unblock_seconds: float
    reason: str
    balancer: str = "fake"


class FakePolicy:
    """Unblocks BC01 reads for 0.25 s, keeps the rest."""

    def __init__(self):
        self.decided, self.sequenced = [], []

    def decide(self, channel, decision, now, samples_after_adapter):
        self.decided.append((channel, decision.label, now, samples_after_adapter))
        if decision.label == "BC01":
            return FakeAction(True, 0.25, "blacklisted")
        return FakeAction(False, 0.0, "balanced")

    def record_sequenced(self, channel, barcode, kbases):
        self.sequenced.append((channel, barcode, kbases))


def synthetic_reads(n_reads=24, channels=4, seed=3):
    rng = np.random.default_rng(seed)
    reads = []
    for i in range(n_reads):
        read_id = f"{rng.integers(0, 2**32):08x}-0000-4000-8000-{i:012x}"
        signal = rng.integers(300, 900, size=int(rng.integers(2000, 9000)), dtype=np.int16)
        reads.append(ReplayRead(read_id, i % channels + 1, signal, -240.0 - i % channels, 0.146))
    return reads


def run_against_mock(mock, classifier, policy, first=1, last=None, threads=1, **setup_kwargs):
    """Connects to the mock, runs the client with ack, returns (outcomes, stats, device info)."""
    services = ru.connect("127.0.0.1", mock.port)
    try:
        info = ru.read_device_info(services)
        decider = ru.LiveDecider(classifier, policy, info.channel_calibration, info.sample_rate)
        last = info.channel_count if last is None else last
        setup = ru.make_setup(first, last, info.classification_ids, **setup_kwargs)
        outcomes = []
        stats = ru.run_live(ru.LiveReadsStream(services.data, setup), decider, info.signal_dtype,
                            on_outcome=outcomes.append, ack=True, threads=threads)
    finally:
        services.close()
    assert mock.wait_finished(10)
    return outcomes, stats, info


# ---------------------------------------------------------------------------------------------
# Chunk bookkeeping


def test_new_samples_cuts_resent_and_reports_missing():
    raw = np.arange(10, dtype=np.int16)
    new, missing = _feed.new_samples(raw, chunk_start=100, want_from=104)
    assert new.tolist() == [4, 5, 6, 7, 8, 9] and missing == 0
    new, missing = _feed.new_samples(raw, chunk_start=100, want_from=110)
    assert new.tolist() == [] and missing == 0
    new, missing = _feed.new_samples(raw, chunk_start=100, want_from=97)
    assert new.tolist() == list(range(10)) and missing == 3


def test_channel_reads_feed_each_sample_once():
    """Chunks that reach back before the read, repeat fed samples (readfish's accumulated
    raw_data) or come exactly in order: the classifier gets the read's samples once, in order."""
    signal = np.arange(1000, 1900, dtype=np.int16)
    before = np.array([7, 7, 7], dtype=np.int16)  # three samples before the read's start
    classifier = FakeClassifier(decide_at=10_000)
    reads = _feed.ChannelReads(classifier, lambda ch: (-240.0, 0.15))
    reads.feed_chunk(5, "r1", 500, 497, np.concatenate([before, signal[:200]]))
    reads.feed_chunk(5, "r1", 500, 500, signal[:450])  # accumulated: 200 old + 250 new
    reads.feed_chunk(5, "r1", 500, 950, signal[450:900])  # in order
    fed = np.concatenate(classifier.reads["r1"].fed)
    assert fed.tolist() == signal.tolist()
    tracked = reads.current[5]
    assert (tracked.ordinal, tracked.missed_start, tracked.samples_in_read) == (1, 0, 900)
    assert (tracked.state.offset, tracked.state.scale) == (-240.0, 0.15)


def test_channel_reads_give_up_on_missed_start_and_gaps():
    classifier = FakeClassifier()
    reads = _feed.ChannelReads(classifier, lambda ch: (0.0, 1.0), max_missed_start=400)
    late = reads.feed_chunk(1, "late", 1000, 1401, np.zeros(100, np.int16))
    assert late.final and late.skip_reason == "missed read start (401 samples)"
    assert "late" not in classifier.reads  # never classified
    ok = reads.feed_chunk(2, "ok", 1000, 1400, np.zeros(100, np.int16))
    assert not ok.final and ok.missed_start == 400
    gap = reads.feed_chunk(2, "ok", 1000, 1600, np.zeros(100, np.int16))
    assert gap.final and gap.gap == 100 and gap.skip_reason.startswith("signal gap (100 samples")
    nxt = reads.feed_chunk(2, "next", 3000, 3000, np.zeros(100, np.int16))
    assert nxt.ordinal == 2 and reads.current[2] is nxt


def test_signal_from_bytes_accepts_only_int16():
    big_endian = np.array([1, -2, 300], dtype=">i2")
    assert ru.numpy_dtype(data_pb2.GetDataTypesResponse.DataType(type=0, big_endian=True, size=2)) == np.dtype(">i2")
    assert _feed.signal_from_bytes(big_endian.tobytes(), ">i2").tolist() == [1, -2, 300]
    with pytest.raises(ValueError, match="int16"):
        _feed.signal_from_bytes(np.zeros(2, "<f4").tobytes(), "<f4")


# ---------------------------------------------------------------------------------------------
# The mock's replay and action handling (no gRPC)


def _setup(engine, **kw):
    fields = dict(first_channel=1, last_channel=1, raw_data_type=Req.UNCALIBRATED)
    fields.update(kw)
    engine.setup(Req.StreamSetup(**fields))


def test_mock_engine_honours_unblock_and_stop_further_data():
    reads = [ReplayRead(f"r{i}", 1, np.arange(i * 10_000, i * 10_000 + 5000, dtype=np.int16), 0.0, 1.0)
             for i in range(3)]
    engine = ReplayEngine(reads, sample_rate=1000, chunk_seconds=1.0, gap_seconds=0.5)
    _setup(engine)
    first = engine.tick()
    data = first.channels[1]
    assert data.id == "r0" and data.chunk_start_sample == data.start_sample
    assert np.frombuffer(data.raw_data, "<i2").tolist() == list(range(data.chunk_length))
    engine.apply(ru.stop_action(1, "r0"))
    assert engine.tick().channels.get(1) is None  # no more data for r0 ...
    while "r1" not in engine.served:
        engine.tick()
    assert engine.served["r0"].outcome == "stopped"
    assert engine.served["r0"].samples_sequenced == 5000  # ... but it sequenced to its end
    engine.apply(ru.unblock_action(1, "r0", 0.1))  # gone by now
    engine.apply(ru.unblock_action(1, "r1", 2.0))
    responses = engine.tick().action_responses
    assert [r.response for r in responses] == [Resp.ActionResponse.FAILED_READ_FINISHED,
                                               Resp.ActionResponse.SUCCESS]
    assert engine.served["r1"].outcome == "unblocked"
    clock = engine.clock
    while engine.channels[1].cur is None:
        engine.tick()
    assert engine.channels[1].cur.start >= clock - engine.chunk + 2000 + 500  # unblock + gap idle
    assert [(a.read_id, a.kind, a.response) for a in engine.actions] == [
        ("r0", "stop_further_data", "SUCCESS"), ("r0", "unblock", "FAILED_READ_FINISHED"),
        ("r1", "unblock", "SUCCESS")]


def test_mock_engine_refuses_unblocks_past_max_length():
    reads = [ReplayRead("long", 1, np.zeros(20_000, np.int16), 0.0, 1.0)]
    engine = ReplayEngine(reads, sample_rate=1000, chunk_seconds=1.0)
    _setup(engine, max_unblock_read_length_samples=1500)
    for _ in range(3):
        engine.tick()
    engine.apply(ru.unblock_action(1, "long", 0.1))
    assert engine.actions[-1].response == "FAILED_READ_TOO_LONG"
    assert engine.served["long"].outcome == "stopped"  # MinKNOW then only stops sending
    assert len(engine.tick().channels) == 0


# ---------------------------------------------------------------------------------------------
# Client against the mock over gRPC (fakes)


def test_setup_fields_and_device_info_reach_the_mock():
    reads = synthetic_reads(n_reads=8, channels=4)
    mock = MockMinknow(reads, sample_rate=4000, digitisation=2048, chunk_seconds=0.25)
    with mock:
        outcomes, stats, info = run_against_mock(mock, FakeClassifier(), FakePolicy(), first=2, last=3,
                                                 max_unblock_read_length_seconds=1.5)
    setup = mock.setups[0]
    assert (setup.first_channel, setup.last_channel) == (2, 3)
    assert setup.raw_data_type == Req.UNCALIBRATED
    assert setup.sample_minimum_chunk_size == 0
    assert setup.max_unblock_read_length_seconds == 1.5
    # strand, strand2, short_strand, adapter, unknown_positive: the mock's ids
    assert list(setup.accepted_first_chunk_classifications) == [2, 7, 6, 3, 5]
    assert (info.sample_rate, info.signal_dtype, info.channel_count) == (4000, np.dtype("<i2"), 4)
    assert info.calibration[3] == pytest.approx((-242.0, 0.146))
    assert {s.channel for s in mock.served.values()} == {2, 3}  # channels outside: never served
    assert {o.channel for o in outcomes} == {2, 3}


def test_mock_records_match_client_decisions():
    reads = synthetic_reads(n_reads=40, channels=5)
    classifier, policy = FakeClassifier(decide_at=3000), FakePolicy()
    mock = MockMinknow(reads, sample_rate=4000, chunk_seconds=0.2, gap_seconds=0.3)
    with mock:
        outcomes, stats, _ = run_against_mock(mock, classifier, policy)
    by_read = {o.read_id: o for o in outcomes}
    assert len(by_read) == len(outcomes) == len(mock.served) == 40  # one outcome per read served
    actions = Counter(a.read_id for a in mock.actions)
    for read_id, served in mock.served.items():
        outcome = by_read[read_id]
        if outcome.action == "none":
            assert actions[read_id] == 0 and served.outcome == "completed"
            continue
        assert actions[read_id] == 1  # exactly one action per decided read
        (recorded,) = [a for a in mock.actions if a.read_id == read_id]
        assert (recorded.kind, recorded.response, recorded.channel) == (outcome.action, "SUCCESS", served.channel)
        assert recorded.duration == outcome.unblock_seconds
        assert served.outcome == {"unblock": "unblocked", "stop_further_data": "stopped"}[outcome.action]
        assert outcome.row["label"] == classifier.expected_label(read_id)
        assert (outcome.action == "unblock") == (outcome.row["label"] == "BC01")
        # The classifier saw exactly the samples sent, from the read's first one.
        fed = np.concatenate(classifier.reads[read_id].fed)
        signal = next(r.signal for r in reads if r.read_id == read_id)
        assert fed.tolist() == signal[:len(fed)].tolist() and len(fed) == served.samples_sent
    decided = [o for o in outcomes if o.action != "none"]
    assert len(decided) >= 25 and sum(o.action == "unblock" for o in outcomes) >= 3
    assert sum(stats.actions_sent.values()) == len(mock.actions) == len(decided)
    assert sum(stats.action_responses.values()) == len(mock.actions)
    assert stats.chunks == sum(s.chunks for s in mock.served.values())
    # Kept barcoded reads are reported sequenced once the next read on the channel shows their length.
    kept = [o for o in decided if o.action == "stop_further_data" and o.row["label"] != "unclassified"]
    assert 0 < len(policy.sequenced) <= len(kept)
    for channel, barcode, kbases in policy.sequenced:
        assert 0 <= barcode < 4 and kbases > 0


def test_realtime_pace_without_ack_keeps_the_protocol():
    """MinKNOW's way: the mock does not wait and the client answers only with actions. Actions
    then race the reads; whatever arrives is answered, and matches the client's decisions."""
    reads = synthetic_reads(n_reads=30, channels=6, seed=5)
    mock = MockMinknow(reads, sample_rate=20000, chunk_seconds=0.05, gap_seconds=0.02, pace="realtime")
    with mock:
        services = ru.connect("127.0.0.1", mock.port)
        info = ru.read_device_info(services)
        decider = ru.LiveDecider(FakeClassifier(decide_at=2500), FakePolicy(), info.channel_calibration,
                                 info.sample_rate)
        setup = ru.make_setup(1, info.channel_count, info.classification_ids)
        outcomes = []
        stats = ru.run_live(ru.LiveReadsStream(services.data, setup), decider, info.signal_dtype,
                            on_outcome=outcomes.append, ack=False)
        services.close()
    by_read = {o.read_id: o for o in outcomes}
    assert len(by_read) == len(outcomes) == 30 and stats.ended_by == "stream end"
    assert 0 < len(mock.actions) <= sum(o.action != "none" for o in outcomes)
    for action in mock.actions:
        assert action.kind == by_read[action.read_id].action
        assert action.response in ("SUCCESS", "FAILED_READ_FINISHED")
        served = mock.served[action.read_id]
        if action.kind == "unblock":
            assert served.outcome == ("unblocked" if action.response == "SUCCESS" else "completed")
    assert sum(stats.action_responses.values()) <= len(mock.actions)


def test_duration_ends_the_stream_and_settles_open_reads():
    reads = synthetic_reads(n_reads=12, channels=3, seed=9)
    mock = MockMinknow(reads, sample_rate=4000, chunk_seconds=0.1, pace="realtime")
    with mock:
        services = ru.connect("127.0.0.1", mock.port)
        info = ru.read_device_info(services)
        decider = ru.LiveDecider(FakeClassifier(decide_at=10**9), None, info.channel_calibration,
                                 info.sample_rate)  # never decides: every read stays open
        setup = ru.make_setup(1, 3, info.classification_ids)
        outcomes = []
        stats = ru.run_live(ru.LiveReadsStream(services.data, setup), decider, info.signal_dtype,
                            on_outcome=outcomes.append, duration=0.6)
        services.close()
    assert stats.ended_by == "duration" and 0.6 <= stats.wall_seconds < 5
    assert not mock.wait_finished(0) and not mock.actions
    seen = {o.read_id for o in outcomes}
    assert len(seen) == len(outcomes) and {o.action for o in outcomes} == {"none"}
    assert sum(o.row["reason"] == "stream ended before a decision" for o in outcomes) == 3  # one per channel
    assert seen == {r for r, s in mock.served.items() if s.chunks > 0}


# ---------------------------------------------------------------------------------------------
# The real classifier and policy, through the command


def live_toml(balancing_extra=""):
    """Channels 1-8 reject every call (reject_all), 9-16 keep every one (none)."""
    return f"""\
[flowcell]
flowcell_type = "minion"
min_channel = 1
max_channel = 16

[[balancers]]
name = "reject_half"
balance_type = "reject_all"
channel_num = 8

[[balancers]]
name = "keep_half"
balance_type = "none"
channel_num = 8

[balancing]
reject_duration = 0.25
{balancing_extra}
"""


def _offline_decision(classifier, read: ReplayRead, served, ended: bool):
    """The decision for the chunks the mock sent (same boundaries), fed directly."""
    state = classifier.new_read(read.read_id, read.offset, read.scale)
    decision, at = None, 0
    for n in served.chunk_lengths:
        decision = classifier.feed(state, read.signal[at:at + n], False)
        at += n
        if decision.state != "need_more":
            return decision
    return classifier.feed(state, np.zeros(0, np.int16), True) if ended else decision


# (POD5, model, extra [balancing] keys, reads): RNA004 tRNA reads with the WDX4 RNA004 model (few
# calls; the default max_signal_after_polya makes most rejects too late), and WarpDemuX's RNA002
# sample with its WDX4 RNA002 model (mostly barcodes; rejects always allowed).
RUNS = {
    "rna004_trna": (TRNA_POD5, WDX4_MODEL, "", 180),
    "rna002_sample": (RNA002_POD5, RNA002_MODEL, "max_signal_after_polya = 1000000", 200),
}


@pytest.mark.parametrize("name", sorted(RUNS))
def test_live_run_command_against_mock(tmp_path, name):
    from escpod.live import run

    pod5, model, balancing_extra, n_reads = RUNS[name]
    _need(pod5, model)
    config = tmp_path / "live.toml"
    config.write_text(live_toml(balancing_extra))
    mock = MockMinknow.from_pod5([pod5], channels=16, chunk_seconds=0.4)
    out = tmp_path / "out"
    with mock:
        rc = run.main(["run", "--port", str(mock.port), "--ack", "--model", str(model),
                       "--live-config", str(config), "--out", str(out), "--log-level", "warning"])
    assert rc == 0 and mock.wait_finished(0)
    rows = list(csv.DictReader(open(out / "decisions.csv")))
    summary = json.loads((out / "summary.json").read_text())
    assert list(rows[0]) == list(ru.ROW_FIELDS)
    assert len(rows) == len({r["read_id"] for r in rows}) == len(mock.served) == n_reads
    assert summary["reads"] == n_reads and summary["channels"] == [1, 16]

    from escpod import _core

    classifier = _core.LiveClassifier(str(model))
    reads = {r.read_id: r for r in load_pod5_reads([pod5], channels=16)[0]}
    recorded = {a.read_id: a for a in mock.actions}
    assert len(recorded) == len(mock.actions)  # never two actions for one read
    for row in rows:
        served = mock.served[row["read_id"]]
        assert int(row["channel"]) == served.channel
        if row["action"] == "none":
            assert row["read_id"] not in recorded and served.outcome == "completed"
        else:
            action = recorded[row["read_id"]]
            assert (action.kind, action.response) == (row["action"], "SUCCESS")
            assert action.duration == pytest.approx(float(row["unblock_seconds"]))
            # reject_all rejects every call on its channels unless the read is too far past its
            # adapter ([balancing] max_signal_after_polya); `none` keeps every one.
            assert row["balancer"] in ("reject_half", "keep_half")
            rejectable = row["balancer"] == "reject_half" and row["reason"] != "too_late_to_reject"
            assert (row["action"] == "unblock") == rejectable
            if row["action"] == "unblock":
                assert action.duration == pytest.approx(0.25)
        if row["state"] != "skipped":
            ended = row["action"] == "none"
            offline = _offline_decision(classifier, reads[row["read_id"]], served, ended)
            assert (offline.state, offline.label, offline.samples_seen) == (
                row["state"], row["label"], int(row["samples_seen"]))
    assert sum(r["action"] != "none" for r in rows) == len(mock.actions) > 0
    assert any(r["action"] == "unblock" for r in rows) and any(r["action"] == "stop_further_data" for r in rows)
    assert summary["action_responses"] == {f"{k}:SUCCESS": n for k, n in summary["actions_sent"].items()}
    too_late = [r for r in rows if r["reason"] == "too_late_to_reject"]
    assert all(int(r["samples_after_adapter"]) > 1500 for r in too_late)  # the default limit
    assert bool(too_late) == (not balancing_extra)


def test_classifier_threads_do_not_change_decisions(tmp_path, data_files):
    from escpod import _core

    pod5, model = data_files
    config = tmp_path / "live.toml"
    config.write_text(live_toml())
    runs = []
    for threads in (1, 3):
        classifier = _core.LiveClassifier(str(model))
        policy = _core.BalancingPolicy(str(config), classifier.barcode_names, channels=list(range(1, 17)))
        with MockMinknow.from_pod5([pod5], channels=16, max_reads=96) as mock:
            outcomes, _, _ = run_against_mock(mock, classifier, policy, threads=threads)
        runs.append([{k: v for k, v in o.row.items() if k != "decision_ms"} for o in outcomes])
        runs[-1].append([(a.read_id, a.kind, a.duration, a.at_sample) for a in mock.actions])
    assert runs[0] == runs[1] and len(runs[0]) == 97


def test_run_help_teaches(capsys):
    from escpod.live import run

    with pytest.raises(SystemExit) as exit_info:
        run.main(["run", "--help"])
    text = capsys.readouterr().out
    assert exit_info.value.code == 0
    for needle in ("decisions.csv columns", "--position", "--live-config", "stop_further_data",
                   "mock --pod5", "samples_after_adapter"):
        assert needle in text


# ---------------------------------------------------------------------------------------------
# readfish's plugin interface


def _readfish_conf(model, barcode_names, reject):
    import rtoml
    from readfish._config import Conf
    from escpod.live.readfish_caller import barcodes_toml

    text = (f'[caller_settings."escpod.live.readfish_caller"]\nmodel = "{model}"\n\n'
            f"[mapper_settings.no_op]\n\n" + barcodes_toml(barcode_names, reject=reject))
    return Conf.from_dict(rtoml.loads(text), channels=512)


def _accumulated_chunks(reads, served, upto):
    """What readfish's AccumulatingCache hands the caller after `upto` chunks of each read: the
    first chunk's ReadData with the raw_data of chunks 1..upto appended."""
    chunks = []
    for read in reads:
        lengths = served[read.read_id]
        n = sum(lengths[:upto])
        data = Resp.ReadData(id=read.read_id, start_sample=10_000, chunk_start_sample=10_000,
                             chunk_length=lengths[0], raw_data=read.signal[:n].astype("<i2").tobytes())
        chunks.append((read.channel, data))
    return chunks


def _daq(reads):
    from readfish.read_until.base import CALIBRATION

    return {r.channel: CALIBRATION(r.scale, r.offset) for r in reads}


def _direct_calls(model, reads, lengths):
    """read_id -> readfish barcode of the classifier's call on the same chunks, fed directly."""
    from escpod import _core

    direct, calls = _core.LiveClassifier(str(model)), {}
    for r in reads:
        state, at = direct.new_read(r.read_id, r.offset, r.scale), 0
        for n in lengths[r.read_id]:
            d = direct.feed(state, r.signal[at:at + n], False)
            at += n
            if d.state != "need_more":
                calls[r.read_id] = d.label if d.barcode >= 0 else "unclassified"
                break
    return calls


def test_readfish_caller_results_carry_the_live_call(data_files):
    from readfish._config import make_decision
    from readfish.plugins.utils import Action, Decision

    from escpod import _core

    pod5, model = data_files
    reads = list({r.channel: r for r in load_pod5_reads([pod5])[0]}.values())  # one per channel
    lengths = {r.read_id: [1600] * (len(r.signal) // 1600) for r in reads}
    expected = _direct_calls(model, reads, lengths)
    names = _core.LiveClassifier(str(model)).barcode_names
    rejected = Counter(b for b in expected.values() if b in names).most_common(1)[0][0]
    conf = _readfish_conf(model, names, reject=[rejected])
    caller = conf.caller_settings.load_object("Caller", run_information=None, sample_rate=4000)
    aligner = conf.mapper_settings.load_object("Aligner")
    assert "escpod live caller" in caller.describe()

    results, actions = {}, Counter()
    for upto in range(1, max(len(v) for v in lengths.values()) + 1):
        batch = _accumulated_chunks(reads, lengths, upto)
        for result in aligner.map_reads(caller.basecall(batch, np.dtype("<i2"), _daq(reads))):
            assert results.setdefault(result.read_id, result.barcode) == result.barcode  # same every time
            control, condition = conf.get_conditions(result.channel, result.barcode)
            decision = make_decision(conf, result)
            assert decision is Decision.no_seq and not control
            action = condition.get_action(decision)
            assert action is (Action.unblock if result.barcode == rejected else Action.stop_receiving)
            actions[action] += 1
    assert results == expected and len(results) >= 10
    assert caller.calls == len(results)
    assert actions[Action.unblock] > 0 and actions[Action.stop_receiving] > 0
