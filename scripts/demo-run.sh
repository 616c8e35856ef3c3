#!/usr/bin/env bash
# The demo's chain on a given escpod program: simulate a small barcoded direct-RNA run (synthetic
# k-mer table, 4 demo barcodes), train a DTW-SVM model on one part, demultiplex the other part
# into per-barcode POD5 files, and score the calls against the truth.
# Usage: scripts/demo-run.sh ESCPOD OUT_DIR   (scripts/demo.sh builds escpod and runs this; the
# wheel's bare-system test runs it on the wheel's escpod)
set -euo pipefail
ESCPOD=$1
OUT=$2
BARCODES=$(cd "$(dirname "$0")/.." && pwd)/data/barcodes/escpod_demo4.csv
# A 150-nt adapter: WarpDemuX-style fingerprints segment the adapter into 110 events, which
# the simulator's default 52-nt adapter (real RNA004 adapter length in samples, but fewer level
# changes than a real adapter with its stalls) is too smooth for. See bench/RESULTS.md.
ADAPTER=GGATCACAGTCTACACTGCTCACTCCAACCCCGGCCCCTGAGTCCGAGGAGAGGGTGCTTCAGAGTATGTATACCACTGGGTAGGATACGGCGGAGGGCACGTCAATACGGTTCAATGCCCTACTGCATGCTCTTGTGGTTCATCTGCAT
mkdir -p "$OUT"
SECONDS=0

echo "== simulate: 2000 training reads and 3000 test reads (synthetic k-mer table)"
"$ESCPOD" simulate -o "$OUT/train.pod5" --reads 2000 --kmer-model synthetic:9 --barcodes "$BARCODES" --adapter "$ADAPTER" --seed 1 -f -q
"$ESCPOD" simulate -o "$OUT/test.pod5" --reads 3000 --kmer-model synthetic:9 --barcodes "$BARCODES" --adapter "$ADAPTER" --seed 2 -f -q

echo "== train a DTW-SVM model on the training reads (LLR boundaries)"
"$ESCPOD" demux train "$OUT/train.pod5" --labels "$OUT/train.truth.csv" --method llr -o "$OUT/model.json" -f

echo "== demultiplex the test reads"
"$ESCPOD" demux "$OUT/test.pod5" --model "$OUT/model.json" -d "$OUT/demux" --classifications "$OUT/calls.csv" -f

echo "== calls against the truth"
"$ESCPOD" demux evaluate --calls "$OUT/calls.csv" --truth "$OUT/test.truth.csv"
ls "$OUT/demux"
echo "demo finished in ${SECONDS} s (after the build)"
