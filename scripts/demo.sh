#!/usr/bin/env bash
# The main job end to end on nothing but the repo: build escpod, then run the demo's chain
# (scripts/demo-run.sh: simulate a small barcoded direct-RNA run, train a DTW-SVM model on one
# part, demultiplex the other part into per-barcode POD5 files, score the calls).
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/setup.sh
BUILD=${BUILD_DIR:-build}
cmake -S . -B "$BUILD" -G Ninja -DCMAKE_BUILD_TYPE=Release >/dev/null
cmake --build "$BUILD" -j "$(nproc)" --target escpod
scripts/demo-run.sh "$BUILD/src/cli/escpod" "${DEMO_DIR:-demo-out}"
