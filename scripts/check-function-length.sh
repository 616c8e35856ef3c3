#!/usr/bin/env bash
# No function in src/ longer than 80 lines (lizard's `length`: first to last line, comments and
# blank lines included): a function that long hides its steps; name them. Lists every offender
# (file:line, function, length) and fails when there is one. tests/ and bench/ are exempt.
# Usage: scripts/check-function-length.sh [LIMIT]   (default 80; lizard is pinned in requirements.txt)
set -euo pipefail
cd "$(dirname "$0")/.."
limit=${1:-80}
offenders=$(.venv/bin/lizard --languages cpp --length "$limit" --CCN 100000 --arguments 1000 --warnings_only --ignore_warnings 1000000 \
              src | sed "s|^$PWD/||")
if [[ -n $offenders ]]; then
  echo "functions in src/ over $limit lines (split them into named steps):" >&2
  echo "$offenders" >&2
  exit 1
fi
echo "check-function-length: no function in src/ over $limit lines"
