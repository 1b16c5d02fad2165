#!/usr/bin/env bash
# Configures and builds parspec (Release) into build/.
set -euo pipefail
cd "$(dirname "$0")/.."
# Quiet but for the line that says whether the CUDA backend is built, and why not.
cmake -S . -B build -G Ninja -DCMAKE_BUILD_TYPE=Release -DPARSPEC_WERROR=ON | { grep "^-- CUDA backend" || true; }
cmake --build build -j"$(nproc)"
