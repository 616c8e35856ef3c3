#!/usr/bin/env bash
# Builds escapepod (Release) and runs every test: unit, golden and conformance against the
# official pod5 package (ctest), then the Python package's tests (pip install . into .venv,
# pytest tests/python). Usage: scripts/test.sh [extra ctest args]
#   BUILD_DIR (default build), CMAKE_ARGS: another build (CI's sanitizer build uses them);
#   ESCPOD_TEST_PYTHON=0 skips the Python package (on by default for the default build only).
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/setup.sh
BUILD=${BUILD_DIR:-build}
cmake -S . -B "$BUILD" -G Ninja -DCMAKE_BUILD_TYPE=Release ${CMAKE_ARGS:-} >/dev/null
cmake --build "$BUILD" -j "$(nproc)"
ctest --test-dir "$BUILD" --output-on-failure -j "$(nproc)" "$@"

if [[ ${ESCPOD_TEST_PYTHON:-$([[ $BUILD == build ]] && echo 1 || echo 0)} == 1 ]]; then
  echo "test: Python package (pip install . into .venv, then pytest tests/python)" >&2
  SHARED_DATA=$(grep -m1 '^ESCPOD_SHARED_DATA:' "$BUILD/CMakeCache.txt" | cut -d= -f2-)
  # --no-build-isolation: builds against .venv's pinned pyarrow/nanobind/scikit-build-core, in
  # build-py/ beside build/, so ccache reuses the objects of the build above.
  CXX=${CXX:-c++} .venv/bin/pip install -q --disable-pip-version-check --no-build-isolation .
  ESCPOD_SHARED_DATA="$SHARED_DATA" ESCPOD_BIN="$BUILD/src/cli/escpod" \
    .venv/bin/python -m pytest -q -p no:cacheprovider tests/python
fi
