#!/usr/bin/env bash
# Installs everything a fresh Debian 12 machine needs to build, test and benchmark escapepod.
# Idempotent: re-running it only installs what is missing.
#
# Debian packages are installed with --no-install-recommends, so every package a CMake config
# needs at configure time is named here even when its -dev package only recommends it.
#
# Dependency audit (every find_package, pkg_check_modules, find_library, find_program, third-party
# header and tool that the build, tests and benchmarks use -> the package that provides it):
#   compilers, make, libstdc++, OpenMP (gcc's libgomp)  build-essential
#   cmake (3.25), ctest                                 cmake
#   Ninja generator                                     ninja-build
#   find_package(PkgConfig)                             pkg-config
#   python3 -m venv (.venv)                             python3-venv
#   find_package(Threads)                               libc6-dev (build-essential)
#   find_package(TBB)            <tbb/...>              libtbb-dev
#   find_package(fmt)            <fmt/...>              libfmt-dev
#   find_package(CLI11)          <CLI/...>              libcli11-dev
#   find_package(nlohmann_json)  <nlohmann/json.hpp>    nlohmann-json3-dev
#   find_package(ZLIB)           <zlib.h>               zlib1g-dev
#   pkg_check_modules(libzstd)   <zstd.h>               libzstd-dev
#   find_program(flatc), flatbuffers headers            flatbuffers-compiler, libflatbuffers-dev
#   find_package(Protobuf)                              libprotobuf-dev
#   find_package(ONNX CONFIG)    <onnx/...>             libonnx-dev
#   find_package(dnnl CONFIG)    <oneapi/dnnl/...>      libdnnl-dev, and ocl-icd-opencl-dev:
#                                dnnl-config.cmake calls find_package(OpenCL) REQUIRED (Debian
#                                builds oneDNN with its OpenCL runtime); libdnnl-dev only
#                                *recommends* it, so --no-install-recommends dropped it.
#   find_library(svm)            <svm.h>                libsvm-dev
#   find_package(tomlplusplus CONFIG) <toml++/toml.h>   libtomlplusplus-dev (SeqTagger/bonito config.toml)
#   find_package(OpenSSL)        <openssl/evp.h>        libssl-dev (SHA-256 pin of a CRF bundle's CNN)
#   find_package(HDF5 COMPONENTS C) <hdf5.h> (FAST5)    libhdf5-dev
#   HDF5 VBZ filter plugin (FAST5 signal; loaded from   libvbz-hdf-plugin-dev
#     /usr/lib/<triplet>/hdf5/plugins at run time)
#   pkg_check_modules(htslib)    <htslib/sam.h>         libhts-dev (bam-filter: BAM/SAM/CRAM reading)
#   samtools (bam-filter benchmark's two-step peer)    samtools
#   find_package(GTest)          <gtest/gmock>          libgtest-dev, libgmock-dev
#   find_package(benchmark)      <benchmark/...>        libbenchmark-dev
#   find_library(edlib) <edlib.h> (crf_bench baseline)  libedlib-dev
#   find_library(wfa2) <wfa2lib/...> (crf_bench base.)  libwfa2-dev
#   clang++ (fuzz targets), libFuzzer/ASan runtimes     clang, libclang-rt-14-dev
#   compiler cache (used when found; optional)          ccache
#   find_package(CUDAToolkit), nvcc (optional)          the CUDA toolkit of the machine image
#                                                       (not a Debian package; configured only
#                                                       with -DESCPOD_ENABLE_CUDA=ON)
#   Arrow C++ and Parquet headers/libraries             pyarrow wheel (requirements.txt)
#   tmux (progress-bar test in a real terminal)         tmux
#   strace (test: each model file opened once a run)    strace
#   mmdebstrap (the wheel's bare-Debian test:           mmdebstrap
#     tests/wheel/bare_debian.sh)
#   headless browser (report screenshot test)          chromium
#   official pod5 (conformance), escapepod (bench),     requirements.txt, in .venv
#   pytest, numpy, h5py, pysam (bam-filter tests),
#   onnx, onnxruntime (CRF bundle fixture, parity and benchmark)
#   torch (the torch_crf_reference.npz fixture,         requirements-torch.txt, in a separate
#   PyTorch benchmark; never installed by this script)  venv made by hand (GBs of nvidia-*)
set -euo pipefail
cd "$(dirname "$0")/.."

DEB_PACKAGES=(
  build-essential cmake ninja-build pkg-config python3-venv
  libzstd-dev libtbb-dev libcli11-dev nlohmann-json3-dev libfmt-dev
  libgtest-dev libgmock-dev libbenchmark-dev libflatbuffers-dev zlib1g-dev flatbuffers-compiler
  clang libclang-rt-14-dev ccache
  libonnx-dev libprotobuf-dev libdnnl-dev ocl-icd-opencl-dev libsvm-dev
  libtomlplusplus-dev libssl-dev
  libhdf5-dev libvbz-hdf-plugin-dev
  libhts-dev samtools
  libedlib-dev libwfa2-dev
  tmux chromium mmdebstrap strace
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
# requirements-live.txt (escpod.live: grpcio, minknow-api, readfish and what they import) is
# installed with --no-deps: readfish's metadata asks for readfish[all] (mappy, ONT's basecall
# client), none of which escpod.live imports; every package it needs is pinned in the two files.
if ! .venv/bin/python -m pip freeze --exclude escpod 2>/dev/null | sort | diff -q - <(cat requirements.txt requirements-live.txt | grep -v '^#' | sort) >/dev/null; then
  echo "setup: installing pinned Python packages" >&2
  .venv/bin/python -m pip install -q --disable-pip-version-check -r requirements.txt
  .venv/bin/python -m pip install -q --disable-pip-version-check --no-deps -r requirements-live.txt
fi
# Unversioned libarrow.so names to link against (the wheel ships only versioned ones).
.venv/bin/python -c "import pyarrow; pyarrow.create_library_symlinks()"
echo "setup: ok" >&2
