#!/usr/bin/env bash
# The wheel on a bare system, as a user without root: makes a minimal Debian 12 root filesystem
# (mmdebstrap, minbase + python3 + python3-venv: nothing else of ours), copies in the wheel, a
# wheelhouse of its dependencies (downloaded here first, so the install inside is offline) and a
# few real data files, then runs tests/wheel/in_root.sh there as an unprivileged user: venv,
# pip install, every command family, the Python API, and a check that no library resolves
# outside the venv or the manylinux policy's system libraries. Needs root on this machine (to
# build the root filesystem and chroot), not inside it.
# Usage: tests/wheel/bare_debian.sh dist/escpod-*.whl SHARED_DATA build/src/cli/escpod
#   (the last: the CMake build's escpod, whose CRF calls the wheel's must equal byte for byte)
set -euo pipefail
[[ $# == 3 ]] || { echo "usage: $0 WHEEL SHARED_DATA CMAKE_BUILT_ESCPOD" >&2; exit 2; }
repo=$(cd "$(dirname "$0")/../.." && pwd)
wheel=$(realpath "$1")
shared=$(realpath "$2")
reference=$(realpath "$3")
for f in "$wheel" "$shared/seqtagger/b04_RNA004/config.toml" "$shared/escapepod/drna/yeast_trna_reads.pod5" \
         "$shared/pod5/fast5/multi_fast5_zip.fast5" "$shared/pod5/multi_fast5_zip_v3.pod5"; do
  [[ -e $f ]] || { echo "bare_debian: missing $f" >&2; exit 1; }
done
work=$(mktemp -d /tmp/escpod-bare.XXXXXX)
root=$work/root
cleanup() {
  while mountpoint -q "$root/proc"; do umount "$root/proc" || return; done
  rm -rf --one-file-system "$work"  # never into a mount left behind
}
trap cleanup EXIT

echo "== wheelhouse: the wheel's dependencies at the versions requirements.txt pins"
pins=()
for p in numpy pyarrow packaging; do pins+=("$(grep -m1 -i "^$p==" "$repo/requirements.txt")"); done
"$repo/.venv/bin/pip" download -q --disable-pip-version-check --only-binary=:all: -d "$work/wheelhouse" "${pins[@]}"
ls "$work/wheelhouse"

echo "== root filesystem: Debian 12 minbase + python3 + python3-venv (mmdebstrap)"
mmdebstrap --quiet --variant=minbase --include=python3,python3-venv bookworm "$root" \
  "${ESCPOD_DEBIAN_MIRROR:-http://deb.debian.org/debian}"
chroot "$root" dpkg-query -W -f='${binary:Package} ${Version}\n' python3 libc6 libstdc++6 | sed 's/^/  /'

in=$root/opt/escpod-test
mkdir -p "$in/data/barcodes" "$in/scripts" "$in/real"
cp "$wheel" "$in/"
cp -r "$work/wheelhouse" "$in/"
cp "$repo/scripts/demo-run.sh" "$in/scripts/"
cp "$repo/data/barcodes/escpod_demo4.csv" "$in/data/barcodes/"
cp "$repo/tests/wheel/in_root.sh" "$repo/tests/wheel/smoke.py" "$in/"
cp -r "$shared/seqtagger/b04_RNA004" "$in/real/"
cp "$shared/escapepod/drna/yeast_trna_reads.pod5" "$shared/escapepod/drna/yeast_trna_mappings.bam" \
   "$shared/pod5/fast5/multi_fast5_zip.fast5" \
   "$shared/pod5/multi_fast5_zip_v3.pod5" "$in/real/"
"$reference" demux "$shared/escapepod/drna/yeast_trna_reads.pod5" --model "$shared/seqtagger/b04_RNA004" \
  --classifications "$in/expected_crf.csv" -q
chmod -R a+rX "$in"

mount -t proc proc "$root/proc"
chroot "$root" useradd --create-home --uid 4242 --shell /bin/bash user
echo "== as $(chroot --userspec=4242:4242 "$root" id) inside the root filesystem"
chroot --userspec=4242:4242 "$root" /usr/bin/env -i HOME=/home/user LANG=C.UTF-8 \
  PATH=/usr/local/bin:/usr/bin:/bin /bin/bash /opt/escpod-test/in_root.sh /opt/escpod-test
echo "bare_debian: passed"
