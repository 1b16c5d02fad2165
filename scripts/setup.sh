#!/usr/bin/env bash
# One command from a fresh Debian 12 machine to a running parspec: installs the
# dependencies, builds, then runs the main job:
#  1. on the bundled model zoo: generation with the target model, and the strategy
#     comparison (`parspec bench`) of every decoding strategy against autoregressive
#     decoding (ar). The zoo is tiny and lives in the CPU's caches, so a forward over
#     several tokens costs several one-token forwards and the strategies that verify
#     many tokens per step lose to ar;
#  2. on a memory-bound pair made on the spot from the zoo (`make-model --inflate`: the
#     zoo's functions in a 1B-class target and a 100M-class drafter, Q8_0, about 1.1 GB
#     in out/): the same comparison for ar and the strategies that can win there. Reading
#     the weights dominates a forward, so verifying a few tokens costs about what one
#     costs and speculation pays.
# Each comparison ends with a verdict from its own numbers (`bench --verdict`): the
# fastest strategy, its speedup over ar and its tau, and why the slower ones lose. The
# script fails if any strategy's greedy output differs from ar's.
set -euo pipefail
cd "$(dirname "$0")/.."
start=$SECONDS
bash scripts/install-deps.sh
bash scripts/build.sh
echo "setup: built in $((SECONDS - start)) s"
./build/parspec info models/target.gguf models/draft.gguf
./build/parspec generate -m models/target.gguf -md models/draft.gguf --strategy sd \
  -p "def read_config(path):" -n 64 --temp 0
# What --strategy auto (the default with -md) runs here, measured on this machine and cached.
./build/parspec tune -m models/target.gguf -md models/draft.gguf
# Default threads: the pool keeps jobs too small to split (most of the tiny zoo's) on one
# thread, so the default is never slower than -t 1 (docs/performance.md, "Thread pool").
# Beside the default draft lengths, sd:2 and pearl:3 are the best ones on this compute-bound
# zoo (docs/strategies/sd.md, docs/strategies/pearl.md); auto is what the cost model picks (it may be ar).
# ppd runs the target with its trained prompt tokens (models/target.ppd.gguf); specinfer and
# cosine draft with the pool of the four zoo drafters (docs/strategies/cosine.md).
echo
echo "setup: every strategy against ar on the bundled zoo (tiny models, compute-bound)"
./build/parspec bench --strategies ar,auto,sd,sd:2,tree,dyntree,pearl,pearl:3,ppd,specinfer,cosine \
  --drafters models/draft.gguf,models/draft-code.gguf,models/draft-prose.gguf,models/draft-math.gguf \
  --max-prompts 5 -n 64 --verdict

echo
echo "setup: the zoo inflated to a memory-bound 1B-class target and 100M-class drafter (Q8_0)"
bash bench/make_pairs.sh q8_0
# One prompt of each set, 32 tokens: enough for a stable ranking on this pair in about a
# minute; auto tunes itself first (a few minutes, cached for later runs). tree and ppd size
# their trees from this machine's forward times: beside the zoo's table they show what
# verifying several tokens per step is worth on a memory-bound model.
echo
echo "setup: ar and the strategies that can win, on the inflated pair"
./build/parspec bench -m out/zoo-target-1b-q8_0.gguf -md out/zoo-draft-100m-q8_0.gguf \
  --strategies ar,auto,sd,sd:2,pearl:3,tree,ppd --max-prompts 1 -n 32 --verdict
echo "setup: done in $((SECONDS - start)) s"
