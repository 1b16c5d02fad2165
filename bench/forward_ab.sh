#!/bin/bash
# Interleaved A/B of two parspec builds on the same models: the bench-forward
# rows alternate base / new, so a shared machine's load hits both alike. At
# -t 1 the forwards are timed in process CPU time (--cpu-time). Hold the
# measurement lock around it on a shared machine:
#
#   bash bench/forward_ab.sh BASE_BIN NEW_BIN "1 2" 2 \
#       MODEL.gguf [MODEL.gguf ...]
#
# Prints the load, then one table row per (model, threads, round, build).
set -euo pipefail
if [ $# -lt 5 ]; then
  echo "usage: $0 BASE_BIN NEW_BIN \"THREADS...\" ROUNDS MODEL.gguf [MODEL.gguf ...]" >&2
  exit 1
fi
base=$1 new=$2 threads=$3 rounds=$4
shift 4
batches=${BATCHES:-1,2,3,4,8}
echo "start $(date -u +%H:%M:%S) loadavg $(cat /proc/loadavg)"
for model in "$@"; do
  for t in $threads; do
    cpu=""
    [ "$t" = 1 ] && cpu=--cpu-time
    for round in $(seq "$rounds"); do
      for build in base new; do
        bin=$base
        [ "$build" = new ] && bin=$new
        row=$("$bin" bench-forward -m "$model" -t "$t" -b "$batches" -r 3 --decode-tokens 8 $cpu \
          2>/dev/null | grep "^| $t ")
        echo "$(basename "$model") | $build | round $round | load $(cut -d' ' -f1 /proc/loadavg) $row"
      done
    done
  done
done
echo "end $(date -u +%H:%M:%S) loadavg $(cat /proc/loadavg)"
