"""`python -m escpod.live`: live barcode decisions against MinKNOW (run), and the mock (mock).

run:  connect to a flow-cell position, stream its reads (read-until), classify each read's barcode
      from its first seconds of signal, ask the balancing policy (WarpDemuX live TOML) whether to
      keep it, send unblock / stop_further_data, and write decisions.csv and summary.json.
mock: serve a replay of POD5 reads as MinKNOW's live reads service, to try `run` without a
      sequencer (and for tests).
"""
from __future__ import annotations

import argparse
import csv
import json
import logging
import signal
import sys
import threading
from pathlib import Path
from typing import List, Optional, Tuple

from . import readuntil as ru

log = logging.getLogger("escpod.live")

_RUN_EPILOG = """\
what it does, per read on channels first..last:
  1. MinKNOW sends the read's signal in chunks (int16 ADC, ~0.1-1 s each); the classifier is fed
     each new chunk until its call is final (a barcode, unclassified, or undecidable).
  2. The policy (--live-config) decides: keep the read (stop_further_data: MinKNOW stops sending it,
     the read sequences) or reject it (unblock for the policy's duration, in seconds).
  3. One row per read goes to OUT/decisions.csv; reads that ended (or the run did) before a call
     get action "none". OUT/summary.json has the totals and MinKNOW's answers to the actions.
  Reads whose start was missed (by more than [acquisition] max_missed_start_offset samples) are
  kept without classifying.

decisions.csv columns:
  read_id, channel, read_number (1, 2, ... per channel, as this client saw them: MinKNOW 6 sends no
  read number), action (unblock | stop_further_data | none), reason (the policy's, e.g. balanced,
  unbalanced, blacklisted; or why there was no call), label (barcode name or unclassified),
  confidence, samples_seen (signal samples the call used), decision_ms (wall time from the read's
  first chunk to its action), state (decided | undecidable | skipped | need_more), call_reason
  (the classifier's), unblock_seconds, balancer, samples_after_adapter (what the policy was told:
  samples received past the adapter end; above [balancing] max_signal_after_polya a reject
  becomes too_late_to_reject).

examples:
  # against the mock (another terminal: python -m escpod.live mock --pod5 reads.pod5 --port 50051)
  python -m escpod.live run --port 50051 --ack --model WDX4_rna004_v1_0.json \\
      --live-config live.toml --out live_out
  # against MinKNOW: position X1 on this computer (TLS; see docs/live_readuntil.md)
  python -m escpod.live run --position X1 --model WDX4_rna004_v1_0.json --live-config live.toml \\
      --duration 3600 --out live_out
"""

_MOCK_EPILOG = """\
The mock serves data.get_live_reads, data.get_data_types, device.get_calibration,
device.get_flow_cell_info, device.get_sample_rate and analysis_configuration.get_read_classifications
on a plain (no TLS) port, replays the reads once, then keeps serving the unary calls until Ctrl-C
(or exits with --exit-when-done). --records writes what it served and every action it received.

example:
  python -m escpod.live mock --pod5 reads.pod5 --port 50051 --channels 32 --records mock.json
"""


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="python -m escpod.live", description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", required=True)
    _add_run(sub.add_parser("run", help="live barcode decisions on a MinKNOW position (read-until)",
                            description=__doc__.split("mock:")[0].split("\n", 2)[2],
                            epilog=_RUN_EPILOG, formatter_class=argparse.RawDescriptionHelpFormatter))
    _add_mock(sub.add_parser("mock", help="serve a POD5 replay as MinKNOW's live reads service",
                             epilog=_MOCK_EPILOG, formatter_class=argparse.RawDescriptionHelpFormatter))
    return parser


def _add_run(p: argparse.ArgumentParser) -> None:
    where = p.add_argument_group("where MinKNOW is")
    where.add_argument("--host", default="127.0.0.1", help="MinKNOW host (default: %(default)s)")
    where.add_argument("--port", type=int, help="the position's gRPC port (plain gRPC unless --tls)")
    where.add_argument("--position", metavar="NAME",
                       help="find the position by name (e.g. X1, MN12345) through MinKNOW's manager "
                            "on --host; connects with TLS")
    where.add_argument("--tls", action="store_true",
                       help="connect to --port with TLS (minknow_api's credentials; MinKNOW's own ports)")
    what = p.add_argument_group("classifier and policy")
    what.add_argument("--model", required=True, help="WarpDemuX model file (e.g. WDX4_rna004_v1_0.json)")
    what.add_argument("--method", help="classifier method (default: the model's)")
    what.add_argument("--cnn-model", help="boundary CNN (ONNX) (default: the one beside the model)")
    what.add_argument("--min-confidence", type=float,
                      help="an early call needs at least this confidence (default: the classifier's)")
    what.add_argument("--live-config", dest="config", help="WarpDemuX live TOML: balancers, reject durations, "
                                       "max_missed_start_offset (required unless --dry-run)")
    what.add_argument("--dry-run", action="store_true",
                      help="no policy: keep every read (stop_further_data), never unblock")
    what.add_argument("--seed", type=int, default=0, help="channel-to-balancer shuffle seed (default: 0)")
    what.add_argument("--bases-per-second", type=float, default=130.0,
                      help="translocation speed turning a kept read's duration into kbases for "
                           "base_normalization (default: %(default)s, RNA004; RNA002: 70)")
    stream = p.add_argument_group("stream")
    stream.add_argument("--first-channel", type=int, help="default: [flowcell] min_channel, else 1")
    stream.add_argument("--last-channel", type=int,
                        help="default: [flowcell] max_channel, else the flow cell's channel count")
    stream.add_argument("--accept-classes", default=",".join(ru.DEFAULT_ACCEPTED_CLASSES),
                        help="read classifications to stream (first chunk), comma separated "
                             "(default: %(default)s)")
    stream.add_argument("--max-unblock-read-seconds", type=float, default=0.0,
                        help="MinKNOW does not unblock reads longer than this (0: any length)")
    stream.add_argument("--duration", type=float, metavar="S", help="stop after S seconds (default: "
                        "until MinKNOW ends the stream or Ctrl-C)")
    stream.add_argument("--threads", type=int, default=1,
                        help="classifier threads: the channels of one message are classified in "
                             "parallel (default: %(default)s; decisions do not depend on it)")
    stream.add_argument("--ack", action="store_true",
                        help="answer every chunk message (the mock's lockstep pace; not for MinKNOW)")
    p.add_argument("--out", default="live_out", help="output folder (default: %(default)s)")
    p.add_argument("--log-level", default="info", choices=["debug", "info", "warning", "error"])


def _add_mock(p: argparse.ArgumentParser) -> None:
    p.add_argument("--pod5", nargs="+", required=True, help="POD5 files to replay")
    p.add_argument("--host", default="127.0.0.1", help="listen address (default: %(default)s)")
    p.add_argument("--port", type=int, default=0, help="listen port (default: a free one, printed)")
    p.add_argument("--channels", type=int,
                   help="deal the reads round-robin to channels 1..N (default: each read's own channel)")
    p.add_argument("--max-reads", type=int, help="replay only the first N reads")
    p.add_argument("--chunk-seconds", type=float, default=0.4, help="signal per chunk (default: 0.4)")
    p.add_argument("--gap-seconds", type=float, default=0.5,
                   help="open pore between two reads of a channel (default: 0.5)")
    p.add_argument("--pace", default="ack", choices=["ack", "realtime", "free"],
                   help="ack: next chunk once the client answered (or --ack-timeout); realtime: "
                        "one chunk per --chunk-seconds; free: as fast as possible (default: ack)")
    p.add_argument("--ack-timeout", type=float, default=0.5,
                   help="seconds the ack pace waits for an answer (default: %(default)s)")
    p.add_argument("--records", help="write what was served and every action received (JSON)")
    p.add_argument("--exit-when-done", action="store_true", help="exit once every read was replayed")
    p.add_argument("--log-level", default="info", choices=["debug", "info", "warning", "error"])


# ---------------------------------------------------------------------------------------------
# run


def _live_toml(path: Optional[str]) -> dict:
    """The live TOML as a dict (the keys this command reads itself: [flowcell], [acquisition])."""
    if not path:
        return {}
    try:
        import tomllib
    except ImportError:  # Python < 3.11
        import tomli as tomllib
    with open(path, "rb") as fh:
        return tomllib.load(fh)


def _channels(args, toml: dict, channel_count: int) -> Tuple[int, int]:
    flowcell = toml.get("flowcell", {})
    first = args.first_channel or int(flowcell.get("min_channel", 1))
    last = args.last_channel or int(flowcell.get("max_channel", channel_count))
    if not 1 <= first <= last <= channel_count:
        raise SystemExit(f"channels {first}..{last} are not within the flow cell's 1..{channel_count}")
    return first, last


def _make_policy(args, classifier, channels: List[int]):
    if args.dry_run:
        return None
    from .. import _core

    return _core.BalancingPolicy(args.config, list(classifier.barcode_names), channels=channels,
                                 seed=args.seed)


def cmd_run(args) -> int:
    if not args.dry_run and not args.config:
        raise SystemExit("--live-config is required (or --dry-run to keep every read)")
    if args.port is None and args.position is None:
        raise SystemExit("give --port (and --host), or --position")
    toml = _live_toml(args.config)
    classifier = ru.make_classifier(args.model, args.method, args.cnn_model, args.min_confidence)
    services = ru.connect(args.host, args.port, tls=args.tls, position=args.position)
    try:
        info = ru.read_device_info(services)
        first, last = _channels(args, toml, info.channel_count)
        policy = _make_policy(args, classifier, list(range(first, last + 1)))
        max_missed = int(toml.get("acquisition", {}).get("max_missed_start_offset", 400))
        decider = ru.LiveDecider(classifier, policy, info.channel_calibration, info.sample_rate,
                                 args.bases_per_second, max_missed)
        setup = ru.make_setup(first, last, info.classification_ids,
                              [c for c in args.accept_classes.split(",") if c],
                              max_unblock_read_length_seconds=args.max_unblock_read_seconds)
        log.info("streaming channels %d..%d at %d Hz; writing %s", first, last, info.sample_rate, args.out)
        stats = _stream_to_csv(services, setup, decider, info, args)
    finally:
        services.close()
    summary = stats.summary()
    summary.update(channels=[first, last], model=args.model, config=args.config)
    (Path(args.out) / "summary.json").write_text(json.dumps(summary, indent=2) + "\n")
    print(format_summary(summary), file=sys.stderr)
    return 0


def _stream_to_csv(services, setup, decider, info, args) -> ru.SessionStats:
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    with open(out / "decisions.csv", "w", newline="") as fh:
        writer = csv.DictWriter(fh, fieldnames=ru.ROW_FIELDS)
        writer.writeheader()

        def write(outcome: ru.Outcome) -> None:
            writer.writerow(outcome.row)
            fh.flush()

        stream = ru.LiveReadsStream(services.data, setup)
        return ru.run_live(stream, decider, info.signal_dtype, on_outcome=write, ack=args.ack,
                           duration=args.duration, threads=args.threads)


def format_summary(summary: dict) -> str:
    """The summary as a few human-readable lines."""
    lines = [f"{summary['reads']} reads in {summary['wall_seconds']:.1f} s ({summary['ended_by']}); "
             f"{summary['chunks']} chunks, {summary['signal_mb']} MB of signal"]
    lines.append("  actions: " + ", ".join(f"{k} {v}" for k, v in sorted(summary["actions"].items())))
    lines.append("  labels of decided reads: " + ", ".join(f"{k} {v}" for k, v in summary["labels"].items()))
    if summary["action_responses"]:
        lines.append("  MinKNOW's answers: " + ", ".join(f"{k} {v}" for k, v in summary["action_responses"].items()))
    if summary["decision_ms"]:
        d, s = summary["decision_ms"], summary["samples_seen"]
        lines.append(f"  decision: median {d['median']:.1f} ms, p90 {d['p90']:.1f} ms after the first chunk; "
                     f"median {s['median']:.0f} samples seen")
    return "\n".join(lines)


# ---------------------------------------------------------------------------------------------
# mock


def cmd_mock(args) -> int:
    from .mock_minknow import MockMinknow

    mock = MockMinknow.from_pod5(args.pod5, channels=args.channels, max_reads=args.max_reads,
                                 chunk_seconds=args.chunk_seconds, gap_seconds=args.gap_seconds,
                                 pace=args.pace, ack_timeout=args.ack_timeout)
    port = mock.start(args.host, args.port)
    print(f"mock MinKNOW serving {len(mock.engine.channels)} channels on {args.host}:{port}", flush=True)
    stop = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stop.set())
    try:
        while not stop.wait(0.2):
            if args.exit_when_done and mock.wait_finished(0):
                break
    except KeyboardInterrupt:
        pass
    mock.stop()
    if args.records:
        Path(args.records).write_text(json.dumps(mock_records(mock), indent=1) + "\n")
    return 0


def mock_records(mock) -> dict:
    """The mock's records as JSON-ready data."""
    from dataclasses import asdict

    return {"served": [asdict(s) for s in mock.served.values()],
            "actions": [asdict(a) for a in mock.actions],
            "setups": [str(s) for s in mock.setups]}


def main(argv: Optional[List[str]] = None) -> int:
    args = build_parser().parse_args(argv)
    logging.basicConfig(level=getattr(logging, args.log_level.upper()),
                        format="%(asctime)s %(name)s %(levelname)s %(message)s")
    try:
        return cmd_run(args) if args.command == "run" else cmd_mock(args)
    except ModuleNotFoundError as e:
        if e.name and e.name.split(".")[0] in ("grpc", "minknow_api", "google"):
            raise SystemExit(f"escpod live {args.command}: {e.name} is not installed: MinKNOW's read-until "
                             "protocol needs gRPC and minknow-api (pip install escpod[live])") from None
        raise
