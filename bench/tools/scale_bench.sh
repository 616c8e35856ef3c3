#!/usr/bin/env bash
# How `escpod demux` time and peak memory grow with the number of reads and with the number of
# barcodes (issue 6), on runs made by `escpod simulate` (synthetic 9-mer table, the demo's 150-nt
# adapter). Prints one Markdown table row per run; bench/results/scale.md has the numbers.
#
#   bench/tools/scale_bench.sh [BUILD_DIR] [WORK_DIR]
#   READS="10000 100000 1000000" BARCODES="4 12 48 96 384" bench/tools/scale_bench.sh build
#
# Reads axis: 4 barcodes, one model trained on 2000 reads, demux of N fresh reads.
# Barcodes axis: B barcodes (synthetic:B), a model trained on TRAIN_PER_BARCODE reads per
# barcode, demux of BC_READS fresh reads. Each row: wall seconds, CPU seconds (user + system),
# reads per wall second, reads per CPU second, peak RSS (GNU time), and the evaluation against
# the simulator's truth. Inputs are deleted after each run unless KEEP=1 (1M reads are ~15 GB);
# kept inputs are reused. DEMUX_ARGS adds options to every demux run (e.g. "--memory-mib 8").
set -euo pipefail
ROOT=$(cd "$(dirname "$0")/../.." && pwd)
BUILD=${1:-build}
WORK=${2:-/tmp/escpod-scale}
ESCPOD=${ESCPOD:-$ROOT/$BUILD/src/cli/escpod}  # or a copy, to keep building while it runs
[[ -x $ESCPOD ]] || { echo "no escpod at $ESCPOD (build it first)" >&2; exit 1; }
THREADS=${THREADS:-$(nproc)}
READS=${READS-"10000 100000 1000000"}  # empty: skip the axis
BARCODES=${BARCODES-"4 12 48 96 384"}
BC_READS=${BC_READS:-20000}
TRAIN_PER_BARCODE=${TRAIN_PER_BARCODE:-20}
ADAPTER=$(sed -n 's/^ADAPTER=//p' "$ROOT/scripts/demo-run.sh")
mkdir -p "$WORK"
cd "$WORK"

sim() {  # sim OUT READS BARCODES SEED
  "$ESCPOD" simulate -o "$1" --reads "$2" --kmer-model synthetic:9 --barcodes "synthetic:$3" \
    --adapter "$ADAPTER" --seed "$4" -t "$THREADS" -f -q
}

# demux_row AXIS_VALUE MODEL INPUT: one table row.
demux_row() {
  local label=$1 model=$2 input=$3 n
  n=$(grep -vc '^#' "${input%.pod5}.truth.csv")  # data lines + the header
  n=$((n - 1))
  rm -rf out
  /usr/bin/time -f "%e %U %S %M" -o time.txt \
    "$ESCPOD" demux "$input" --model "$model" -d out --classifications calls.csv -t "$THREADS" -f -q \
    ${DEMUX_ARGS:-} >/dev/null &
  local timer=$! pid="" anon_kb=0 a
  # Peak anonymous memory, sampled: GNU time's peak RSS also counts the pages of the
  # memory-mapped input that are resident at the moment (page cache the kernel can drop).
  while kill -0 "$timer" 2>/dev/null; do
    [[ -n $pid ]] || pid=$(pgrep -P "$timer" || true)
    if [[ -n $pid ]]; then
      a=$(awk '/^RssAnon:/ {print $2}' "/proc/$pid/status" 2>/dev/null || true)
      [[ -n $a && $a -gt $anon_kb ]] && anon_kb=$a
    fi
    sleep 0.2
  done
  wait "$timer"
  read -r wall user sys rss_kb <time.txt
  local eval_line
  eval_line=$("$ESCPOD" demux evaluate --calls calls.csv --truth "${input%.pod5}.truth.csv" | tail -1)
  local precision recall
  precision=$(sed -n 's/.*precision \([0-9.]*\).*/\1/p' <<<"$eval_line")
  recall=$(sed -n 's/.*recall \([0-9.]*\).*/\1/p' <<<"$eval_line")
  awk -v l="$label" -v n="$n" -v w="$wall" -v u="$user" -v s="$sys" -v m="$rss_kb" \
      -v an="$anon_kb" -v p="$precision" -v r="$recall" 'BEGIN {
    cpu = u + s
    printf "| %s | %d | %.1f | %.1f | %.0f | %.0f | %.0f | %.0f | %s | %s |\n", l, n, w, cpu, n / w, n / cpu, m / 1024, an / 1024, p, r
  }'
  rm -rf out calls.csv
}

HEADER="| %s | reads | wall s | CPU s | reads/s (wall) | reads/CPU-s | peak RSS MiB | peak anon MiB | precision | recall |
|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|"

echo "# escpod $("$ESCPOD" --version) on $(nproc) CPUs, -t $THREADS, $(date -u +%FT%TZ)"
if [[ -n $READS ]]; then
  [[ -f train4.pod5 ]] || sim train4.pod5 2000 4 1
  "$ESCPOD" demux train train4.pod5 --labels train4.truth.csv --method llr -o model4.json -f -q
  printf "\n$HEADER\n" "reads axis (4 barcodes)"
  for n in $READS; do
    [[ -f reads$n.pod5 ]] || sim "reads$n.pod5" "$n" 4 2  # deterministic: reuse a kept input
    demux_row "$n reads" model4.json "reads$n.pod5"
    [[ ${KEEP:-0} == 1 ]] || rm -f "reads$n.pod5"
  done
fi
if [[ -n $BARCODES ]]; then
  printf "\n$HEADER\n" "barcodes axis ($BC_READS reads)"
  for b in $BARCODES; do
    [[ -f train_bc$b.pod5 ]] || sim "train_bc$b.pod5" $((b * TRAIN_PER_BARCODE)) "$b" 11
    /usr/bin/time -f "%e %U %S %M" -o train_time.txt \
      "$ESCPOD" demux train "train_bc$b.pod5" --labels "train_bc$b.truth.csv" --method llr \
      -o "model_bc$b.json" -t "$THREADS" -f -q
    read -r twall _ _ trss <train_time.txt
    echo "<!-- $b barcodes: training on $((b * TRAIN_PER_BARCODE)) reads took ${twall} s, peak RSS $((trss / 1024)) MiB -->"
    [[ -f bc$b.pod5 ]] || sim "bc$b.pod5" "$BC_READS" "$b" 12
    demux_row "$b barcodes" "model_bc$b.json" "bc$b.pod5"
    [[ ${KEEP:-0} == 1 ]] || rm -f "bc$b.pod5" "train_bc$b.pod5"
  done
fi
