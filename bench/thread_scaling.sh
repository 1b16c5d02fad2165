#!/usr/bin/env bash
# Decode speed of `parspec generate` per thread count, interleaved run by run so
# that a shared machine's load hits every thread count alike; optionally while
# one competing CPU-bound process runs (--contend).
#
#   bash bench/thread_scaling.sh [--contend] [--rounds N] [--threads "1 2 default"] [--tokens N] MODEL.gguf...
#
# Prints, per model and thread count, the median tok/s of N rounds (--tokens
# greedy tokens after "def f(x):", default 128; on the tiny zoo models 128
# tokens take a few tens of milliseconds, so where the scheduler puts the threads in the first
# milliseconds weighs on a contended run: more tokens measure longer), and
# /proc/loadavg before and after.
set -euo pipefail
cd "$(dirname "$0")/.."
rounds=7
threads="default 1 2"
contend=0
tokens=128
while [[ $# -gt 0 ]]; do
  case "$1" in
    --contend) contend=1; shift ;;
    --rounds) rounds="$2"; shift 2 ;;
    --threads) threads="$2"; shift 2 ;;
    --tokens) tokens="$2"; shift 2 ;;
    -h|--help) sed -n '2,12p' "$0"; exit 0 ;;
    *) break ;;
  esac
done
[[ $# -ge 1 ]] || { echo "usage: $0 [--contend] [--rounds N] [--threads LIST] [--tokens N] MODEL.gguf..." >&2; exit 2; }
bin=build/parspec
[[ -x $bin ]] || { echo "build first: bash scripts/build.sh" >&2; exit 1; }

competitor=
if [[ $contend == 1 ]]; then
  # One CPU-bound process (a shell busy loop) for the whole measurement.
  bash -c 'while :; do :; done' &
  competitor=$!
  trap 'kill $competitor 2>/dev/null || true' EXIT
fi

echo "cpu: $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2- | xargs), $(nproc) cores visible"
echo "competing CPU-bound process: $([[ $contend == 1 ]] && echo yes || echo no); $tokens tokens per run"
echo "loadavg before: $(cut -d' ' -f1-3 /proc/loadavg)"
for model in "$@"; do
  declare -A rates=()
  for ((r = 0; r < rounds; r++)); do
    for t in $threads; do
      flag=()
      [[ $t != default ]] && flag=(-t "$t")
      rate=$($bin generate -m "$model" -p "def f(x):" -n "$tokens" --temp 0 --json "${flag[@]}" 2>/dev/null |
        /usr/bin/python3 -c 'import json,sys; print(json.load(sys.stdin)["tok_per_s"])')
      rates[$t]+="$rate "
    done
  done
  echo "model: $model"
  for t in $threads; do
    echo "${rates[$t]}" | /usr/bin/python3 -c '
import statistics, sys
v = [float(x) for x in sys.stdin.read().split()]
print(f"  -t {sys.argv[1]:>7}: median {statistics.median(v):8.1f} tok/s  (min {min(v):.1f}, max {max(v):.1f}, n={len(v)})")' "$t"
  done
  unset rates
done
echo "loadavg after: $(cut -d' ' -f1-3 /proc/loadavg)"
