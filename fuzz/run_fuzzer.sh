#!/usr/bin/env bash
# run_fuzzer.sh FUZZER SEEDS SECONDS: runs FUZZER for SECONDS on a scratch
# copy of the seed corpus (new inputs never land in the repository), with a
# fixed seed; prints libFuzzer's final statistics, and on a crash its report
# and the crashing input (hex). Exit status: libFuzzer's (non-zero on a crash).
set -uo pipefail
fuzzer=$1 seeds=$2 seconds=$3
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
mkdir "$work/corpus"
cp "$seeds"/* "$work/corpus/" 2>/dev/null || true
cd "$work"
"$fuzzer" -seed=20261129 -max_total_time="$seconds" -rss_limit_mb=2048 -malloc_limit_mb=512 \
  -print_final_stats=1 "$work/corpus" >"$work/log" 2>&1
status=$?
if [ "$status" -ne 0 ]; then
  grep -v "^#[0-9]" "$work/log" | tail -40
  for f in "$work"/crash-* "$work"/leak-* "$work"/oom-* "$work"/timeout-*; do
    [ -f "$f" ] && { echo "input $(basename "$f"):"; od -A d -c "$f" | head -20; }
  done
else
  grep -E "^(INFO: Seed|#[0-9]+ +DONE|stat::)" "$work/log"
fi
exit "$status"
