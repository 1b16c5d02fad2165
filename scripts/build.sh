#!/usr/bin/env bash
# Configures and builds parspec (Release) into build/.
set -euo pipefail
cd "$(dirname "$0")/.."
cmake -S . -B build -G Ninja -DCMAKE_BUILD_TYPE=Release -DPARSPEC_WERROR=ON >/dev/null
cmake --build build -j"$(nproc)"
