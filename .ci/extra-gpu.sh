#!/usr/bin/env bash
# CI: the CUDA configuration of the GPU layer. Configures a CUDA build (sm_90), builds only the
# prep-tape targets with warnings as errors (every .cu file through nvcc, every .cpp through
# the host compiler), and runs the test binaries: the CPU tests must pass and, on a machine
# without a GPU, the GPU tests report themselves as skipped and the binary exits 0. Fails,
# saying why, when nvcc is missing. About two minutes on 2 cores.
set -euo pipefail
cd "$(dirname "$0")/.."

NVCC=${CUDACXX:-$(command -v nvcc || true)}
if [[ -z $NVCC && -x /usr/local/cuda/bin/nvcc ]]; then NVCC=/usr/local/cuda/bin/nvcc; fi
if [[ -z $NVCC ]]; then
  echo "extra-gpu: nvcc not found (looked at \$CUDACXX, PATH and /usr/local/cuda/bin/nvcc):" \
       "the CUDA configuration cannot be compiled; install the CUDA toolkit" >&2
  exit 1
fi
echo "extra-gpu: $("$NVCC" --version | tail -1)"

BUILD=${BUILD_DIR:-build-ci-gpu}
cmake -S . -B "$BUILD" -G Ninja -DCMAKE_BUILD_TYPE=Release \
  -DESCPOD_ENABLE_CUDA=ON -DESCPOD_BUILD_BENCH=ON -DESCPOD_BUILD_TESTS=ON \
  -DCMAKE_CUDA_COMPILER="$NVCC" -DCMAKE_CUDA_ARCHITECTURES=90 >/dev/null
cmake --build "$BUILD" -j "$(nproc)" \
  --target escpod_gpu gpu_test gpu_cuda_test prep_tape_bench prep_tape_gpu_bench

"$BUILD/tests/unit/gpu/gpu_test" --gtest_brief=1
"$BUILD/tests/unit/gpu/gpu_cuda_test"
echo "extra-gpu: ok"
