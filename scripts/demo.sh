#!/usr/bin/env bash
# The main job on data that ships with the repo: build escpod, write a small POD5 with the
# library (examples/write_and_read.cpp), then inspect it and view its reads.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/setup.sh
BUILD=${BUILD_DIR:-build}
cmake -S . -B "$BUILD" -G Ninja -DCMAKE_BUILD_TYPE=Release >/dev/null
cmake --build "$BUILD" -j "$(nproc)" --target escpod write_and_read
OUT=${DEMO_DIR:-demo-out}
mkdir -p "$OUT"
"$BUILD/examples/write_and_read" "$OUT/example.pod5" 20 | head -n 5
echo "..."
"$BUILD/src/cli/escpod" inspect "$OUT/example.pod5"
"$BUILD/src/cli/escpod" view "$OUT/example.pod5" --include read_id,channel,num_samples,end_reason,signal_hash | head -n 6
