#!/usr/bin/env bash
# Reproduces the measurements of docs/performance.md (and the gamma sweep of docs/strategies.md) here:
#  1. forward-pass speed of ~1B-parameter random models (Q8_0, Q4_0) against the
#     memory-bandwidth roofline measured in the same run;
#  2. every strategy against `ar` on the bundled model zoo and prompt sets;
#  3. sd and pearl at every draft length (gamma) on the same.
# Results go to out/performance/. Random 1B models (about 1.2 and 0.7 GB) are
# written to out/models/ on first use.
set -euo pipefail
cd "$(dirname "$0")/.."
bin=build/parspec
[ -x "$bin" ] || bash scripts/build.sh
mkdir -p out/models out/performance
for type in q8_0 q4_0; do
  model=out/models/random-1b-$type.gguf
  [ -f "$model" ] || "$bin" make-model --preset 1b --type "$type" -o "$model"
  "$bin" bench-forward -m "$model" -t 1,2 -r 5 --json out/performance/forward-$type.json \
    | tee out/performance/forward-$type.md
done
"$bin" bench --strategies ar,sd:2,sd:3,sd:4,tree,dyntree,pearl:2,pearl:3,pearl -n 128 -t 1 -td 1 \
  --json out/performance/strategies.json --md out/performance/strategies.md \
  --svg out/performance/strategies.svg
# the gamma sweep of sd and pearl in docs/strategies.md (PEARL section)
"$bin" bench --strategies ar,sd:1,sd:2,sd:3,sd:4,sd:5,sd:6,sd:8,pearl:1,pearl:2,pearl:3,pearl:4,pearl:5,pearl:6,pearl:8,pearl \
  -n 128 -t 1 -td 1 --json out/performance/gamma.json --md out/performance/gamma.md
