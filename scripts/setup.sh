#!/usr/bin/env bash
# One command from a fresh Debian 12 machine to a running parspec: installs the
# dependencies, builds, creates the default model and generates text with it.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/install-deps.sh
bash scripts/build.sh
model=models/tiny-random.gguf
if [ ! -f "$model" ]; then
  ./build/parspec make-model --preset tiny -o "$model"
fi
./build/parspec info "$model"
./build/parspec generate -m "$model" -p "Hello, parspec" -n 32 --temp 0 --seed 1
