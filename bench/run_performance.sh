#!/usr/bin/env bash
# Reproduces measurements of the kinds in docs/performance.md here:
#  1. forward-pass speed of ~1B-parameter random models (Q8_0, Q4_0, and the Q4_K_M
#     mix of q4_K and q6_K that most published files use) against the memory-bandwidth
#     roofline measured in the same run, decode after a 4,096-token context, and the
#     attention kernels alone;
#  2. every strategy against `ar` on the bundled model zoo and prompt sets;
#  3. sd and pearl at every draft length (gamma) on the same;
#  4. the zoo inflated into a 1B-class target + 100M-class drafter and an 8B-class
#     Q4_0 target + 1B-class drafter (bench/make_pairs.sh; about 7 GB in out/).
# Results go to out/performance/. Random 1B models (about 1.2, 0.6 and 0.7 GB) are
# written to out/models/ on first use.
set -euo pipefail
cd "$(dirname "$0")/.."
bin=build/parspec
[ -x "$bin" ] || bash scripts/build.sh
mkdir -p out/models out/performance
for type in q8_0 q4_0 q4_k_m; do
  model=out/models/random-1b-$type.gguf
  [ -f "$model" ] || "$bin" make-model --preset 1b --type "$type" -o "$model"
  "$bin" bench-forward -m "$model" -t 1,2 -r 5 --json out/performance/forward-$type.json \
    | tee out/performance/forward-$type.md
done
"$bin" bench-forward -m out/models/random-1b-q4_0.gguf -t 1,2 -b 1 -r 3 --decode-tokens 16 \
  --context 4096 | tee out/performance/forward-q4_0-context4096.md
cmake --build build --target attention_throughput
build/attention_throughput | tee out/performance/attention.md
build/attention_throughput 4096 4 | tee -a out/performance/attention.md
"$bin" bench --strategies ar,sd:2,sd:3,sd:4,tree,dyntree,pearl:2,pearl:3,pearl -n 128 -t 1 -td 1 \
  --json out/performance/strategies.json --md out/performance/strategies.md \
  --svg out/performance/strategies.svg
# sd and pearl at every draft length (gamma)
"$bin" bench --strategies ar,sd:1,sd:2,sd:3,sd:4,sd:5,sd:6,sd:8,pearl:1,pearl:2,pearl:3,pearl:4,pearl:5,pearl:6,pearl:8,pearl \
  -n 128 -t 1 -td 1 --json out/performance/gamma.json --md out/performance/gamma.md
# the inflated zoo pairs (bench/README.md)
bash bench/make_pairs.sh all
"$bin" bench -m out/zoo-target-1b-f16.gguf -md out/zoo-draft-100m-f16.gguf \
  --strategies ar,sd:2,sd,pearl:3 -t 2 -n 64 --prompts code,math,prose,config,chat --max-prompts 2 \
  --json out/performance/inflated-1b.json --md out/performance/inflated-1b.md
"$bin" bench -m out/zoo-target-8b-q4_0.gguf -md out/zoo-draft-1b-q8_0.gguf \
  --strategies ar,sd:2 -t 2 -n 32 --prompts math,config --max-prompts 1 --warmup 4 \
  --json out/performance/inflated-8b.json --md out/performance/inflated-8b.md
