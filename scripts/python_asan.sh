#!/usr/bin/env bash
# Runs the Python package's tests (tests/python) against an escpod._core built with
# AddressSanitizer + UBSan (the flags of CI's ASan stage), without touching the module installed
# in .venv: the module is built in $BUILD_DIR (default build-asan, CI's ASan build folder, so its
# libraries are reused) and staged with the package's Python files in $BUILD_DIR/python-asan,
# which goes first on PYTHONPATH. The interpreter is not instrumented, so the ASan runtime is
# preloaded (it must come first, with libstdc++); leak detection is off (CPython and numpy keep allocations
# alive to exit on purpose). The escpod CLI the demux tests compare against is the Release one
# (ESCPOD_BIN, default build/src/cli/escpod): it is not what is under test here.
# Usage: scripts/python_asan.sh [pytest args]     (after scripts/setup.sh; the shared data path
# comes from build/CMakeCache.txt or ESCPOD_SHARED_DATA)
set -euo pipefail
cd "$(dirname "$0")/.."
BUILD=${BUILD_DIR:-build-asan}
SHARED_DATA=${ESCPOD_SHARED_DATA:-$(grep -m1 '^ESCPOD_SHARED_DATA:' build/CMakeCache.txt | cut -d= -f2-)}
cmake -S . -B "$BUILD" -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo -DESCPOD_SANITIZE=address,undefined \
  -DESCPOD_BUILD_BENCH=OFF -DESCPOD_BUILD_PYTHON=ON -DPython_EXECUTABLE="$PWD/.venv/bin/python" >/dev/null
cmake --build "$BUILD" -j "${JOBS:-$(nproc)}" --target _core

STAGE="$BUILD/python-asan"
rm -rf "$STAGE"
mkdir -p "$STAGE/escpod"
cp python/escpod/*.py "$STAGE/escpod/"
cp -r python/escpod/live "$STAGE/escpod/"
cp "$BUILD"/src/python/_core*.so "$STAGE/escpod/"

# The CLI the demux tests run must not inherit the preload (an uninstrumented binary with the ASan
# runtime preloaded hung in the demux test): a wrapper drops it.
CLI=$(realpath "${ESCPOD_BIN:-build/src/cli/escpod}")
printf '#!/bin/sh\nunset LD_PRELOAD ASAN_OPTIONS UBSAN_OPTIONS\nexec "%s" "$@"\n' "$CLI" > "$STAGE/escpod-cli"
chmod +x "$STAGE/escpod-cli"
# The package's own program (what pip's `escpod` command runs: site-packages/escpod/_bin/escpod)
# is the same wrapper, so tests/python/test_install.py finds it in the staged package.
mkdir -p "$STAGE/escpod/_bin"
cp "$STAGE/escpod-cli" "$STAGE/escpod/_bin/escpod"

# libstdc++ is preloaded too: the interpreter does not link it, and ASan's __cxa_throw
# interceptor, set up at start, must find the real one (else the first C++ throw aborts with
# "CHECK failed: ... real___cxa_throw").
PRELOAD="$(gcc -print-file-name=libasan.so) $(gcc -print-file-name=libstdc++.so)"
echo "python-asan: tests/python against $STAGE/escpod (LD_PRELOAD=$PRELOAD)" >&2
env LD_PRELOAD="$PRELOAD" \
  ASAN_OPTIONS="detect_leaks=0:abort_on_error=1:strict_init_order=1" \
  UBSAN_OPTIONS="print_stacktrace=1:halt_on_error=1" \
  PYTHONPATH="$STAGE${PYTHONPATH:+:$PYTHONPATH}" \
  ESCPOD_SHARED_DATA="$SHARED_DATA" ESCPOD_BIN="$STAGE/escpod-cli" \
  ESCPOD_EXPECT_MODULE="$STAGE/escpod" \
  .venv/bin/python -m pytest -q -p no:cacheprovider tests/python "$@"
