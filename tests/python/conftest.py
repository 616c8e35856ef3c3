"""Set-up for the Python package's tests: the shared data folder, the escpod CLI (for the demux
comparison) and files written by the official writer (V5+ layouts).

Run after `pip install .` into .venv (the official pod5 package is in .venv too):
    ESCPOD_SHARED_DATA=../shared/data ESCPOD_BIN=build/src/cli/escpod .venv/bin/pytest tests/python
Tests that need the shared data fail (not skip) when it is missing.
"""
import datetime
import os
import pathlib
import uuid

import numpy as np
import pytest


def pytest_configure(config):
    # The parity checks read the official package's deprecated fields (tracked/predicted scaling,
    # mux-change counters) on purpose: its deprecation warnings (thousands a run) would bury any
    # warning of ours.
    config.addinivalue_line(
        "filterwarnings", "ignore:Call to deprecated function.*Scaling fields:DeprecationWarning")
    # scripts/python_asan.sh stages an ASan-built module first on PYTHONPATH: make sure that one,
    # not the module installed in .venv, is the one under test.
    expected = os.environ.get("ESCPOD_EXPECT_MODULE")
    if expected:
        import escpod

        found = pathlib.Path(escpod.__file__).parent.resolve()
        if found != pathlib.Path(expected).resolve():
            raise pytest.UsageError(f"escpod imported from {found}, expected {expected}")


def _env_path(name: str) -> pathlib.Path:
    value = os.environ.get(name)
    if not value:
        pytest.fail(f"{name} is not set (see tests/python/conftest.py)")
    return pathlib.Path(value)


@pytest.fixture(scope="session")
def shared_data() -> pathlib.Path:
    path = _env_path("ESCPOD_SHARED_DATA")
    if not (path / "pod5").is_dir():
        pytest.fail(f"shared test data missing: looked in {path}")
    return path


@pytest.fixture(scope="session")
def escpod_bin() -> pathlib.Path:
    path = _env_path("ESCPOD_BIN")
    if not path.exists():
        pytest.fail(f"escpod binary not found at {path}")
    return path


@pytest.fixture(scope="session")
def shared_pod5_files(shared_data):
    files = sorted(shared_data.rglob("*.pod5"))
    assert len(files) >= 10, f"expected the shared POD5 files under {shared_data}"
    return files


def make_run_info(pod5, acquisition_id="acq-1"):
    return pod5.RunInfo(
        acquisition_id=acquisition_id,
        acquisition_start_time=datetime.datetime(2024, 5, 6, 7, 8, 9, 123000, tzinfo=datetime.timezone.utc),
        adc_max=4095,
        adc_min=-4096,
        context_tags={"sample_frequency": "4000", "experiment_type": "rna"},
        experiment_name="exp",
        flow_cell_id="FAX00001",
        flow_cell_product_code="FLO-MIN004RA",
        protocol_name="proto",
        protocol_run_id="run-1",
        protocol_start_time=datetime.datetime(2024, 5, 6, 7, 0, 0, tzinfo=datetime.timezone.utc),
        sample_id="sample",
        sample_rate=4000,
        sequencing_kit="SQK-RNA004",
        sequencer_position="MN12345",
        sequencer_position_type="MinION",
        software="MinKNOW",
        system_name="host",
        system_type="linux",
        tracking_id={"run_id": "r1", "version": "5.0"},
    )


def make_reads(pod5, n, seed=7, n_run_infos=2):
    """`n` reads of module `pod5` with varied fields and V5+ levels."""
    rng = np.random.default_rng(seed)
    run_infos = [make_run_info(pod5, f"acq-{i}") for i in range(n_run_infos)]
    reasons = list(pod5.EndReasonEnum)
    reads = []
    for i in range(n):
        length = int(rng.integers(1, 250_000)) if i % 17 == 0 else int(rng.integers(1, 12_000))
        reads.append(
            pod5.Read(
                read_id=uuid.UUID(bytes=rng.bytes(16)),
                pore=pod5.Pore(channel=int(rng.integers(1, 3000)), well=int(rng.integers(1, 5)),
                               pore_type="r10" if i % 3 else "not_set"),
                calibration=pod5.Calibration(offset=float(rng.integers(-300, 300)), scale=float(np.float32(rng.random()))),
                read_number=i,
                start_sample=int(rng.integers(0, 1 << 40)),
                median_before=float(np.float32(rng.random() * 250)),
                end_reason=pod5.EndReason.from_reason_with_default_forced(reasons[i % len(reasons)]),
                run_info=run_infos[i % n_run_infos],
                num_minknow_events=int(rng.integers(0, 1000)),
                tracked_scaling=pod5.pod5_types.ShiftScalePair(float(np.float32(rng.random())), float(np.float32(rng.random()))),
                predicted_scaling=pod5.pod5_types.ShiftScalePair(),
                num_reads_since_mux_change=int(rng.integers(0, 100)),
                time_since_mux_change=float(np.float32(rng.random() * 10)),
                open_pore_level=float(np.float32(rng.random() * 200)),
                expected_open_pore_level=float(np.float32(rng.random() * 200)) if i % 2 else float("nan"),
                selected_read_level=float(np.float32(rng.random() * 100)),
                signal=rng.integers(-2000, 2000, size=length).astype(np.int16),
            )
        )
    return reads


@pytest.fixture(scope="session")
def official_written_file(tmp_path_factory):
    """A multi-batch file written by the official writer (reads table V7)."""
    import pod5

    path = tmp_path_factory.mktemp("official") / "official.pod5"
    with pod5.Writer(path) as w:
        w.add_reads(make_reads(pod5, 1500))
    return path
