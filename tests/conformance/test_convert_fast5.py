"""escpod convert fast5 against the official `pod5 convert fast5` and the official test POD5s.

Every comparison reads both files with the official pod5 package: all read fields, calibration,
end reason, run info (every field, context tags and tracking id in order) and decoded signal.
"""
import math
import pathlib
import shutil
import subprocess
import sys

import h5py
import numpy as np
import pod5
import pytest
import vbz_h5py_plugin  # noqa: F401

from conftest import run

REPO = pathlib.Path(__file__).resolve().parents[2]
MAKE_FAST5 = REPO / "bench" / "tools" / "make_fast5.py"
POD5_BIN = pathlib.Path(sys.executable).parent / "pod5"
SINGLE_ID = "fe85b517-62ee-4a33-8767-41cab5d5ab39"

RUN_INFO_FIELDS = [
    "acquisition_id", "acquisition_start_time", "adc_max", "adc_min", "experiment_name",
    "flow_cell_id", "flow_cell_product_code", "protocol_name", "protocol_run_id",
    "protocol_start_time", "sample_id", "sample_rate", "sequencing_kit", "sequencer_position",
    "sequencer_position_type", "software", "system_name", "system_type",
]


@pytest.fixture(scope="module")
def fast5_dir(shared_data):
    d = shared_data / "pod5" / "fast5"
    assert (d / "multi_fast5_zip.fast5").is_file(), f"FAST5 test data missing in {d}"
    return d


def same_float(a, b):
    a, b = float(a), float(b)
    return (math.isnan(a) and math.isnan(b)) or np.float32(a) == np.float32(b)


def read_fields(r):
    return {
        "read_number": r.read_number, "start_sample": r.start_sample,
        "num_samples": r.num_samples, "channel": r.pore.channel, "well": r.pore.well,
        "pore_type": r.pore.pore_type, "end_reason": r.end_reason.name,
        "end_reason_forced": r.end_reason.forced,
        "num_minknow_events": r.num_minknow_events,
        "num_reads_since_mux_change": r.num_reads_since_mux_change,
        "run_info": r.run_info.acquisition_id,
    }


def float_fields(r):
    return {
        "median_before": r.median_before, "calibration_offset": r.calibration.offset,
        "calibration_scale": r.calibration.scale,
        "tracked_scaling_scale": r.tracked_scaling.scale,
        "tracked_scaling_shift": r.tracked_scaling.shift,
        "predicted_scaling_scale": r.predicted_scaling.scale,
        "predicted_scaling_shift": r.predicted_scaling.shift,
        "time_since_mux_change": r.time_since_mux_change,
        "open_pore_level": r.open_pore_level,
    }


def run_info_dict(ri):
    d = {k: getattr(ri, k) for k in RUN_INFO_FIELDS}
    d["context_tags"] = list(ri.context_tags.items())
    d["tracking_id"] = list(ri.tracking_id.items())
    return d


def assert_same_pod5(ours, theirs, expect_reads=None):
    """Every read of `theirs` is in `ours`, in the same order, with equal fields and signal."""
    with pod5.Reader(ours) as a, pod5.Reader(theirs) as b:
        ra, rb = list(a.reads()), list(b.reads())
        assert [str(r.read_id) for r in ra] == [str(r.read_id) for r in rb]
        if expect_reads is not None:
            assert len(ra) == expect_reads
        for x, y in zip(ra, rb):
            rid = str(x.read_id)
            assert read_fields(x) == read_fields(y), rid
            fx, fy = float_fields(x), float_fields(y)
            for k in fx:
                assert same_float(fx[k], fy[k]), (rid, k, fx[k], fy[k])
            assert run_info_dict(x.run_info) == run_info_dict(y.run_info), rid
            sx, sy = x.signal, y.signal
            assert sx.dtype == np.int16 and len(sx) == x.num_samples > 0, rid
            assert np.array_equal(sx, sy), rid
        return len(ra)


def official_convert(inputs, out, *extra):
    res = subprocess.run([str(POD5_BIN), "convert", "fast5", *map(str, inputs), "-o", str(out),
                          "-t", "2", *extra], capture_output=True, text=True)
    assert res.returncode == 0, res.stderr


def make_fast5(source, out, *args):
    subprocess.run([sys.executable, str(MAKE_FAST5), str(source), str(out), *args], check=True)


def no_leftovers(folder):
    return [p.name for p in pathlib.Path(folder).rglob("*") if p.is_file()]


def test_gzip_fast5_equals_official_converter(escpod, fast5_dir, tmp_path):
    src = fast5_dir / "multi_fast5_zip.fast5"
    ours, theirs = tmp_path / "ours.pod5", tmp_path / "theirs.pod5"
    run([escpod, "convert", "fast5", src, "-o", ours, "-t", "2"])
    official_convert([src], theirs)
    assert assert_same_pod5(ours, theirs, expect_reads=10) == 10


def test_matches_official_v3_test_file(escpod, fast5_dir, shared_data, tmp_path):
    ours = tmp_path / "ours.pod5"
    run([escpod, "convert", "fast5", fast5_dir / "multi_fast5_zip.fast5", "-o", ours])
    official = shared_data / "pod5" / "multi_fast5_zip_v3.pod5"
    # The v3 file was written by an older converter in the order of its input; compare by id.
    with pod5.Reader(ours) as a, pod5.Reader(official) as b:
        ra = {str(r.read_id): (read_fields(r), float_fields(r), run_info_dict(r.run_info),
                               r.signal.copy()) for r in a.reads()}
        rb = {str(r.read_id): (read_fields(r), float_fields(r), run_info_dict(r.run_info),
                               r.signal.copy()) for r in b.reads()}
    assert sorted(ra) == sorted(rb) and len(ra) == 10
    for rid in rb:
        (fa, xa, ia, sa), (fb, xb, ib, sb) = ra[rid], rb[rid]
        assert fa == fb, rid
        for k in xb:
            if k == "open_pore_level":
                continue  # not in the V3 layout
            assert same_float(xa[k], xb[k]), (rid, k)
        assert ia == ib, rid
        assert np.array_equal(sa, sb), rid
    assert ra["0000173c-bf67-44e7-9a9c-1ad0bc728e74"][0]["read_number"] == 1093
    assert ra["0000173c-bf67-44e7-9a9c-1ad0bc728e74"][3][:5].tolist() == [371, 370, 373, 333, 370]


def test_vbz_fast5_many_files_equal_official(escpod, fast5_dir, tmp_path):
    """VBZ-filtered signal (MinKNOW's layout), 3 copies of every read over 3 files."""
    f5 = tmp_path / "in"
    make_fast5(fast5_dir / "multi_fast5_zip.fast5", f5, "--copies", "3", "--files", "3")
    with h5py.File(f5 / "batch_0.fast5") as h:
        key = next(iter(h.keys()))
        assert "32020" in h[key]["Raw/Signal"]._filters  # really VBZ
    ours, theirs = tmp_path / "ours.pod5", tmp_path / "theirs.pod5"
    run([escpod, "convert", "fast5", f5, "-o", ours, "-t", "2"])
    official_convert(sorted(f5.glob("*.fast5")), theirs)
    # The official converter interleaves files by worker timing; compare as sets of reads.
    with pod5.Reader(theirs) as b:
        official_order = [str(r.read_id) for r in b.reads()]
    with pod5.Reader(ours) as a:
        ours_order = [str(r.read_id) for r in a.reads()]
    assert sorted(ours_order) == sorted(official_order) and len(ours_order) == 30
    sub_ours, sub_theirs = tmp_path / "o", tmp_path / "t"
    # Reorder the official output into our order through its own writer, then compare fully.
    with pod5.Reader(theirs) as b, pod5.Writer(sub_theirs.with_suffix(".pod5")) as w:
        by_id = {str(r.read_id): r.to_read() for r in b.reads()}
        w.add_reads([by_id[i] for i in ours_order])
    assert assert_same_pod5(ours, sub_theirs.with_suffix(".pod5"), expect_reads=30) == 30
    del sub_ours


@pytest.mark.parametrize("compression", ["vbz", "gzip"])
def test_multi_chunk_signal_decoded_by_hdf5(escpod, fast5_dir, tmp_path, compression):
    """Signal in several HDF5 chunks goes through HDF5's own filter pipeline (the VBZ filter
    registered by escpod, no HDF5_PLUGIN_PATH); the result equals the official converter's."""
    src = tmp_path / "chunked.fast5"
    make_fast5(fast5_dir / "multi_fast5_zip.fast5", src, "--chunk", "7000", "--compression", compression)
    ours, theirs = tmp_path / "ours.pod5", tmp_path / "theirs.pod5"
    env = {k: v for k, v in __import__("os").environ.items() if k != "HDF5_PLUGIN_PATH"}
    res = subprocess.run([str(escpod), "convert", "fast5", str(src), "-o", str(ours)],
                         capture_output=True, text=True, env=env)
    assert res.returncode == 0, res.stderr
    official_convert([src], theirs)
    assert assert_same_pod5(ours, theirs, expect_reads=10) == 10


def test_one_to_one_outputs(escpod, fast5_dir, tmp_path):
    f5 = tmp_path / "in"
    make_fast5(fast5_dir / "multi_fast5_zip.fast5", f5 / "sub", "--copies", "2", "--files", "2")
    shutil.copy(fast5_dir / "multi_fast5_zip.fast5", f5 / "zip.fast5")
    out, off = tmp_path / "out", tmp_path / "off"
    run([escpod, "convert", "fast5", f5, "-o", out, "--one-to-one", f5])
    official_convert([f5 / "zip.fast5", f5 / "sub" / "batch_0.fast5", f5 / "sub" / "batch_1.fast5"],
                     off, "--one-to-one", str(f5))
    names = sorted(str(p.relative_to(out)) for p in out.rglob("*.pod5"))
    assert names == sorted(str(p.relative_to(off)) for p in off.rglob("*.pod5"))
    assert names == ["sub/batch_0.pod5", "sub/batch_1.pod5", "zip.pod5"]
    for n in names:
        assert assert_same_pod5(out / n, off / n) == 10


def test_single_read_fast5(escpod, fast5_dir, tmp_path):
    """The official converter refuses single-read files; check our fields against h5py."""
    src = fast5_dir / f"{SINGLE_ID}.fast5"
    out = tmp_path / "single.pod5"
    run([escpod, "convert", "fast5", src, "-o", out])
    with h5py.File(src) as h:
        (name,) = list(h["Raw/Reads"].keys())
        raw = h["Raw/Reads"][name]
        ch = dict(h["UniqueGlobalKey/channel_id"].attrs)
        tracking = {k: v.decode() for k, v in h["UniqueGlobalKey/tracking_id"].attrs.items()}
        context = {k: v.decode() for k, v in h["UniqueGlobalKey/context_tags"].attrs.items()}
        signal = raw["Signal"][()]
        attrs = dict(raw.attrs)
    with pod5.Reader(out) as r:
        (read,) = list(r.reads())
        assert str(read.read_id) == SINGLE_ID
        assert read.read_number == attrs["read_number"] == 4295
        assert read.start_sample == attrs["start_time"]
        assert read.pore.well == attrs["start_mux"]
        assert read.pore.channel == int(ch["channel_number"]) == 28
        assert read.pore.pore_type == "not_set"
        assert np.float32(read.median_before) == np.float32(attrs["median_before"])
        assert read.calibration.offset == np.float32(ch["offset"])
        assert read.calibration.scale == np.float32(ch["range"] / ch["digitisation"])
        assert read.end_reason.name == "signal_positive"  # FAST5 5 -> POD5 4
        assert read.end_reason.forced is False
        assert np.array_equal(read.signal, signal) and len(signal) == 20
        ri = read.run_info
        assert ri.acquisition_id == tracking["run_id"]
        assert list(ri.tracking_id.items()) == list(tracking.items())
        assert list(ri.context_tags.items()) == list(context.items())
        assert ri.flow_cell_id == "FAL62557" and ri.flow_cell_product_code == "FLO-MIN1101"
        assert ri.sequencer_position == "GA20000" and ri.sequencer_position_type == "gridion"
        assert ri.sequencing_kit == "sqk-lsk109" and ri.sample_rate == 4000
        assert ri.adc_min == -4096 and ri.adc_max == 4095
        assert ri.acquisition_start_time.isoformat().startswith("2019-10-10T13:52:22")


# --- damaged inputs: exit 1, a message naming file and read, nothing written -------------------

READ0 = "0000173c-bf67-44e7-9a9c-1ad0bc728e74"


def damaged_copy(fast5_dir, tmp_path, damage):
    p = tmp_path / "damaged.fast5"
    shutil.copy(fast5_dir / "multi_fast5_zip.fast5", p)
    p.chmod(0o644)
    with h5py.File(p, "r+") as h:
        damage(h[f"read_{READ0}"])
    return p


def expect_failure(escpod, src, out_dir, *needles):
    out = out_dir / "out.pod5"
    res = run([escpod, "convert", "fast5", src, "-o", out], check=False)
    assert res.returncode == 1, res.stderr
    for n in needles:
        assert n in res.stderr, (n, res.stderr)
    assert no_leftovers(out_dir) == [], no_leftovers(out_dir)
    return res.stderr


def replace_chunk(g, payload):
    ds = g["Raw/Signal"]
    ds.id.write_direct_chunk((0,), payload, 0)


@pytest.mark.parametrize("damage,needles", [
    (lambda g: g["Raw"].attrs.__delitem__("read_number"), ["read_number"]),
    (lambda g: g["Raw"].attrs.__delitem__("start_time"), ["start_time"]),
    (lambda g: g["channel_id"].attrs.__delitem__("range"), ["range"]),
    (lambda g: g["Raw"].__delitem__("Signal"), ["Signal"]),
    (lambda g: g["Raw"].attrs.__setitem__("end_reason", np.uint8(77)), ["end_reason"]),
    (lambda g: replace_chunk(g, b"\x78\x9c garbage that is not deflate"), ["signal", "deflate"]),
    (lambda g: replace_chunk(g, b"\x01"), ["signal"]),
])
def test_damaged_read_fails_naming_file_and_read(escpod, fast5_dir, tmp_path, damage, needles):
    src = damaged_copy(fast5_dir, tmp_path, damage)
    out_dir = tmp_path / "out"
    out_dir.mkdir()
    err = expect_failure(escpod, src, out_dir, "damaged.fast5", *needles)
    assert READ0 in err or f"read_{READ0}" in err, err


def test_damaged_vbz_chunk(escpod, fast5_dir, tmp_path):
    src = tmp_path / "vbz.fast5"
    make_fast5(fast5_dir / "multi_fast5_zip.fast5", src)
    with h5py.File(src, "r+") as h:
        ds = h[f"read_{READ0}/Raw/Signal"]
        mask, raw = ds.id.read_direct_chunk((0,))
        bad = bytearray(raw)
        bad[len(bad) // 2:] = b"\xff" * (len(bad) - len(bad) // 2)
        ds.id.write_direct_chunk((0,), bytes(bad), mask)
    out_dir = tmp_path / "out"
    out_dir.mkdir()
    expect_failure(escpod, src, out_dir, "vbz.fast5", READ0, "VBZ")


@pytest.mark.parametrize("cut", [0, 100, 5000, 1_000_000, 2_404_000])
def test_truncated_fast5(escpod, fast5_dir, tmp_path, cut):
    src = tmp_path / "cut.fast5"
    src.write_bytes((fast5_dir / "multi_fast5_zip.fast5").read_bytes()[:cut])
    out_dir = tmp_path / "out"
    out_dir.mkdir()
    expect_failure(escpod, src, out_dir, "cut.fast5")


def test_not_fast5_and_existing_output(escpod, fast5_dir, tmp_path):
    out_dir = tmp_path / "out"
    out_dir.mkdir()
    txt = tmp_path / "x.fast5"
    txt.write_text("not hdf5")
    expect_failure(escpod, txt, out_dir, "x.fast5", "HDF5")
    out = out_dir / "exists.pod5"
    out.write_bytes(b"keep")
    res = run([escpod, "convert", "fast5", fast5_dir / "multi_fast5_zip.fast5", "-o", out],
              check=False)
    assert res.returncode == 1 and out.read_bytes() == b"keep"


def test_uncompressed_output_and_directory_output(escpod, fast5_dir, tmp_path):
    src = fast5_dir / "multi_fast5_zip.fast5"
    theirs = tmp_path / "theirs.pod5"
    official_convert([src], theirs)
    out = tmp_path / "outdir"
    out.mkdir()
    run([escpod, "convert", "fast5", src, "-o", out, "--compression", "none", "-t", "1"])
    assert sorted(p.name for p in out.iterdir()) == ["output.pod5"]  # as the official tool names it
    assert assert_same_pod5(out / "output.pod5", theirs, expect_reads=10) == 10


@pytest.mark.parametrize("compression", ["vbz", "gzip"])
def test_randomly_corrupted_signal_chunks(escpod, fast5_dir, tmp_path, compression):
    """Bounded randomized corruption (fixed seed) of stored signal chunks, the bytes escpod
    decodes itself: each run either converts (a flip may still decode) or fails with exit 1
    naming file and read and leaving nothing; never a crash. Whole-file corruption is not
    randomized here: it reaches libhdf5's own parser, which has known memory errors on mutated
    files (see tests/fuzz/fast5_fuzz.cpp)."""
    rng = np.random.default_rng(20261201)
    base = tmp_path / "base.fast5"
    make_fast5(fast5_dir / "multi_fast5_zip.fast5", base, "--compression", compression)
    with h5py.File(base) as h:
        names = list(h.keys())
    outcomes = {0: 0, 1: 0}
    for case in range(12):
        src = tmp_path / f"c{case}.fast5"
        shutil.copy(base, src)
        name = names[int(rng.integers(len(names)))]
        with h5py.File(src, "r+") as h:
            ds = h[name]["Raw/Signal"]
            mask, raw = ds.id.read_direct_chunk((0,))
            raw = bytearray(raw)
            for _ in range(int(rng.integers(1, 6))):
                pos = int(rng.integers(len(raw)))
                raw[pos] ^= int(rng.integers(1, 256))
            if case % 3 == 0:
                raw = raw[: int(rng.integers(1, len(raw)))]
            ds.id.write_direct_chunk((0,), bytes(raw), mask)
        out_dir = tmp_path / f"out{case}"
        out_dir.mkdir()
        res = run([escpod, "convert", "fast5", src, "-o", out_dir / "o.pod5"], check=False)
        assert res.returncode in (0, 1), (case, res.returncode, res.stderr)
        outcomes[res.returncode] += 1
        if res.returncode == 1:
            assert src.name in res.stderr and name[len("read_"):] in res.stderr, res.stderr
            assert no_leftovers(out_dir) == []
        else:
            with pod5.Reader(out_dir / "o.pod5") as r:
                assert sum(1 for _ in r.reads()) == 10
    assert outcomes[1] >= 4, outcomes  # truncations at least always fail
