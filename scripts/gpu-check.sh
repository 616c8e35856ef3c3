#!/usr/bin/env bash
# The prepared GPU check for a lent GPU machine (one H200, 16 cores): builds the CUDA
# configuration in its own build folder (Release, sm_90, only the prep-tape targets), runs the
# GPU tests, the CPU prep-tape tests and the GPU benchmark, each under its own time limit, and
# finishes within 8 minutes. Logs (one per step, plus summary.txt and the gtest XML) go to $OUT
# when it is set, else to $BUILD_DIR/logs. Exit status: 0 when every step passed and the GPU
# tests really ran (a run where they were skipped counts as a failure here).
#   Needs what the normal build needs (scripts/setup.sh: Debian packages and .venv with pyarrow).
#   Usage: scripts/gpu-check.sh            BUILD_DIR=... CUDA_ARCH=... to override
set -uo pipefail
cd "$(dirname "$0")/.."
BUILD=${BUILD_DIR:-build-gpu-check}
ARCH=${CUDA_ARCH:-90}
LOGS=${OUT:-$BUILD/logs}
mkdir -p "$LOGS"
SUMMARY="$LOGS/summary.txt"
: > "$SUMMARY"
t0=$(date +%s)
failed=0

note() { echo "$*" | tee -a "$SUMMARY"; }

# step NAME LIMIT_S CMD...: runs CMD with a time limit, its output in $LOGS/NAME.log.
step() {
  local name=$1 limit=$2
  shift 2
  local s=$(date +%s)
  echo "== $name (limit ${limit}s)"
  timeout --kill-after=10 "$limit" "$@" > "$LOGS/$name.log" 2>&1
  local rc=$?
  tail -n 25 "$LOGS/$name.log"
  note "$name: rc=$rc in $(( $(date +%s) - s ))s"
  if [[ $rc -ne 0 ]]; then failed=1; fi
  return $rc
}

NVCC=${CUDACXX:-$(command -v nvcc || true)}
[[ -z $NVCC && -x /usr/local/cuda/bin/nvcc ]] && NVCC=/usr/local/cuda/bin/nvcc
if [[ -z $NVCC ]]; then
  note "gpu-check: nvcc not found (PATH, \$CUDACXX, /usr/local/cuda/bin)"
  exit 1
fi
[[ -x .venv/bin/python ]] || note "gpu-check: warning: no .venv (scripts/setup.sh); configure needs pyarrow for Arrow C++"

{ nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv 2>&1 || true; "$NVCC" --version | tail -2; \
  echo "commit $(git rev-parse --short HEAD 2>/dev/null || echo unknown)"; } > "$LOGS/machine.log"
cat "$LOGS/machine.log"

step configure 150 cmake -S . -B "$BUILD" -G Ninja -DCMAKE_BUILD_TYPE=Release \
  -DESCPOD_ENABLE_CUDA=ON -DESCPOD_BUILD_TESTS=ON -DESCPOD_BUILD_BENCH=ON \
  -DCMAKE_CUDA_COMPILER="$NVCC" -DCMAKE_CUDA_ARCHITECTURES="$ARCH" || { note "gpu-check: FAILED (configure)"; exit 1; }
step build 240 cmake --build "$BUILD" -j "$(nproc)" --target gpu_test gpu_cuda_test prep_tape_gpu_bench \
  || { note "gpu-check: FAILED (build)"; exit 1; }

step gpu_cuda_test 180 "$BUILD/tests/unit/gpu/gpu_cuda_test" --gtest_output="xml:$LOGS/gpu_cuda_test.xml"
if grep -q "SKIPPED" "$LOGS/gpu_cuda_test.log"; then
  note "gpu-check: the GPU tests were skipped (no usable device?): see gpu_cuda_test.log"
  failed=1
fi
step gpu_test 60 "$BUILD/tests/unit/gpu/gpu_test" --gtest_output="xml:$LOGS/gpu_test.xml"
step prep_tape_gpu_bench 120 "$BUILD/bench/kernels/prep_tape/prep_tape_gpu_bench"

note "gpu-check: $([[ $failed -eq 0 ]] && echo passed || echo FAILED) in $(( $(date +%s) - t0 ))s; logs in $LOGS"
exit $failed
