#!/usr/bin/env bash
# Usage: check_local_memory.sh NVCC SOURCE_DIR
#
# No CUDA kernel asks for local memory in its PTX (a __local_depot). nvcc
# makes one where a kernel's parameter or a local object must have an address:
# a reference to it passed to a function that is not inlined, or one that may
# name either of two objects. Every thread then copies that object to local
# memory when it starts, whether or not the code that needed the address runs;
# a 232-byte matmul parameter copied so by each of 512 threads a block is as
# many bytes as the weights the block reads. Register spills are ptxas's and
# do not show here.
#
# Allowed: CUDA's own math functions (__internal_*), such as the argument
# reduction of double-precision sin and cos, which keeps a scratch array for
# the rare large argument.
set -euo pipefail
nvcc=$1
root=$2
ptx=$(mktemp --suffix=.ptx)
trap 'rm -f "$ptx"' EXIT
"$nvcc" -std=c++20 -O3 -fmad=false -I"$root/src" -arch=sm_90a -ptx "$root/src/cuda/kernels.cu" \
  -o "$ptx"

entries=$(grep -c '^\.visible \.entry\|^\.entry\|\.entry ' "$ptx" || true)
if ((entries < 50)); then
  echo "only $entries kernels in the PTX of src/cuda/kernels.cu: not the file this check knows" >&2
  exit 1
fi

offenders=$(awk '
  /\.(entry|func) / {
    name = $0; sub(/.*\.(entry|func)[ \t]+(\([^)]*\)[ \t]*)?/, "", name); sub(/\(.*/, "", name)
  }
  /__local_depot[0-9]+\[/ && name != "" {
    size = $0; sub(/.*\[/, "", size); sub(/\].*/, "", size)
    if (name !~ /^__internal_/) print size " bytes: " name
  }' "$ptx")
if [[ -n $offenders ]]; then
  echo "kernels and functions with local memory in their PTX (bytes a thread, name):" >&2
  c++filt <<< "$offenders" >&2
  exit 1
fi
echo "$entries kernels, none with local memory"
