"""Shared set-up for conformance tests: the escpod binary, the shared data folder, scratch dirs.

CTest passes ESCPOD_BIN and ESCPOD_SHARED_DATA; tests that need the shared data fail (not skip)
when it is missing, naming where it was looked for.
"""
import os
import pathlib
import subprocess

import pytest


def _env_path(name: str) -> pathlib.Path:
    value = os.environ.get(name)
    if not value:
        pytest.fail(f"{name} is not set (run these tests through ctest)")
    return pathlib.Path(value)


@pytest.fixture(scope="session")
def escpod() -> pathlib.Path:
    path = _env_path("ESCPOD_BIN")
    if not path.exists():
        pytest.fail(f"escpod binary not found at {path}")
    return path


@pytest.fixture(scope="session")
def shared_data() -> pathlib.Path:
    path = _env_path("ESCPOD_SHARED_DATA")
    if not (path / "pod5").is_dir():
        pytest.fail(f"shared test data missing: looked in {path} (set -DESCPOD_SHARED_DATA)")
    return path


@pytest.fixture(scope="session")
def real_pod5_files(shared_data):
    files = sorted(shared_data.rglob("*.pod5"))
    assert len(files) >= 10, f"expected the shared POD5 files under {shared_data}"
    return files


@pytest.fixture(scope="session")
def rna_pod5(shared_data):
    """180 real RNA004 reads (escapepod's dRNA fixture), used by the CRF tests for real windows."""
    path = shared_data / "escapepod" / "drna" / "yeast_trna_reads.pod5"
    if not path.is_file():
        pytest.fail(f"real RNA004 reads missing: {path}")
    return path


def run(cmd, check=True, **kwargs):
    """Runs a command, returning CompletedProcess with text output."""
    result = subprocess.run([str(c) for c in cmd], capture_output=True, text=True, **kwargs)
    if check and result.returncode != 0:
        raise AssertionError(f"{cmd} exited {result.returncode}\nstderr:\n{result.stderr}")
    return result
