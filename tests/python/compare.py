"""Field-by-field comparison of records read by escpod and by the official pod5 package."""
import math

import numpy as np

FIELDS = [
    "read_number", "start_sample", "num_samples", "median_before", "num_minknow_events",
    "num_reads_since_mux_change", "time_since_mux_change", "open_pore_level",
    "expected_open_pore_level", "selected_read_level", "sample_count", "byte_count",
    "end_reason_index", "calibration_digitisation", "calibration_range",
]


def same(a, b) -> bool:
    if isinstance(a, float) and isinstance(b, float) and math.isnan(a) and math.isnan(b):
        return True
    return type(a) is type(b) and a == b


def dataclass_values(obj):
    return {k: getattr(obj, k) for k in obj.__dataclass_fields__}


def assert_same_record(ours, theirs, where=""):
    assert ours.read_id == theirs.read_id, where
    rid = f"{where} read {theirs.read_id}"
    for name in FIELDS:
        a, b = getattr(ours, name), getattr(theirs, name)
        assert same(a, b), f"{rid}: {name}: ours {a!r} official {b!r}"
    for name in ("pore", "calibration", "tracked_scaling", "predicted_scaling"):
        a, b = dataclass_values(getattr(ours, name)), dataclass_values(getattr(theirs, name))
        assert a.keys() == b.keys()
        for k in a:
            assert same(a[k], b[k]), f"{rid}: {name}.{k}: ours {a[k]!r} official {b[k]!r}"
    assert ours.end_reason.name == theirs.end_reason.name, rid
    assert ours.end_reason.reason.value == theirs.end_reason.reason.value, rid
    assert ours.end_reason.forced is theirs.end_reason.forced, rid
    a, b = dataclass_values(ours.run_info), dataclass_values(theirs.run_info)
    assert a == b, f"{rid}: run_info differs"
    assert repr(a["acquisition_start_time"]) == repr(b["acquisition_start_time"])
    sa, sb = ours.signal, theirs.signal
    assert sa.dtype == np.int16 and np.array_equal(sa, sb), f"{rid}: signal differs"
    pa_a, pa_b = ours.signal_pa, theirs.signal_pa
    assert pa_a.dtype == pa_b.dtype and np.array_equal(pa_a, pa_b), f"{rid}: signal_pa differs"
