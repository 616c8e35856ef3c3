"""Writes reads with the official pod5 Writer and dies without closing it (a killed writer).

usage: kill_writer.py OUT.pod5 REFERENCE.pod5 N_READS READ_BATCH SIGNAL_BATCH CHUNK MODE [ACQ]
First writes the same reads to REFERENCE.pod5 (closed normally: the truth), then N_READS reads
to OUT.pod5 with the given batch sizes and chunk size, then: MODE "exit" leaves with os._exit
(no close, no flush of pending batches); "sigkill" prints "ready" and waits to be SIGKILLed.
"""
import datetime
import os
import sys
import time
import uuid

import numpy as np
import pod5
import pod5.writer as pod5_writer
import lib_pod5

out, ref = sys.argv[1], sys.argv[2]
n_reads, read_batch, signal_batch, chunk = (int(x) for x in sys.argv[3:7])
mode = sys.argv[7]
acq = sys.argv[8] if len(sys.argv) > 8 else "kill-test-acquisition"

_options = lib_pod5.FileWriterOptions


def small_batches():
    o = _options()
    o.read_table_batch_size = read_batch
    o.signal_table_batch_size = signal_batch
    o.max_signal_chunk_size = chunk
    return o


pod5_writer.p5b.FileWriterOptions = small_batches

utc = datetime.timezone.utc
run_info = pod5.RunInfo(
    acquisition_id=acq, acquisition_start_time=datetime.datetime(2024, 1, 2, tzinfo=utc),
    adc_max=4095, adc_min=-4096, context_tags={"sample_frequency": "4000"},
    experiment_name="exp", flow_cell_id="FC1", flow_cell_product_code="FLO", protocol_name="prot",
    protocol_run_id="run-1", protocol_start_time=datetime.datetime(2024, 1, 1, tzinfo=utc),
    sample_id="sample", sample_rate=4000, sequencing_kit="kit", sequencer_position="X1",
    sequencer_position_type="minion", software="test", system_name="host", system_type="sys",
    tracking_id={"run_id": acq})
rng = np.random.default_rng(n_reads * 7 + read_batch)
reasons = [pod5.EndReasonEnum.UNKNOWN, pod5.EndReasonEnum.SIGNAL_POSITIVE, pod5.EndReasonEnum.MUX_CHANGE]
reads = []
for i in range(n_reads):
    n = int(rng.integers(1, 4 * chunk))
    reads.append(pod5.Read(
        read_id=uuid.UUID(bytes=rng.bytes(16), version=4),
        end_reason=pod5.EndReason.from_reason_with_default_forced(reasons[i % 3]),
        calibration=pod5.Calibration(float(rng.normal()), 0.17),
        pore=pod5.Pore(channel=int(rng.integers(1, 512)), well=int(rng.integers(1, 5)),
                       pore_type=["not_set", "r10"][i % 2]),
        read_number=i, start_sample=int(rng.integers(0, 1 << 40)), median_before=float(rng.normal()),
        num_minknow_events=i, tracked_scaling=pod5.pod5_types.ShiftScalePair(),
        predicted_scaling=pod5.pod5_types.ShiftScalePair(), num_reads_since_mux_change=0,
        time_since_mux_change=0.0, open_pore_level=float(i), run_info=run_info,
        signal=rng.integers(-2000, 2000, n).astype(np.int16)))

with pod5.Writer(ref) as w:
    w.add_reads(reads)
w = pod5.Writer(out)
for r in reads:
    w.add_read(r)
if mode == "sigkill":
    print("ready", flush=True)
    time.sleep(60)
os._exit(0)
