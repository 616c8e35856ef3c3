#!/usr/bin/env bash
# Installs everything a fresh Debian 12 machine needs to build, test and benchmark escapepod.
# Idempotent: re-running it only installs what is missing.
#   Debian packages: compilers' libraries (zstd, oneTBB, CLI11, nlohmann-json, fmt, GoogleTest,
#                    Google Benchmark, flatbuffers), ninja.
#   Python (.venv):  pinned packages from requirements.txt, among them pyarrow, whose wheel
#                    carries the Arrow C++ headers and libraries we link against, and the
#                    official pod5 package the conformance tests compare with.
set -euo pipefail
cd "$(dirname "$0")/.."

DEB_PACKAGES=(
  build-essential cmake ninja-build pkg-config python3-venv
  libzstd-dev libtbb-dev libcli11-dev nlohmann-json3-dev libfmt-dev
  libgtest-dev libgmock-dev libbenchmark-dev libflatbuffers-dev zlib1g-dev flatbuffers-compiler
  clang libclang-rt-14-dev
  libonnx-dev libprotobuf-dev libdnnl-dev libsvm-dev
)

missing=()
for p in "${DEB_PACKAGES[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if ((${#missing[@]})); then
  echo "setup: installing Debian packages: ${missing[*]}" >&2
  SUDO=""; [[ $(id -u) -ne 0 ]] && SUDO="sudo"
  $SUDO apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
fi

PYTHON=${PYTHON:-python3}
if [[ ! -x .venv/bin/python ]]; then
  echo "setup: creating .venv" >&2
  "$PYTHON" -m venv .venv
fi
if ! .venv/bin/python -m pip freeze 2>/dev/null | sort | diff -q - <(grep -v '^#' requirements.txt | sort) >/dev/null; then
  echo "setup: installing pinned Python packages" >&2
  .venv/bin/python -m pip install -q --disable-pip-version-check -r requirements.txt
fi
# Unversioned libarrow.so names to link against (the wheel ships only versioned ones).
.venv/bin/python -c "import pyarrow; pyarrow.create_library_symlinks()"
echo "setup: ok" >&2
