#!/bin/bash
# `CI=1 make test` from a fresh clone of each of two commits, one right after the other, timed:
# the suite's before/after on this shared machine, whose speed drifts by tens of percent within
# hours (timings taken apart do not compare). Usage: bench/make_test_ab.sh OLD_REV [NEW_REV]
# Prints one line per commit: wall seconds of make test (setup, lint, tests) and pytest's summary.
set -u
old=${1:?usage: bench/make_test_ab.sh OLD_REV [NEW_REV]}
new=${2:-HEAD}
repo=$(git rev-parse --show-toplevel)
for pair in "old $old" "new $new"; do
  set -- $pair
  dir=$(mktemp -d)/clone
  git clone -q "$repo" "$dir" && git -C "$dir" checkout -q "$2"
  load=$(cut -d' ' -f1 /proc/loadavg 2>/dev/null)
  start=$(date +%s)
  (cd "$dir" && CI=1 make test > "$dir.log" 2>&1)
  rc=$?
  echo "$1 $(git -C "$dir" rev-parse --short HEAD) rc=$rc make_test_wall=$(( $(date +%s) - start ))s" \
    "load_at_start=$load" \
    "$(grep -E 'passed|failed' "$dir.log" | tail -1) (log: $dir.log)"
done
