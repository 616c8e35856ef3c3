#!/bin/bash
# Runs inside the bare root filesystem as an unprivileged user (tests/wheel/bare_debian.sh):
# install the wheel into a venv offline, run every command family and the Python API, and fail
# if any library resolves outside the venv or the manylinux policy's system libraries.
# Every command is echoed with its output, into the test log.
set -euo pipefail
in=$1
cd "$HOME"
run() { echo "\$ $*"; "$@"; }

run python3 -m venv venv
run venv/bin/pip install -q --disable-pip-version-check --no-index --find-links "$in/wheelhouse" "$in"/escpod-*.whl
export PATH=$HOME/venv/bin:$PATH
run command -v escpod
run escpod --version
run escpod --help

echo "== the demo's chain (simulate -> train -> demux -> evaluate) on the wheel's escpod"
run bash "$in/scripts/demo-run.sh" escpod demo

echo "== live decisions: the replay on the demo's reads and model; the read-until client's help"
run escpod live replay demo/test.pod5 --model demo/model.json -o live.csv
[[ $(($(wc -l < live.csv) - 1)) == 3000 ]] || { echo "live.csv: expected a row per read"; exit 1; }
run escpod live run --help > live_run_help.txt
grep -q -- --live-config live_run_help.txt || { echo "live run --help: not the client's help"; exit 1; }

echo "== CRF demux with a SeqTagger model folder on 180 real RNA004 reads"
run escpod demux "$in/real/yeast_trna_reads.pod5" --model "$in/real/b04_RNA004" --classifications crf.csv
run cmp crf.csv "$in/expected_crf.csv"
echo "crf.csv: identical to the CMake build's calls ($(($(wc -l < crf.csv) - 1)) reads)"

echo "== the POD5 commands, the report, bam-demux and model on the real reads"
reads=$in/real/yeast_trna_reads.pod5
mkdir -p runs && cp "$reads" runs/
run escpod index runs
run escpod view runs --include read_id,num_samples -o view.tsv
sed -n "2,11p" view.tsv | cut -f1 > ten.txt
run escpod filter runs --ids ten.txt -o ten.pod5
run escpod merge ten.pod5 "$in/real/multi_fast5_zip_v3.pod5" -o merged.pod5
run escpod repack merged.pod5 -o repacked
run escpod subset merged.pod5 --columns end_reason -o by_end_reason
run escpod summary repacked/merged.pod5
run escpod inspect read runs "$(sed -n 2p view.tsv | cut -f1)"
run escpod report --classifications crf.csv "$reads" -o report.html
run escpod bam-demux -b "$in/real/yeast_trna_mappings.bam" --classifications crf.csv -o tagged.bam
run escpod model info "$in/real/b04_RNA004"
run escpod recover ten.pod5
[[ $(($(wc -l < view.tsv) - 1)) == 180 && -s ten.pod5 && -s report.html && -s tagged.bam ]] || { echo "missing outputs"; exit 1; }

echo "== FAST5 (VBZ-compressed signal: the HDF5 filter from inside the wheel)"
run escpod convert fast5 "$in/real/multi_fast5_zip.fast5" -o converted.pod5
run escpod inspect summary converted.pod5

echo "== Python API"
run venv/bin/python "$in/smoke.py" "$in" demo converted.pod5

echo "== libraries: every ELF file of the wheel resolves inside the venv or to the policy's list"
system_ok='^/(usr/)?lib(64)?/(x86_64-linux-gnu/)?(libc|libm|libdl|librt|libpthread|libresolv|libutil|ld-linux-x86-64|libstdc\+\+|libgcc_s|libz)\.so'
bad=0
while IFS= read -r -d '' elf; do
  while read -r line; do
    case $line in
      *"not found"*) echo "UNRESOLVED in $elf: $line"; bad=1; continue ;;
      linux-vdso*|"") continue ;;
    esac
    path=$(awk '{ for (i = 1; i <= NF; i++) if ($i ~ /^\//) { print $i; exit } }' <<<"$line")
    [[ -z $path || $path == "$HOME"/venv/* || $path =~ $system_ok ]] && continue
    echo "OUTSIDE in $elf: $line"; bad=1
  done < <(ldd "$elf")
done < <(find venv/lib/python3*/site-packages/escpod venv/lib/python3*/site-packages/escpod.libs \
           -type f \( -name '*.so*' -o -path '*/_bin/*' \) -print0)
[[ $bad == 0 ]] || { echo "libraries outside the venv or the policy's list (above)"; exit 1; }
echo "ldd: all $(find venv/lib/python3*/site-packages/escpod venv/lib/python3*/site-packages/escpod.libs -type f \( -name '*.so*' -o -path '*/_bin/*' \) | wc -l) ELF files resolve inside the venv or to glibc/libstdc++/libgcc_s/libz"
