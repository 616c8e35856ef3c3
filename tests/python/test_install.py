"""What `pip install` gives besides the module: the `escpod` command (python/escpod_launcher, which
runs the escpod program installed inside the package) and one version everywhere."""
import importlib.metadata
import os
import re
import subprocess
import sys
from pathlib import Path

import escpod

REPO = Path(__file__).resolve().parents[2]


def test_one_version_cmake_package_and_metadata():
    cmake = re.search(r"project\(escapepod VERSION ([0-9.]+)", (REPO / "CMakeLists.txt").read_text()).group(1)
    assert escpod.__version__ == cmake
    assert importlib.metadata.version("escpod") == cmake


def test_pip_installs_the_escpod_command_running_the_packaged_program(shared_data):
    command = Path(sys.executable).parent / "escpod"
    assert command.is_file(), f"pip did not install the escpod command into {command.parent}"
    packaged = Path(escpod.__file__).parent / "_bin"
    assert sorted(p.name for p in packaged.iterdir()) == ["escpod"]
    out = subprocess.run([command, "--version"], capture_output=True, text=True, check=True).stdout
    assert out.splitlines()[0] == f"escpod {escpod.__version__}"
    assert "libraries: Arrow" in out
    pod5 = shared_data / "pod5" / "multi_fast5_zip_v3.pod5"
    ours = subprocess.run([command, "view", pod5], capture_output=True, text=True, check=True).stdout
    built = subprocess.run([os.environ.get("ESCPOD_BIN", REPO / "build/src/cli/escpod"), "view", pod5],
                           capture_output=True, text=True, check=True).stdout
    assert ours == built and len(ours.splitlines()) == 11
    # Exit status and stderr are the program's own (the launcher replaces itself with it).
    bad = subprocess.run([command, "inspectt"], capture_output=True, text=True)
    assert bad.returncode == 2 and "did you mean" in bad.stderr, bad
