"""Helpers that read a POD5 with the official package and with escpod, into comparable rows."""
import math

import numpy as np
import pod5

from conftest import run

P = np.uint64(0x100000001B3)

# escpod view field -> function of an official pod5 ReadRecord.
FIELDS = {
    "read_id": lambda r: str(r.read_id),
    "channel": lambda r: str(r.pore.channel),
    "well": lambda r: str(r.pore.well),
    "read_number": lambda r: str(r.read_number),
    "start_sample": lambda r: str(r.start_sample),
    "num_samples": lambda r: str(r.num_samples),
    "end_reason": lambda r: r.end_reason.name,
    "end_reason_forced": lambda r: "true" if r.end_reason.forced else "false",
    "pore_type": lambda r: r.pore.pore_type,
    "median_before": lambda r: r.median_before,
    "num_minknow_events": lambda r: str(r.num_minknow_events),
    "calibration_offset": lambda r: r.calibration.offset,
    "calibration_scale": lambda r: r.calibration.scale,
    "run_info": lambda r: r.run_info.acquisition_id,
    "sample_rate": lambda r: str(r.run_info.sample_rate),
    "open_pore_level": lambda r: r.open_pore_level,
    "tracked_scaling_scale": lambda r: r.tracked_scaling.scale,
    "tracked_scaling_shift": lambda r: r.tracked_scaling.shift,
    "predicted_scaling_scale": lambda r: r.predicted_scaling.scale,
    "predicted_scaling_shift": lambda r: r.predicted_scaling.shift,
    "num_reads_since_mux_change": lambda r: str(r.num_reads_since_mux_change),
    "time_since_mux_change": lambda r: r.time_since_mux_change,
    "signal_hash": lambda r: signal_hash(r.signal),
}


def signal_hash(samples: np.ndarray) -> str:
    """The checksum escpod's `signal_hash` field prints (see records.hpp)."""
    if len(samples) == 0:
        return f"{0:016x}"
    values = samples.astype(np.int16).view(np.uint16).astype(np.uint64) + np.uint64(1)
    powers = np.empty(len(values), dtype=np.uint64)
    powers[0] = 1
    if len(values) > 1:
        powers[1:] = P
        with np.errstate(over="ignore"):
            powers = np.cumprod(powers, dtype=np.uint64)
    with np.errstate(over="ignore"):
        return f"{int(np.sum(values * powers, dtype=np.uint64)):016x}"


def same_value(ours: str, theirs) -> bool:
    if isinstance(theirs, str):
        return ours == theirs
    theirs = float(theirs)
    if math.isnan(theirs):
        return ours.lower() == "nan"
    # Both sides are float32 values; ours is printed as the shortest round-trip text.
    return np.float32(float(ours)) == np.float32(theirs)


def official_rows(path):
    with pod5.Reader(path) as reader:
        return {str(r.read_id): {k: f(r) for k, f in FIELDS.items()} for r in reader.reads()}


def escpod_rows(escpod, path):
    out = run([escpod, "view", path, "--include", ",".join(FIELDS)]).stdout
    lines = out.rstrip("\n").split("\n")
    header = lines[0].split("\t")
    assert header == list(FIELDS), header
    rows = {}
    for line in lines[1:]:
        cells = line.split("\t")
        rows[cells[0]] = dict(zip(header, cells))
    return rows


def assert_same_reads(escpod, path):
    theirs = official_rows(path)
    ours = escpod_rows(escpod, path)
    assert sorted(ours) == sorted(theirs), f"{path}: read ids differ"
    for read_id, want in theirs.items():
        got = ours[read_id]
        for field, value in want.items():
            assert same_value(got[field], value), (
                f"{path}: read {read_id} field {field}: escpod {got[field]!r}, pod5 {value!r}")
    return len(theirs)


def _same(a, b) -> bool:
    if isinstance(a, float) and isinstance(b, float) and math.isnan(a) and math.isnan(b):
        return True
    return a == b


def assert_rows_equal(a: dict, b: dict, what: str):
    """Two official_rows() results are identical (NaN equals NaN)."""
    assert sorted(a) == sorted(b), f"{what}: read ids differ"
    for read_id, row in a.items():
        for field, value in row.items():
            assert _same(value, b[read_id][field]), (
                f"{what}: read {read_id} field {field}: {value!r} vs {b[read_id][field]!r}")
