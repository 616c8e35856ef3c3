#!/usr/bin/env bash
# Runs a command and prints one Markdown row: LABEL | wall s | CPU s | peak RSS MiB (GNU time) |
# peak RssAnon MiB (sampled every 0.2 s: the program's own memory, without the resident pages of
# memory-mapped inputs that peak RSS also counts). bench/results/memory.md has the numbers.
#
#   bench/tools/peak_memory.sh "merge 3M" build/src/cli/escpod merge r3m.pod5 -o m.pod5 -f -q
#
# With PEAK_LOG=FILE, long runs can be followed: every 10 s a line "seconds VmRSS RssAnon RssFile"
# (MiB) is appended to FILE, and the command's stderr (its progress lines, without -q) goes to
# FILE.err instead of being dropped.
set -uo pipefail
label=$1
shift
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
err=${PEAK_LOG:+$PEAK_LOG.err}
err=${err:-$tmp/err}
/usr/bin/time -f "%e %U %S %M" -o "$tmp/time" "$@" >/dev/null 2>"$err" &
timer=$!
pid=""
anon=0
ticks=0
started=$SECONDS
while kill -0 "$timer" 2>/dev/null; do
  [[ -n $pid ]] || pid=$(pgrep -P "$timer" || true)
  if [[ -n $pid ]]; then
    a=$(awk '/^RssAnon:/ {print $2}' "/proc/$pid/status" 2>/dev/null || true)
    [[ -n $a && $a -gt $anon ]] && anon=$a
    if [[ -n ${PEAK_LOG:-} && $((ticks % 50)) -eq 0 ]]; then
      awk -v t=$((SECONDS - started)) '/^(VmRSS|RssAnon|RssFile):/ {v[$1] = $2 / 1024}
        END {if (length(v)) printf "%d s  VmRSS %.1f  RssAnon %.1f  RssFile %.1f\n", t, v["VmRSS:"], v["RssAnon:"], v["RssFile:"]}' \
        "/proc/$pid/status" >>"$PEAK_LOG" 2>/dev/null || true
    fi
  fi
  ticks=$((ticks + 1))
  sleep 0.2
done
wait "$timer"
rc=$?
read -r wall user sys rss_kb <"$tmp/time"
awk -v l="$label" -v w="$wall" -v u="$user" -v s="$sys" -v m="$rss_kb" -v a="$anon" 'BEGIN {
  printf "| %s | %.1f | %.1f | %.0f | %.1f |\n", l, w, u + s, m / 1024, a / 1024
}'
if [[ $rc -ne 0 ]]; then
  tail -2 "$err" >&2
  exit "$rc"
fi
