#!/usr/bin/env bash
# One command from a fresh Debian 12 machine to a running parspec: installs the
# dependencies, builds, then runs the main job on the bundled model zoo:
# generation with the target model, and the strategy comparison (`parspec bench`)
# of every decoding strategy against autoregressive decoding.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/install-deps.sh
bash scripts/build.sh
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
./build/parspec bench --strategies ar,auto,sd,sd:2,tree,dyntree,pearl,pearl:3,ppd,specinfer,cosine \
  --drafters models/draft.gguf,models/draft-code.gguf,models/draft-prose.gguf,models/draft-math.gguf \
  --max-prompts 5 -n 64
