#!/usr/bin/env bash
# The whole GPU check in one script, for a machine with an NVIDIA GPU and CUDA 13:
#   1. the CUDA backend's tests (tests/cuda: batch invariance per weight type, the
#      device KV cache, every strategy against GPU ar, GPU against CPU) with the
#      default kernels, the kernel tests again with the opt-in kernels, and where the
#      defaults fail, with the K-quants' warp kernel (PARSPEC_CUDA_KQUANT=warp) and with
#      the warp matmul (PARSPEC_CUDA_MATMUL=warp): the rest runs with the first of
#      those that passes;
#      then generate on the GPU against the CPU, serve on the GPU (concurrent
#      requests against their solo runs, sd against ar), and where transformers is
#      installed, the qwen3/gemma3/qwen3moe checks against it (scripts/);
#   2. inflated models made there from the zoo (8B-class F16/Q8_0/Q4_0/Q4_K_M, 1B-class
#      F16, a 100M-class F16 drafter), while llama.cpp builds there with CUDA from its source;
#   3. the strategies on the GPU (parspec bench, 8B-class Q4_0 target + 100M-class
#      drafter; auto and ppd; EasySpec's drafting time at layer groups of 1 and 2; a
#      prompt of over 2000 tokens; the kernels not yet the default; tune --ppd and ppd with
#      its trees; the 8B-class F16 and Q4_K_M targets) while llama.cpp builds, then with the drafter on the CPU (-ngld 0); then
#      per model, parspec bench-forward -ngl 99 (decode tok/s, L(n) for n = 1..64, L(512))
#      and llama-bench -ngl 99 (tg128, pp8, pp64, pp512) on the same file; llama.cpp's
#      llama-speculative-simple (--draft-max 4, 8, 16) on the strategies' files and prompts;
#      serve on the device under 1, 4 and 16 concurrent streams (bench/loadgen.py), ar and sd;
#      decode and L(8) after 2048 and 4000 committed tokens with each attention kernel;
#      then the kernel variants; the GPU time of a forward by kernel group
#      (PARSPEC_CUDA_PROFILE=1), Nsight Compute; decode without CUDA graphs
#      (PARSPEC_CUDA_GRAPHS=0) and without programmatic dependent launches
#      (PARSPEC_CUDA_PDL=0) for the 100M drafter and the 8B Q4_0 (what the time budget leaves);
#   4. the tables, in $OUT (default out/gpu): summary.md (ending with the issues' goals,
#      measured against their targets), and every raw output beside it.
#
# The GPU machine may lack the PCRE2 and cpp-httplib headers, so the binaries are
# built on a development machine (same CUDA 13) and travel in build-gpu/:
#   LLAMA_CPP_SRC=/path/to/llama.cpp bash bench/gpu.sh --prepare
# (brings build/, a CUDA build with sm_90, up to date and copies what travels to build-gpu/;
# without LLAMA_CPP_SRC it keeps the llama.cpp source of an earlier --prepare)
# then, on the GPU machine, from the repository root with build-gpu/ beside it:
#   bash bench/gpu.sh            # about 8 minutes on an H100/H200 with 16 cores
#   bash bench/gpu.sh --dry-run  # the same steps here, without a GPU: the zoo models on
#                                # the CPU, tests that skip, llama.cpp left out
# Environment: OUT (tables), MODELS (where the inflated models go, default out/gpu-models),
# SKIP_TESTS=1, SKIP_LLAMA=1, SKIP_MODELS=1 (reuse MODELS), SKIP_TRANSFORMERS=1, JOBS (build
# jobs, default nproc), BUDGET_S (no measurement starts after this many seconds, default 510;
# the summary lists what was skipped),
# GPU_MODELS (the models to make and measure, by the names below; default: all but 8b-q4_k
# and 1b-q4_0),
# GPU_VARIANTS (measure only these kernel variants, by the names of kernel_env; "all" for
# every one; default: the other side of each of the latest defaults, and the candidates),
# GPU_TESTS (the kernel sets the tests run with, tensor-cores first; default: tensor-cores
# fused-q8k stream-split stream-dual prefetch-operands opt-in newest widest wide4-norm-once
# previous rows-persistent),
# GPU_FOCUS=kernels (tests, then per model decode, L(n), prefill, the kernel variants and
# llama-bench, the profile and Nsight Compute: no strategies, no server under load),
# GPU_FOCUS=strategies (tests, the strategies' main tables, llama.cpp's speculation, per
# model decode, L(n), prefill and the kernel variants: no long prompt, server under load,
# long context, profile or Nsight Compute).
set -euo pipefail
cd "$(dirname "$0")/.."

mode=run
case "${1:-}" in
  --prepare) mode=prepare ;;
  --dry-run) mode=dry ;;
  -h|--help) sed -n '2,/^set -euo/p' "$0" | sed '$d'; exit 0 ;;
  "") ;;
  *) echo "unknown option $1 (--prepare, --dry-run, --help)" >&2; exit 2 ;;
esac

bin=build-gpu
out=${OUT:-out/gpu}
models=${MODELS:-out/gpu-models}
jobs=${JOBS:-$(nproc)}
llama_subset="ggml src include common examples pocs cmake gguf-py CMakeLists.txt"

if [[ $mode == prepare ]]; then
  # Everything the run needs that git does not carry, under 64 MiB.
  [[ -f build/build.ninja ]] ||
    { echo "configure build/ first (cmake -G Ninja, where nvcc is found: docs/development.md)" >&2; exit 1; }
  # What travels is this tree's code: bring the two binaries up to date.
  nice ninja -C build parspec test_cuda_backend >/dev/null ||
    { echo "ninja -C build parspec test_cuda_backend failed" >&2; exit 1; }
  # A build without nvcc runs everything on the CPU there: refuse it here.
  gpu_line=$(build/parspec info models/target.gguf | grep '^  gpu' || true)
  [[ -n $gpu_line && $gpu_line != *"built without"* ]] ||
    { echo "build/parspec is not a CUDA build (${gpu_line:-no gpu line in its info}): configure where nvcc is found" >&2; exit 1; }
  grep -Eq '^PARSPEC_CUDA_ARCHS:[A-Z]*=(.*;)?90a?(;|$)' build/CMakeCache.txt ||
    { echo "build/ has no sm_90 code for an H100/H200: configure with -DPARSPEC_CUDA_ARCHS=90a" >&2; exit 1; }
  mkdir -p "$bin/lib"
  rm -f "$bin/parspec" "$bin/test_cuda_backend"
  cp build/parspec build/tests/test_cuda_backend "$bin/"
  strip "$bin/parspec" "$bin/test_cuda_backend"
  # Compressed, they take a third of what may travel (the run unpacks them).
  gzip -f "$bin/parspec" "$bin/test_cuda_backend"
  # Shared libraries the GPU machine may lack travel beside them (today none: the
  # server is header-only Boost.Beast, and PCRE2 and OpenMPI are there).
  for lib in $(ldd build/parspec | awk '/libcpp-httplib/ {print $3}'); do cp "$lib" "$bin/lib/"; done
  if [[ -n "${LLAMA_CPP_SRC:-}" ]]; then
    (cd "$LLAMA_CPP_SRC" && tar czf - $llama_subset) >"$bin/llama.cpp-src.tar.gz"
    (cd "$LLAMA_CPP_SRC" && git rev-parse --short HEAD 2>/dev/null || echo unknown) >"$bin/llama.cpp-commit"
  elif [[ -f $bin/llama.cpp-src.tar.gz ]]; then
    echo "note: LLAMA_CPP_SRC not set: keeping llama.cpp $(cat "$bin/llama.cpp-commit") from the last --prepare" >&2
  else
    echo "note: LLAMA_CPP_SRC not set: the run will leave llama.cpp out" >&2
  fi
  du -sh "$bin"
  echo "ready: carry $bin to the GPU machine and run bash bench/gpu.sh there"
  exit 0
fi

if [[ $mode == dry ]]; then
  # Here: this tree's build, the zoo models as they are, the CPU.
  bin_parspec=build/parspec
  bin_tests=build/tests/test_cuda_backend
  device=(-dev cpu)
  sizes=1,2,4,8
  prefill=16
  repeat=1
  decode=4
else
  # The binaries as --prepare left them, compressed: unpacked beside them.
  for b in parspec test_cuda_backend; do
    if [[ -f $bin/$b.gz && ! -x $bin/$b ]]; then
      gzip -dc "$bin/$b.gz" >"$bin/$b" && chmod +x "$bin/$b"
    fi
  done
  bin_parspec=$bin/parspec
  bin_tests=$bin/test_cuda_backend
  export LD_LIBRARY_PATH="$PWD/$bin/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
  device=(-ngl 99)
  sizes=$(seq -s, 1 64)
  prefill=512
  repeat=3
  decode=64
fi
[[ -x $bin_parspec ]] || { echo "no $bin_parspec (see --help: --prepare)" >&2; exit 1; }
if [[ $mode == run ]]; then
  # -ngl 99 falls back to the CPU where the GPU cannot be used: stop here instead.
  gpu_line=$("$bin_parspec" info models/target.gguf | grep '^  gpu' || true)
  [[ $gpu_line =~ ^\ \ gpu\ +cuda0 ]] ||
    { echo "no usable GPU for $bin_parspec (${gpu_line:-no gpu line in its info}): nothing to measure" >&2; exit 1; }
  # CMake finds nvcc for llama.cpp on PATH.
  if ! command -v nvcc >/dev/null && [[ -x /usr/local/cuda/bin/nvcc ]]; then
    export PATH="/usr/local/cuda/bin:$PATH"
  fi
fi
mkdir -p "$out" "$models"
rm -f "$out/checks.txt" "$out/skipped.txt"
start=$(date +%s)
step() {
  last_step=$*
  echo "[$(($(date +%s) - start)) s] $*"
}
# The measurements after the tests stop starting at BUDGET_S seconds (default
# 510) and each is cut to what is left of it (and 30 s), so that the summary of
# what was measured is written within a device session's time.
budget=${BUDGET_S:-510}
budgeted() {  # SECONDS COMMAND...: timeout SECONDS COMMAND..., or nothing past the budget
  local limit=$1 left=$((budget + 30 - ($(date +%s) - start)))
  shift
  if (($(date +%s) - start >= budget)); then
    echo "skipped, past the time budget (BUDGET_S=$budget): $last_step" | tee -a "$out/skipped.txt" >&2
    return 1
  fi
  ((limit > left)) && limit=$left
  timeout "$limit" "$@"
}

# What GPU_FOCUS leaves out: focus_skips PART is true where it does.
focus=${GPU_FOCUS:-all}
case $focus in
  all | kernels | strategies) ;;
  *) echo "GPU_FOCUS=$focus: expected all, kernels or strategies" >&2; exit 2 ;;
esac
focus_skips() {  # PART: strategies, strategies-extra, llama-spec, serve-load, long-context, profile
  case $focus in
    kernels) [[ $1 == strategies || $1 == strategies-extra || $1 == llama-spec || $1 == serve-load ]] ;;
    strategies) [[ $1 == strategies-extra || $1 == serve-load || $1 == long-context || $1 == profile ]] ;;
    *) false ;;
  esac
}

{
  date -u +"date: %Y-%m-%d %H:%M UTC"
  echo "host cpu: $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2- | xargs) ($(nproc) cores)"
  if command -v nvidia-smi >/dev/null; then
    nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader
  else
    echo "gpu: none (nvidia-smi not found)"
  fi
  "$bin_parspec" info models/target.gguf | sed -n 's/^  gpu *//p' | sed 's/^/parspec sees: /'
} | tee "$out/machine.txt"

# llama.cpp builds in the background while the tests run and the models are made
# (at the lowest priority: the strategies' benches run beside it).
llama_bin=""
llama_pid=""
if [[ $mode == run && ${SKIP_LLAMA:-0} != 1 && -f $bin/llama.cpp-src.tar.gz ]]; then
  step "building llama.cpp ($(cat "$bin/llama.cpp-commit")) with CUDA in the background"
  rm -rf "$models/llama.cpp"
  mkdir -p "$models/llama.cpp"
  tar xzf "$bin/llama.cpp-src.tar.gz" -C "$models/llama.cpp"
  (
    cd "$models/llama.cpp"
    cmake -B build -G Ninja -DGGML_CUDA=ON -DCMAKE_CUDA_ARCHITECTURES=90 -DLLAMA_CURL=OFF \
      -DGGML_NATIVE=ON -DLLAMA_BUILD_TESTS=OFF -DLLAMA_BUILD_SERVER=OFF -DCMAKE_BUILD_TYPE=Release
    nice -n 19 cmake --build build -j"$jobs" --target llama-bench llama-speculative-simple
  ) >"$out/llama_build.log" 2>&1 &
  llama_pid=$!
  llama_bin=$models/llama.cpp/build/bin/llama-bench
elif [[ $mode == dry ]]; then
  step "dry run: llama.cpp would build from $bin/llama.cpp-src.tar.gz (cmake -DGGML_CUDA=ON ...)"
else
  step "llama.cpp left out (SKIP_LLAMA=1 or no $bin/llama.cpp-src.tar.gz)"
fi

# The families checked against transformers (scripts/check_*_transformers.py),
# where it is installed (the GPU machine has it): on the CPU cores, beside the rest.
tf_pid=""
if [[ $mode == run && ${SKIP_TRANSFORMERS:-0} != 1 ]] && python3 -c "import torch, transformers" 2>/dev/null; then
  step "transformers checks (qwen3, gemma3, qwen3moe) in the background"
  (
    export OMP_NUM_THREADS=4
    for check in families qwen3moe; do
      timeout 300 python3 "scripts/check_${check}_transformers.py" --parspec "$bin_parspec" ||
        echo "check_${check}_transformers.py: FAILED (exit $?)"
    done
  ) >"$out/transformers.txt" 2>&1 &
  tf_pid=$!
fi

# The environment of a kernel variant: tensor-cores (the defaults), warp (the
# dp4a warp matmul for every row count), mma (the tensor cores also for 1 to 4
# rows of Q8_0/Q4_0), kquant-warp (Q4_K/Q6_K on the warp kernel for every row
# count, as before their tensor-core kernels), row-major (the tensor-core kernel's activations row after row),
# half-warp (F16/BF16 weights on the warp kernel), plain (the tensor-core kernel
# loading its own operands instead of the default's streaming them into shared
# memory by cp.async, 64 weight rows a block), pipelined (plain, with the loads of
# four blocks issued before their mmas), mma-pipelined (that for every row count),
# in-split (attention splits merged by their last block), grouped (a KV head's
# query heads in one attention block), attention-tiled (that, and a tile of rows
# sharing each chunk of keys staged in shared memory), opt-in (the kernels not yet
# the default that keep the per-head attention: in-split, a prefill in one launch
# per matmul, pipelined; the tests run every attention kernel anyway), stream (the
# streaming with 16 weight rows a block of 8 warps), mma-stream (the default's
# streaming for every row count), stream-wide (32 weight rows a block where the
# grid stays large), stream-mixed (the default's 64 weight rows a block where the
# grid has a block for every SM, 16 elsewhere), stream-split (for up to 8 rows,
# each tile's 16 chains over 4 blocks where tiles of 64 rows are fewer than the
# SMs, the last block adding them in order), stream-dual (up to 8 rows, the
# default's blocks of 64 weight rows two an SM), stream-persistent (that streaming
# with one block an SM taking tiles in turn, its copies running on from one
# tile into the next), rows-persistent (that for 2 to 32 rows, the few-rows kernel
# left out), widest (that everywhere, and the few-rows kernel with 4
# weight rows a lane everywhere: for the tests), rows-narrow (2 to 4 rows with one
# weight row a lane instead of the default's 2 or 4), rows-wide (the default's way
# for 2 to 8 rows; rows-wide4: 4 weight rows a lane everywhere), paired (two lanes
# a chain in the one-row kernel where a matrix has few rows), paired-all (that
# for every matrix), fused (gate, up and SwiGLU in one kernel, and q, k, v with
# RoPE and the KV store in one, also for one row of Q8_0/Q4_0; the default for
# F16/BF16), fused-rope (only q, k, v with RoPE and the KV store), unfused (none
# of that, F16/BF16 too), fused-q8k (the norm and SwiGLU kernels quantize their
# output to Q8_K for Q4_K/Q6_K weights, no launch of its own), fused-norm (one row: RMSNorm
# done by the matmuls after it, the residual adds by wo and down), norm-once (one
# row: the residual adds by wo and down, whose last block to finish then
# normalizes the row for the matmuls after them), wide4-norm-once (swiglu, rope and
# norm-once: for the tests), newest (stream, paired-all, all three fusions,
# rows-wide with 2 weight rows a lane, prefill tiles for every weight type and
# prefetch together: the tests compare their bits with those of the kernels they stand in
# for), prefill-tiles (launches of more than 64 rows in tiles of 64 weight rows × 64
# activation rows a block for F16/BF16 as for Q8_0/Q4_0, and Q4_K/Q6_K on int8
# tensor cores), prefill-slices (Q8_0/Q4_0 prefills in launches of 32 rows of the
# tensor-core kernel instead of the default tiles), previous (plain, rows-narrow,
# prefill-slices and unfused: the defaults before these, for the tests), prefetch
# (each matmul block requests its weight rows into L2 before it waits for the kernel
# before it, so that they stream in while that one finishes), prefetch-operands (the
# one-row, few-rows and streamed Q8_0/Q4_0 kernels and the one- or two-row F16/BF16
# tensor-core kernel load their first weights into
# registers or shared memory before that wait), per-head (the
# attention kernel that was the default before the prestaged one, for every row
# count), prestaged4 (the prestaged attention for up to 4 rows, not 8),
# prefill-serial (the prefill tiles with one group of warps walking all of K, the
# default before the four groups), rows-none (2 and 3 rows on the tensor cores, the
# default streaming), split-in-block (F16/BF16 input split by every lane in every
# block, as before the split kernel for more than 16 rows and the pairs for one
# or two), candidates (stream-split-dual, which is stream-split where it takes a
# launch and stream-dual elsewhere, and prefetch-operands: what would become the
# default together).
kernel_env() {
  case $1 in
    warp | mma) echo "PARSPEC_CUDA_MATMUL=$1" ;;
    kquant-warp) echo "PARSPEC_CUDA_KQUANT=warp" ;;
    row-major) echo "PARSPEC_CUDA_ACTIVATIONS=row-major" ;;
    half-warp) echo "PARSPEC_CUDA_HALF_MATMUL=warp" ;;
    pipelined) echo "PARSPEC_CUDA_MMA=pipelined" ;;
    mma-pipelined) echo "PARSPEC_CUDA_MATMUL=mma PARSPEC_CUDA_MMA=pipelined" ;;
    in-split) echo "PARSPEC_CUDA_ATTENTION_MERGE=in-split" ;;
    grouped) echo "PARSPEC_CUDA_ATTENTION=grouped" ;;
    attention-tiled) echo "PARSPEC_CUDA_ATTENTION=tiled" ;;
    opt-in) echo "PARSPEC_CUDA_ATTENTION_MERGE=in-split PARSPEC_CUDA_PREFILL=one-launch PARSPEC_CUDA_MMA=pipelined" ;;
    stream) echo "PARSPEC_CUDA_MMA=stream" ;;
    mma-stream) echo "PARSPEC_CUDA_MATMUL=mma PARSPEC_CUDA_MMA=stream" ;;
    stream-wide) echo "PARSPEC_CUDA_MMA=stream-wide" ;;
    stream-wide4) echo "PARSPEC_CUDA_MMA=stream-wide4" ;;
    stream-mixed) echo "PARSPEC_CUDA_MMA=stream-mixed" ;;
    stream-split) echo "PARSPEC_CUDA_MMA=stream-split" ;;
    stream-dual) echo "PARSPEC_CUDA_MMA=stream-dual" ;;
    stream-split-dual) echo "PARSPEC_CUDA_MMA=stream-split-dual" ;;
    stream-persistent) echo "PARSPEC_CUDA_MMA=stream-persistent" ;;
    rows-persistent) echo "PARSPEC_CUDA_ROWS=none PARSPEC_CUDA_MMA=stream-persistent" ;;
    rows-none) echo "PARSPEC_CUDA_ROWS=none" ;;
    widest) echo "PARSPEC_CUDA_MMA=stream-wide-all PARSPEC_CUDA_ROWS=wide4" ;;
    rows-wide) echo "PARSPEC_CUDA_ROWS=wide" ;;
    rows-wide4) echo "PARSPEC_CUDA_ROWS=wide4" ;;
    paired) echo "PARSPEC_CUDA_GEMV=paired" ;;
    paired-all) echo "PARSPEC_CUDA_GEMV=paired-all" ;;
    fused) echo "PARSPEC_CUDA_FUSE=swiglu,rope" ;;
    fused-rope) echo "PARSPEC_CUDA_FUSE=rope" ;;
    fused-norm) echo "PARSPEC_CUDA_FUSE=norm" ;;
    fused-q8k) echo "PARSPEC_CUDA_FUSE=q8k" ;;
    norm-once) echo "PARSPEC_CUDA_FUSE=norm-once" ;;
    wide4-norm-once) echo "PARSPEC_CUDA_FUSE=swiglu,rope,norm-once" ;;
    prefill-tiles) echo "PARSPEC_CUDA_PREFILL=tiled" ;;
    newest) echo "PARSPEC_CUDA_MMA=stream PARSPEC_CUDA_GEMV=paired-all PARSPEC_CUDA_FUSE=all PARSPEC_CUDA_ROWS=wide2 PARSPEC_CUDA_PREFILL=tiled PARSPEC_CUDA_PREFETCH=early" ;;
    candidates) echo "PARSPEC_CUDA_MMA=stream-split-dual PARSPEC_CUDA_PREFETCH=operands" ;;
    prefetch) echo "PARSPEC_CUDA_PREFETCH=early" ;;
    prefetch-operands) echo "PARSPEC_CUDA_PREFETCH=operands" ;;
    per-head) echo "PARSPEC_CUDA_ATTENTION=per-head" ;;
    prestaged4) echo "PARSPEC_CUDA_PRESTAGED_ROWS=4" ;;
    plain) echo "PARSPEC_CUDA_MMA=plain" ;;
    rows-narrow) echo "PARSPEC_CUDA_ROWS=narrow" ;;
    prefill-slices) echo "PARSPEC_CUDA_PREFILL=slices" ;;
    prefill-serial) echo "PARSPEC_CUDA_PREFILL_GROUPS=1" ;;
    split-in-block) echo "PARSPEC_CUDA_HALF_SPLIT=in-block" ;;
    unfused) echo "PARSPEC_CUDA_FUSE=none" ;;
    previous) echo "PARSPEC_CUDA_MMA=plain PARSPEC_CUDA_ROWS=narrow PARSPEC_CUDA_PREFILL=slices PARSPEC_CUDA_FUSE=none" ;;
  esac
}

if [[ ${SKIP_TESTS:-0} != 1 ]]; then
  step "GPU tests"
  if [[ -x $bin_tests ]]; then
    passed() { grep -q '^\[  PASSED' "$1" && ! grep -q '^\[  FAILED' "$1"; }
    # The default kernels first, with every test; the opt-in ones with the tests
    # of the kernels themselves; the warp matmul (the fallback) only where the
    # defaults fail.
    read -ra kernels <<<"${GPU_TESTS:-tensor-cores fused-q8k stream-split stream-dual prefetch-operands opt-in newest widest wide4-norm-once previous rows-persistent}"
    for ((i = 0; i < ${#kernels[@]}; i++)); do
      kernel=${kernels[i]}
      log=$out/tests.txt
      [[ $kernel != tensor-cores ]] && log=$out/tests-$kernel.txt
      # The strategies' tests run every strategy: give them the time, but not forever.
      filter=()
      [[ $kernel == warp ]] && filter=(--gtest_filter=-CudaSampling.*)
      [[ $kernel == opt-in || $kernel == newest || $kernel == widest ]] &&
        filter=(--gtest_filter='CudaBatchInvariance.*:CudaAttention.*:CudaLayerGroups.*:CudaVsCpu.*')
      [[ $kernel == fused-q8k || $kernel == stream-split || $kernel == stream-dual ||
        $kernel == prefetch-operands || $kernel == wide4-norm-once ||
        $kernel == previous || $kernel == rows-persistent ]] &&
        filter=(--gtest_filter='CudaBatchInvariance.*:CudaVsCpu.*')
      env $(kernel_env "$kernel") PARSPEC_SOURCE_DIR="$PWD" \
        timeout 100 "$bin_tests" "${filter[@]}" 2>&1 | tee "$log" |
        grep -E '^\[  (PASSED|FAILED|SKIPPED) |^\[  FAILED|^GPU vs CPU|divergence' || true
      if passed "$log"; then echo "tests ($kernel kernels): passed"; else
        echo "tests ($kernel kernels): FAILED (see $log)"; fi | tee -a "$log" >>"$out/checks.txt"
      [[ $kernel == tensor-cores ]] && ! passed "$log" && kernels+=(kquant-warp warp)
    done
    cat "$out/checks.txt"
    grep -v "^tests (tensor-cores" "$out/checks.txt" >>"$out/tests.txt" || true
    # Where the defaults fail: the K-quants' warp kernel alone if that is enough,
    # else the warp matmul for every weight type.
    if ! passed "$out/tests.txt" && [[ -f $out/tests-kquant-warp.txt ]] &&
      passed "$out/tests-kquant-warp.txt"; then
      echo "the K-quant kernels failed their tests: measuring with PARSPEC_CUDA_KQUANT=warp" |
        tee -a "$out/machine.txt"
      export PARSPEC_CUDA_KQUANT=warp
    elif ! passed "$out/tests.txt" && [[ -f $out/tests-warp.txt ]] && passed "$out/tests-warp.txt"; then
      echo "the tensor-core matmul failed its tests: measuring with PARSPEC_CUDA_MATMUL=warp" |
        tee -a "$out/machine.txt"
      export PARSPEC_CUDA_MATMUL=warp
    fi
  else
    echo "no $bin_tests: tests left out"
  fi
fi

# The command line on the device: greedy text of the zoo pair with sd on the GPU and on the CPU.
step "command-line check: generate -ngl 99 against --device cpu"
gen=(generate -m models/target.gguf -md models/draft.gguf --strategy sd -p "def fib(n):" -n 48
  --temp 0 -t 2)
"$bin_parspec" "${gen[@]}" --device cpu >"$out/generate-cpu.txt" 2>"$out/generate-cpu.log" || true
"$bin_parspec" "${gen[@]}" "${device[@]}" >"$out/generate-gpu.txt" 2>"$out/generate-gpu.log" || true
if [[ -s $out/generate-cpu.txt ]] && cmp -s "$out/generate-cpu.txt" "$out/generate-gpu.txt"; then
  echo "generate: the GPU's text is the CPU's" | tee -a "$out/tests.txt"
else
  echo "generate: the GPU's text differs from the CPU's (see $out/generate-*.txt, *.log)" |
    tee -a "$out/tests.txt"
fi

# The server on the device: four concurrent greedy requests (one multi-sequence
# forward per round) against each one alone, sd against ar.
step "serve check: concurrent requests against their solo runs"
"$bin_parspec" serve -m models/target.gguf -md models/draft.gguf --strategy sd "${device[@]}" \
  --port 0 -t 2 -c 512 -np 4 >"$out/serve.log" 2>&1 &
serve_pid=$!
python3 - "$out/serve.log" "$bin_parspec" "${device[@]}" <<'EOF_SERVE' | tee -a "$out/tests.txt" || true
import concurrent.futures, json, re, subprocess, sys, time, urllib.error, urllib.request
log, binary, device = sys.argv[1], sys.argv[2], sys.argv[3:]
port = None
for _ in range(600):
    m = re.search(r"listening on http://127\.0\.0\.1:(\d+)", open(log).read())
    if m:
        port = int(m.group(1))
        break
    time.sleep(0.1)
if port is None:
    print("serve: did not start (see serve.log)")
    sys.exit(0)
def ask(prompt):
    body = json.dumps({"prompt": prompt, "max_tokens": 48, "temperature": 0,
                       "return_tokens": True}).encode()
    req = urllib.request.Request(f"http://127.0.0.1:{port}/v1/completions", body,
                                 {"Content-Type": "application/json"})
    try:
        return json.load(urllib.request.urlopen(req, timeout=120))["choices"][0]["tokens"]
    except urllib.error.HTTPError as e:
        return f"HTTP {e.code}: {e.read().decode(errors='replace')[:300]}"
prompts = ["def add(a, b):", "Once upon a time", "import os", "The cat"]
solo = [ask(p) for p in prompts]
with concurrent.futures.ThreadPoolExecutor(4) as pool:
    together = list(pool.map(ask, prompts))
ar = json.loads(subprocess.run([binary, "generate", "-m", "models/target.gguf", *device, "-t", "2",
                                "--temp", "0", "--json", "-n", "48", "-p", prompts[0]],
                               capture_output=True, text=True).stdout)["tokens"]
for answer in solo + together:
    if isinstance(answer, str):
        print("serve: a request failed:", answer)
print("serve: concurrent requests", "equal" if together == solo else "DIFFER from",
      "their solo runs; sd", "equals" if solo[0] == ar else "DIFFERS from", "ar")
EOF_SERVE
kill "$serve_pid" 2>/dev/null || true
wait "$serve_pid" 2>/dev/null || true

# name  source  make-model arguments
if [[ $mode == dry ]]; then
  table=("zoo-target models/target.gguf -" "zoo-draft models/draft.gguf -")
else
  table=(
    "8b-q4_0 models/target.gguf --preset 8b --type q4_0 --ctx 8192"
    "8b-q4_k models/target.gguf --preset 8b --type q4_k --ctx 8192"
    "8b-q8_0 models/target.gguf --preset 8b --type q8_0 --ctx 8192"
    "8b-f16 models/target.gguf --preset 8b --type f16 --ctx 8192"
    "1b-f16 models/target.gguf --preset 1b --type f16 --ctx 8192"
    "1b-q4_0 models/target.gguf --preset 1b --type q4_0 --ctx 8192"
    "100m-f16 models/draft.gguf --n-embd 1024 --n-layer 6 --n-ff 3072 --type f16 --ctx 8192"
    "8b-q4_k_m models/target.gguf --preset 8b --type q4_k_m --ctx 8192"
  )
fi
# By default the models of the issues' goals, then the Q4_K_M mix most users'
# files have; Q4_K alone and a 1B-class Q4_0 (the few-rows routing on small
# quantized matrices) when named.
[[ $mode == run ]] && GPU_MODELS=${GPU_MODELS:-8b-q4_0 8b-q8_0 8b-f16 1b-f16 100m-f16 8b-q4_k_m}
if [[ -n ${GPU_MODELS:-} ]]; then
  kept=()
  for row in "${table[@]}"; do
    [[ " $GPU_MODELS " == *" ${row%% *} "* ]] && kept+=("$row")
  done
  table=("${kept[@]}")
fi
if [[ $mode == run && ${SKIP_MODELS:-0} != 1 ]]; then
  step "making the inflated models in $models (in parallel)"
  pids=()
  for row in "${table[@]}"; do
    read -r name src args <<<"$row"
    # shellcheck disable=SC2086
    "$bin_parspec" make-model --inflate "$src" $args -o "$models/$name.gguf" \
      >"$out/make-$name.log" 2>&1 &
    pids+=($!)
  done
  for pid in "${pids[@]}"; do wait "$pid" || { echo "make-model failed: see $out/make-*.log"; exit 1; }; done
fi
model_path() {  # name source
  if [[ $mode == dry ]]; then echo "$2"; else echo "$models/$1.gguf"; fi
}

# GPU_FOCUS=kernels leaves out the strategies, llama.cpp's speculation and the server
# under load: the kernels' figures alone, in a few minutes. GPU_FOCUS=strategies
# keeps the strategies' main tables (EasySpec's, auto's and ppd's among them) and
# llama.cpp's speculation beside the kernels' figures.
if ! focus_skips strategies; then
# Strategies on the GPU against ar (greedy, the bench fails if one differs), while
# llama.cpp builds (each table's speedups are against ar in the same bench): the
# 8B-class Q4_0 target with the 100M-class drafter, or the zoo pair in a dry run.
if [[ $mode == dry ]]; then
  pair=(-m models/target.gguf -md models/draft.gguf)
  strategies=ar,sd,tree
else
  pair=(-m "$models/8b-q4_0.gguf" -md "$models/100m-f16.gguf")
  # The trees at their defaults and at shapes of a few rows (what a flat L(n) pays for).
  strategies=ar,sd,sd:2,sd:4,sd:8,tree,tree:d2c2,dyntree,dyntree:d3c2w4,pearl
fi
step "parspec bench: $strategies"
budgeted 150 "$bin_parspec" bench "${pair[@]}" "${device[@]}" --strategies "$strategies" \
  --prompts code,prose --max-prompts 3 -n 64 -t 2 --md "$out/strategies.md" --json "$out/strategies.json" --svg "$out/strategies.svg" \
  >"$out/strategies.txt" 2>&1 || echo "parspec bench failed or timed out: see $out/strategies.txt"
# The strategies of the other seed systems, apart: one failing leaves the table above whole.
more=ar,specinfer,cosine,easyspec
[[ $mode == dry ]] && more=ar,specinfer
step "parspec bench: $more"
budgeted 120 "$bin_parspec" bench "${pair[@]}" "${device[@]}" --strategies "$more" \
  --prompts code,prose --max-prompts 3 -n 64 -t 2 --md "$out/strategies-more.md" --json "$out/strategies-more.json" \
  >"$out/strategies-more.txt" 2>&1 || echo "parspec bench failed or timed out: see $out/strategies-more.txt"

# PEARL with the drafter's stream at the target's priority (by default a drafter
# beside its target on the GPU goes first): what the priority brings while both run.
if ! focus_skips strategies-extra; then
step "parspec bench with PARSPEC_CUDA_DRAFT_PRIORITY=normal: ar,pearl"
budgeted 90 env PARSPEC_CUDA_DRAFT_PRIORITY=normal "$bin_parspec" bench "${pair[@]}" "${device[@]}" \
  --strategies ar,pearl --prompts code,prose --max-prompts 3 -n 64 -t 2 \
  --md "$out/strategies-pearl-normal.md" --json "$out/strategies-pearl-normal.json" \
  >"$out/strategies-pearl-normal.txt" 2>&1 || echo "parspec bench failed or timed out: see $out/strategies-pearl-normal.txt"
fi

# EasySpec's drafting time per step with layer groups of N = 1 and 2 (the goal:
# N = 2 at most 0.7× N = 1, α within 7%), sd with the same drafter and γ beside it.
for n in 1 2; do
  step "parspec bench: ar,sd,easyspec --lp-size $n"
  budgeted 90 "$bin_parspec" bench "${pair[@]}" "${device[@]}" --strategies ar,sd,easyspec \
    --draft-max 4 --lp-size "$n" --prompts code,prose --max-prompts 2 -n 64 -t 2 \
    --json "$out/easyspec-$n.json" >"$out/easyspec-$n.txt" 2>&1 ||
    echo "parspec bench (easyspec, N = $n) failed or timed out: see $out/easyspec-$n.txt"
done

# auto (calibrates on the device, then runs its choice) and ppd (the target's own
# prompt tokens, no drafter), apart for the same reason.
last=ar,auto,ppd
[[ $mode == dry ]] && last=ar,auto
step "parspec bench: $last"
budgeted 150 "$bin_parspec" bench "${pair[@]}" "${device[@]}" --strategies "$last" \
  --prompts code,prose --max-prompts 3 -n 64 -t 2 --md "$out/strategies-auto.md" --json "$out/strategies-auto.json" \
  >"$out/strategies-auto.txt" 2>&1 || echo "parspec bench failed or timed out: see $out/strategies-auto.txt"

# The 8B-class Q4_K_M target (the files most users run) with the same drafter:
# its Q4_K/Q6_K matmuls take 2 to 8 rows for less over one row's time than
# Q4_0's (an H200: L(8)/L(1) 1.33 against 2.0), so its chains verify cheaper.
# bench_other_target MODEL STRATEGIES: the strategies with the inflated MODEL
# as the target and the same drafter, into strategies-SUFFIX.md/.json (SUFFIX:
# MODEL without its "8b-"), where that model was made.
bench_other_target() {
  local name=$1 strategies=$2 suffix=${1#8b-}
  local target
  target=$(model_path "$name" models/target.gguf)
  [[ $mode == run && -f $target ]] || return 0
  step "parspec bench, $name target: $strategies"
  budgeted 150 "$bin_parspec" bench -m "$target" -md "${pair[3]}" "${device[@]}" \
    --strategies "$strategies" --prompts code,prose --max-prompts 3 -n 64 -t 2 \
    --md "$out/strategies-$suffix.md" --json "$out/strategies-$suffix.json" \
    >"$out/strategies-$suffix.txt" 2>&1 ||
    echo "parspec bench ($name target) failed or timed out: see $out/strategies-$suffix.txt"
}
bench_other_target 8b-q4_k_m ar,sd,sd:2,dyntree,auto

# The short prompts with the kernels not yet the default (the drafter on the host's
# CPU cores while the GPU verifies, -ngld 0, PEARL's case across devices, is below).
if ! focus_skips strategies; then
  opt_in_set=ar,sd,sd:2,tree,dyntree,pearl
  step "parspec bench with $(kernel_env candidates): $opt_in_set"
  budgeted 120 env $(kernel_env candidates) "$bin_parspec" bench "${pair[@]}" "${device[@]}" \
    --strategies "$opt_in_set" --prompts code,prose --max-prompts 3 -n 64 -t 2 \
    --md "$out/strategies-candidates.md" --json "$out/strategies-candidates.json" \
    >"$out/strategies-candidates.txt" 2>&1 ||
    echo "parspec bench failed or timed out: see $out/strategies-candidates.txt"
fi

if ! focus_skips strategies-extra; then
# A long prompt (over 2000 tokens: the bench prompts joined), where verifying a
# chain or tree attends over a long cache (past the zoo's training context its
# text may end early: --ignore-eos keeps the length).
python3 - "${pair[1]}" "$bin_parspec" "$out/long.jsonl" <<'EOF_LONG'
import json, subprocess, sys
model, binary, path = sys.argv[1:]
texts = [json.loads(l)["prompt"] for s in ("code", "prose", "math", "config")
         for l in open(f"bench/prompts/{s}.jsonl") if l.strip()]
text, n = "", 0
while n < 2000:
    text += "\n\n".join(texts) + "\n\n"
    ids = subprocess.run([binary, "tokenize", "-m", model, "--ids", "--no-escape", "-p", text],
                         capture_output=True, text=True).stdout
    n = ids.count(",") + 1
with open(path, "w") as f:
    f.write(json.dumps({"prompt": text}) + "\n")
print(f"long prompt: {n} tokens")
EOF_LONG
long=ar,sd,tree,auto
step "parspec bench on the long prompt: $long"
budgeted 150 "$bin_parspec" bench "${pair[@]}" "${device[@]}" --strategies "$long" \
  --prompts "$out/long.jsonl" -n 64 -c 4096 --ignore-eos -t 2 --md "$out/strategies-long.md" --json "$out/strategies-long.json" \
  >"$out/strategies-long.txt" 2>&1 || echo "parspec bench failed or timed out: see $out/strategies-long.txt"
# The same with the grouped attention (each key and value read once per KV head).
step "parspec bench on the long prompt with $(kernel_env grouped): $long"
budgeted 150 env $(kernel_env grouped) "$bin_parspec" bench "${pair[@]}" "${device[@]}" \
  --strategies "$long" --prompts "$out/long.jsonl" -n 64 -c 4096 --ignore-eos -t 2 \
  --md "$out/strategies-long-grouped.md" --json "$out/strategies-long-grouped.json" >"$out/strategies-long-grouped.txt" 2>&1 ||
  echo "parspec bench failed or timed out: see $out/strategies-long-grouped.txt"

# PPD's hardware-aware stage on the device: tune --ppd sizes the trees by this
# GPU's L(n), then ppd runs with them beside ar (the auto bench above ran ppd's
# default trees).
if [[ $mode == run ]]; then
  ppd_file=${pair[1]%.gguf}.ppd.gguf
  step "parspec tune --ppd on the device"
  budgeted 90 "$bin_parspec" tune -m "${pair[1]}" --ppd "$ppd_file" "${device[@]}" -t 2 \
    --ppd-max-budget 32 --measure 2 --ppd-tree-out "$out/ppd.tree" >"$out/tune-ppd.txt" 2>&1 ||
    echo "tune --ppd failed or timed out: see $out/tune-ppd.txt"
  if [[ -s $out/ppd.tree ]]; then
    step "parspec bench: ar,ppd with the tuned trees"
    budgeted 90 "$bin_parspec" bench -m "${pair[1]}" "${device[@]}" --strategies ar,ppd \
      --ppd-tree "$out/ppd.tree" --prompts code,prose --max-prompts 3 -n 64 -t 2 \
      --md "$out/strategies-ppd-tuned.md" --json "$out/strategies-ppd-tuned.json" \
      >"$out/strategies-ppd-tuned.txt" 2>&1 ||
      echo "parspec bench (ppd, tuned trees) failed or timed out: see $out/strategies-ppd-tuned.txt"
  fi
fi

# The 8B-class F16 target with the same drafter: its verification runs the F16
# matmuls on the tensor cores.
bench_other_target 8b-f16 ar,sd,dyntree,auto

fi

fi

if [[ -n $llama_pid ]]; then
  step "waiting for the llama.cpp build"
  wait "$llama_pid" || { echo "llama.cpp build failed: see $out/llama_build.log"; llama_bin=""; }
fi

# The drafter on the CPU after the build, while the host's cores are idle.
cpu_draft_set=ar,sd,pearl
[[ $mode == dry ]] && cpu_draft_set=ar,sd
if ! focus_skips strategies-extra; then
  step "parspec bench with the drafter on the CPU (-ngld 0): $cpu_draft_set"
  budgeted 120 "$bin_parspec" bench "${pair[@]}" "${device[@]}" -ngld 0 --strategies "$cpu_draft_set" \
    --prompts code,prose --max-prompts 2 -n 48 -t "$(nproc)" --md "$out/strategies-cpu-draft.md" \
    --json "$out/strategies-cpu-draft.json" >"$out/strategies-cpu-draft.txt" 2>&1 ||
    echo "parspec bench failed or timed out: see $out/strategies-cpu-draft.txt"
  # tune with both models on the GPU and no -ngld: it also tunes the drafter on
  # the CPU and says which placement runs its choice faster.
  step "parspec tune (the drafter on the GPU and on the CPU)"
  budgeted 150 "$bin_parspec" tune "${pair[@]}" "${device[@]}" -t "$(nproc)" --measure 0 \
    --cache-dir "$out/tune-cache" >"$out/tune-placement.txt" 2>&1 ||
    echo "parspec tune failed or timed out: see $out/tune-placement.txt"
fi

for row in "${table[@]}"; do
  read -r name src _ <<<"$row"
  file=$(model_path "$name" "$src")
  step "parspec bench-forward $name"
  budgeted 120 "$bin_parspec" bench-forward -m "$file" "${device[@]}" -t 2 -b "$sizes,$prefill" \
    -r "$repeat" --decode-tokens "$decode" --context 64 --json "$out/parspec-$name.json" \
    >"$out/parspec-$name.md" 2>"$out/parspec-$name.log" || echo "parspec bench-forward $name failed"
  if [[ -n $llama_bin && -x $llama_bin ]]; then
    step "llama-bench $name"
    budgeted 120 "$llama_bin" -m "$file" -ngl 99 -p 8,64,512 -n 128 -r "$repeat" -o json \
      >"$out/llama-$name.json" 2>"$out/llama-$name.log" || echo "llama-bench $name failed"
  fi
done

# llama.cpp's speculative decoding on the same files and prompts (greedy, one
# process per prompt and --draft-max; its "decoded N tokens in S seconds").
spec_bin=$models/llama.cpp/build/bin/llama-speculative-simple
if [[ $mode == run && -x $spec_bin ]] && ! focus_skips llama-spec; then
  step "llama-speculative-simple --draft-max 4, 8, 16"
  : >"$out/llama-speculative.tsv"
  for set in code prose; do
    for i in 0 1 2; do
      text=$(python3 -c 'import json, sys
lines = [json.loads(l)["prompt"] for l in open(sys.argv[1]) if l.strip()]
print(lines[int(sys.argv[2])], end="")' "bench/prompts/$set.jsonl" "$i")
      for dm in 4 8 16; do
        line=$(budgeted 60 "$spec_bin" "${pair[@]}" -ngl 99 -ngld 99 -p "$text" -n 64 --temp 0 \
          --draft-max "$dm" -c 4096 2>&1 </dev/null | tee -a "$out/llama-speculative.log" |
          grep -a 'decoded .* tokens in' | tail -1 || true)
        echo -e "$set\t$dm\t$(echo "$line" | awk '{print $2 "\t" $5}')" >>"$out/llama-speculative.tsv"
      done
    done
  done
fi

# The server on the device under load (bench/loadgen.py, closed loop: 1, 4 and 16
# clients back to back, 64 tokens each), ar and sd on the strategies' pair.
if [[ $mode == run ]] && ! focus_skips serve-load; then
  for strategy in ar sd; do
    (($(date +%s) - start < budget)) || { echo "skipped, past the time budget: serve load ($strategy)" | tee -a "$out/skipped.txt"; continue; }
    step "serve -ngl 99 --strategy $strategy under 1, 4, 16 concurrent streams"
    "$bin_parspec" serve "${pair[@]}" --strategy "$strategy" "${device[@]}" --port 0 -t 2 \
      -c 4096 -np 16 >"$out/serve-load-$strategy.log" 2>&1 &
    load_pid=$!
    port=""
    for _ in $(seq 600); do
      port=$(grep -o 'listening on http://127.0.0.1:[0-9]*' "$out/serve-load-$strategy.log" |
        grep -o '[0-9]*$' || true)
      [[ -n $port ]] && break
      sleep 0.1
    done
    if [[ -n $port ]]; then
      budgeted 120 python3 bench/loadgen.py --url "http://127.0.0.1:$port" --concurrency 1,4,16 \
        --requests 16 --max-tokens 64 --ignore-eos --prompts code,prose \
        --json "$out/serve-load-$strategy.json" >"$out/serve-load-$strategy.txt" 2>&1 ||
        echo "loadgen ($strategy) failed: see $out/serve-load-$strategy.txt"
    else
      echo "serve ($strategy) did not start: see $out/serve-load-$strategy.log"
    fi
    kill "$load_pid" 2>/dev/null || true
    wait "$load_pid" 2>/dev/null || true
  done
fi

# Decode and 8-row verification after a long context, with each attention kernel
# (the default prestaged one takes a block an SM, the others several): the
# 8B-class Q4_0 target after 2048 and 4000 committed tokens.
long_file=$(model_path 8b-q4_0 models/target.gguf)
[[ $mode == dry ]] && long_file=models/target.gguf
long_contexts="2048 4000"
[[ $mode == dry ]] && long_contexts=200
if [[ -f $long_file ]] && ! focus_skips long-context; then
  for context in $long_contexts; do
    for variant in default per-head grouped; do
      step "parspec bench-forward 8b-q4_0 after $context tokens, attention: $variant"
      budgeted 60 env $(kernel_env "$variant") "$bin_parspec" bench-forward -m "$long_file" \
        "${device[@]}" -t 2 -b 1,8 -r "$repeat" --decode-tokens "$decode" --context "$context" \
        --json "$out/long-$context-$variant.json" >/dev/null 2>&1 ||
        echo "8b-q4_0 after $context tokens ($variant) failed"
    done
  done
fi

# What the kernels not yet the default bring, per weight type (the warp kernels,
# the tensor cores for single rows, row-major activations and the one-launch
# prefill were measured before: docs/performance-gpu.md). By default only the
# other side of the latest defaults and the candidates, and the streamed kernel's
# smaller blocks (at 8 rows an 8B-class model's wo and down give the default's
# blocks of 64 rows to half the SMs), so that the time budget leaves room for
# llama.cpp's speculative decoding and the server under load.
latest_variants=" candidates prefetch per-head prefill-serial prefill-slices rows-none prefill-tiles split-in-block warp fused-q8k stream-mixed stream-wide stream-split stream-dual prefetch-operands "
for row in "${table[@]}"; do
  read -r name src args <<<"$row"
  case $args in
    *q4_0* | *q8_0*) [[ ${PARSPEC_CUDA_MATMUL:-} != warp ]] && variants=(candidates prefetch prefetch-operands per-head prestaged4 prefill-serial rows-none fused-rope stream-split stream-dual stream-mixed stream-persistent rows-persistent prefill-slices plain rows-narrow in-split paired rows-wide norm-once stream attention-tiled fused fused-norm stream-wide rows-wide4 mma-stream paired-all pipelined) || variants=() ;;
    *f16*) variants=(split-in-block candidates prefetch prefetch-operands per-head prestaged4 prefill-tiles unfused in-split fused-norm norm-once) ;;
    *q4_k*) variants=(fused-q8k warp prefill-slices) ;;
    *) variants=() ;;
  esac
  for variant in "${variants[@]}"; do
    wanted=${GPU_VARIANTS:-$latest_variants}
    [[ $wanted != all && " $wanted " != *" $variant "* ]] && continue
    step "parspec bench-forward $name with $(kernel_env "$variant")"
    budgeted 90 env $(kernel_env "$variant") "$bin_parspec" bench-forward \
      -m "$(model_path "$name" "$src")" "${device[@]}" -t 2 -b 1,2,3,4,8,16,32,64,"$prefill" \
      -r "$repeat" --decode-tokens "$decode" --context 64 \
      --json "$out/parspec-$name-$variant.json" >/dev/null 2>&1 || echo "$name $variant failed"
  done
done

if ! focus_skips profile; then
# Where a forward's GPU time goes (PARSPEC_CUDA_PROFILE=1: kernel groups timed by
# events, kernel by kernel without graphs, the prefill of the context included):
# one row and eight rows after 64 committed tokens, and one row after 3000 (the
# prefill of the 3000 included), on the 8B-class Q4_0 target; one row after 64 on
# the 100M-class drafter (launch-bound), the 1B-class and the 8B-class F16 models;
# one and eight rows after 64 on the 8B-class Q4_K_M.
profile_file=$(model_path 8b-q4_0 models/target.gguf)
[[ $mode == dry ]] && profile_file=models/target.gguf
for shape in "8b-q4_0 1 64" "8b-q4_0 8 64" "8b-q4_0 1 3000" "100m-f16 1 64" "1b-f16 1 64" \
  "8b-f16 1 64" "8b-q4_k_m 1 64" "8b-q4_k_m 8 64"; do
  read -r name rows context <<<"$shape"
  file=$(model_path "$name" models/target.gguf)
  [[ $mode == dry ]] && file=models/target.gguf
  [[ -f $file ]] || continue
  step "GPU time by kernel group: $name, $rows row(s) after $context tokens"
  budgeted 60 env PARSPEC_CUDA_PROFILE=1 "$bin_parspec" \
    bench-forward -m "$file" "${device[@]}" -t 2 -b "$rows" -r 3 --decode-tokens 8 \
    --context "$context" >/dev/null 2>"$out/profile-$name-$rows-$context.txt" ||
    echo "profile $name $rows/$context failed"
done
# Kernel by kernel, where Nsight Compute is installed: the time and DRAM bytes of
# each kernel of one forward (about 326 launches on this model) of 1 and of 8 rows.
# A decode step launches 326 kernels, the prefill before them a few more: the
# window after the prefill and two decode steps holds a decode step, and the one
# after four decode steps holds the first forward of 8 rows, which the summary
# cuts out at its embedding launches.
if [[ $mode == run && -f $profile_file ]] && command -v ncu >/dev/null; then
  for shape in "1 652 326" "8 1304 978"; do
    read -r rows skip count <<<"$shape"
    step "Nsight Compute: the kernels of a forward of $rows row(s)"
    budgeted 90 env PARSPEC_CUDA_GRAPHS=0 ncu --clock-control none --csv --print-units base \
      --metrics gpu__time_duration.sum,dram__bytes_read.sum --launch-skip "$skip" --launch-count "$count" \
      "$bin_parspec" bench-forward -m "$profile_file" "${device[@]}" -t 2 -b "$rows" -r 1 \
      --decode-tokens 2 --context 64 >"$out/ncu-$rows.csv" 2>/dev/null || echo "ncu $rows failed"
  done
fi
# Why the slowest kernels take their time (Nsight Compute's speed of light,
# occupancy and warp stall sections, every metric they collect): the first
# launches of the streamed tensor-core matmul's one-tile instance (8 rows: the
# context's prefill before them takes the four-tile one), of the one-row matmul, of
# the attention kernels (a decode step) and of the prefill tiles (128 rows: up to
# 64 go to the streamed kernel), on the 8B-class Q4_0 target; the one-row
# tensor-core kernels of the 8B-class F16 and Q4_K_M models (their patterns name
# the one-tile instances, which the 64-token prefill before the decode steps does
# not launch). Nsight Compute names template arguments as "(int)1" and "(bool)1";
# a pattern has no spaces.
if [[ $mode == run && -f $profile_file ]] && command -v ncu >/dev/null; then
  for probe in "stream 8 matmul_stream_kernel<[^,]+,..int.1," "gemv 1 matmul_gemv_kernel" \
    "attention 1 attention_split_kernel<.bool.1 per-head" "prestaged 1 attention_prestaged_kernel" \
    "prefill 128 matmul_prefill_grouped_kernel" \
    "half 1 matmul_half_mma_kernel<[^,]+,..int.1, - 8b-f16" \
    "kquant 1 matmul_k_mma_kernel<[^,]+,..int.1, - 8b-q4_k_m"; do
    read -r label rows pattern variant model <<<"$probe"
    [[ $variant == - ]] && variant=""
    probe_file=$profile_file
    if [[ -n ${model:-} ]]; then
      probe_file=$(model_path "$model" models/target.gguf)
      [[ -f $probe_file ]] || continue
    fi
    step "Nsight Compute: why $pattern takes its time ($rows row(s))"
    budgeted 45 env PARSPEC_CUDA_GRAPHS=0 $(kernel_env "${variant:-none}") ncu --clock-control none --csv --page raw \
      --section SpeedOfLight --section Occupancy --section WarpStateStats --section LaunchStats \
      --section ComputeWorkloadAnalysis \
      --kernel-name-base demangled -k "regex:$pattern" --launch-count 3 \
      "$bin_parspec" bench-forward -m "$probe_file" "${device[@]}" -t 2 -b "$rows" -r 1 \
      --decode-tokens 2 --context 64 >"$out/ncu-stalls-$label.csv" 2>/dev/null ||
      echo "ncu ($label) failed"
  done
fi

# What the CUDA graphs bring (decode and L(8) of the two extremes launched kernel by
# kernel), and what programmatic dependent launches bring (PARSPEC_CUDA_PDL=0: each
# kernel launched only after the one before it), on the same two models.
if [[ $mode == dry ]]; then graph_rows=(zoo-draft); else graph_rows=(100m-f16 8b-q4_0); fi
for name in "${graph_rows[@]}"; do
  file=$(model_path "$name" models/draft.gguf)
  [[ -f $file ]] || continue
  for setting in "nographs PARSPEC_CUDA_GRAPHS=0 without graphs" \
    "nopdl PARSPEC_CUDA_PDL=0 without dependent launches"; do
    read -r suffix variable what <<<"$setting"
    step "parspec bench-forward $name $what"
    budgeted 60 env "$variable" "$bin_parspec" bench-forward -m "$file" "${device[@]}" -t 2 \
      -b 1,8 -r "$repeat" --decode-tokens "$decode" --context 64 \
      --json "$out/parspec-$name-$suffix.json" >/dev/null 2>&1 || echo "$name $what failed"
  done
done

fi

if [[ -n $tf_pid ]]; then
  step "waiting for the transformers checks"
  wait "$tf_pid" || true
  grep -E "^(qwen3|gemma3|qwen3moe)|FAILED" "$out/transformers.txt" | tee -a "$out/tests.txt" || true
fi

step "summary"
python3 - "$out" "${table[@]}" <<'EOF' | tee "$out/summary.md"
import csv, json, os, re, sys
out, rows = sys.argv[1], [r.split()[0] for r in sys.argv[2:]]
def load(path):
    try:
        with open(path) as f:
            return json.load(f)
    except (OSError, ValueError):
        return None
def fmt(x, digits=1):
    return "–" if x is None else f"{x:.{digits}f}"
print(open(os.path.join(out, "machine.txt")).read().strip().replace("\n", "  \n"))
print()
skipped = os.path.join(out, "skipped.txt")
if os.path.exists(skipped):
    steps = dict.fromkeys(l.strip().split(": ", 1)[-1] for l in open(skipped) if l.strip())
    print("Past the time budget, not measured:", "; ".join(steps))
    print()
checks = os.path.join(out, "tests.txt")
if os.path.exists(checks):
    keys = ("tests (", "generate:", "serve:", "qwen3", "gemma3", "check_")
    lines = [l.strip() for l in open(checks) if l.startswith(keys)]
    if lines:
        print("Checks:  \n" + "  \n".join(lines))
        print()
print("| model | weights GiB | parspec decode tok/s | llama.cpp tg128 tok/s | ratio | parspec of copy roofline "
      "| llama.cpp of copy roofline | L(8)/L(1) | L(32)/L(1) | parspec pp512 tok/s | llama.cpp pp512 tok/s | ratio |")
print("|---|---|---|---|---|---|---|---|---|---|---|---|")
curves = []
for name in rows:
    p = load(os.path.join(out, f"parspec-{name}.json"))
    l = load(os.path.join(out, f"llama-{name}.json")) or []
    if p is None:
        print(f"| {name} | – | failed |" + " – |" * 9)
        continue
    r = p["results"][0]
    lat = {int(k): v for k, v in r["latency_ms"].items()}
    gib = p["weight_bytes"] / 2**30
    dec = r["decode_tok_per_s"]
    bw = r.get("copy_gb_per_s") or r.get("read_gb_per_s")
    tg = next((x["avg_ts"] for x in l if x.get("n_gen") == 128 and x.get("n_prompt") == 0), None)
    pp = next((x["avg_ts"] for x in l if x.get("n_prompt") == 512 and x.get("n_gen") == 0), None)
    big = max(lat)
    ours_pp = big / lat[big] * 1000 if big >= 64 else None
    share = lambda tps: None if tps is None or not bw else tps * p["weight_bytes"] / (bw * 1e9) * 100
    ratio = lambda a, b: None if a is None or b is None else a / b
    l1, l8, l32 = lat.get(1), lat.get(8), lat.get(32)
    pct = lambda x: "–" if x is None else f"{x:.0f}%"
    print(f"| {name} | {gib:.2f} | {fmt(dec)} | {fmt(tg)} | {fmt(ratio(dec, tg), 2)} | {pct(share(dec))} "
          f"| {pct(share(tg))} | {fmt(ratio(l8, l1), 2)} | {fmt(ratio(l32, l1), 2)} | {fmt(ours_pp, 0)} "
          f"| {fmt(pp, 0)} | {fmt(ratio(ours_pp, pp), 2)} |")
    curves.append((name, lat))
graph_rows = [(n, load(os.path.join(out, f"parspec-{n}-nographs.json")),
               load(os.path.join(out, f"parspec-{n}.json")),
               load(os.path.join(out, f"parspec-{n}-nopdl.json"))) for n in rows]
graph_rows = [(n, off, on, pdl) for n, off, on, pdl in graph_rows if off and on]
if graph_rows:
    print()
    print("| model | decode tok/s with CUDA graphs and dependent launches | without graphs "
          "| graphs without dependent launches "
          "| L(8) ms with both | without graphs | graphs without dependent launches |")
    print("|---|---|---|---|---|---|---|")
    for n, off, on, pdl in graph_rows:
        a, b = on["results"][0], off["results"][0]
        c = pdl["results"][0] if pdl else None
        print(f"| {n} | {a['decode_tok_per_s']:.1f} | {b['decode_tok_per_s']:.1f} "
              f"| {fmt(c['decode_tok_per_s'] if c else None)} "
              f"| {fmt(a['latency_ms'].get('8'), 2)} | {fmt(b['latency_ms'].get('8'), 2)} "
              f"| {fmt(c['latency_ms'].get('8') if c else None, 2)} |")
variant_labels = [
    ("", "default"),
    ("-candidates", "candidates: stream-split where it takes a launch, else stream-dual, and prefetch-operands"),
    ("-prefetch", "each matmul block's weight rows requested into L2 before it waits for the kernel before it"),
    ("-prefetch-operands", "the first weights loaded into registers or shared memory before that wait"),
    ("-per-head", "attention by the per-head kernel for every row count (the default before the prestaged one)"),
    ("-prestaged4", "the prestaged attention for up to 4 rows, not 8"),
    ("-prefill-serial", "prefill tiles with one group of warps walking all of K (the default before the groups)"),
    ("-split-in-block", "F16/BF16 input split by every lane in every block (before the split kernel and the pairs)"),
    ("-prefill-tiles", "more than 64 rows in tiles of 64 × 64 a block, every weight type"),
    ("-prefill-slices", "more than 64 rows in launches of 32 of the tensor-core kernel"),
    ("-plain", "tensor cores loading their own operands (5 to 32 rows)"),
    ("-rows-narrow", "2 to 4 rows with one weight row a lane"),
    ("-unfused", "no fused gate/up and q/k/v kernels"),
    ("-fused-rope", "q/k/v matmul, RoPE and KV store in one kernel (not gate/up)"),
    ("-rows-wide", "2 to 8 rows on the one-row kernel's way, 2 or 4 weight rows a lane"),
    ("-rows-wide4", "the same with 4 weight rows a lane everywhere"),
    ("-mma", "tensor cores for every row count"), ("-warp", "warp (dp4a)"),
    ("-row-major", "row-major activations"),
    ("-stream", "tensor cores streamed with 16 weight rows a block"),
    ("-stream-wide", "the same with 32 weight rows a block where the grid stays large"),
    ("-stream-mixed", "the default's 64 weight rows a block where the grid has a block for every SM, else 16"),
    ("-stream-split", "up to 8 rows: each tile's chains over 4 blocks where tiles of 64 rows are fewer than SMs"),
    ("-stream-dual", "up to 8 rows: the default's blocks of 64 weight rows, two an SM"),
    ("-stream-persistent", "the default's streaming with one block an SM taking its tiles in turn, the copies running on across tiles"),
    ("-rows-persistent", "that from 2 rows, instead of the few-rows kernel for 2 to 4"),
    ("-rows-none", "the default streaming from 2 rows, instead of the few-rows kernel for 2 and 3"),
    ("-mma-stream", "tensor cores streamed for every row count"),
    ("-paired", "one-row kernel, two lanes a chain where a matrix has few rows"),
    ("-paired-all", "the same for every matrix"),
    ("-fused", "gate/up with SwiGLU, and q/k/v with RoPE and the KV store, in one kernel each"),
    ("-fused-norm", "one row: RMSNorm in the matmuls after it, residual adds in those before"),
    ("-fused-q8k", "Q8_K activations written by the norm and SwiGLU kernels"),
    ("-norm-once", "one row: residual adds in wo/down, whose last block then normalizes the row"),
    ("-pipelined", "tensor cores, four blocks' loads before their mmas"),
    ("-mma-pipelined", "the same for every row count"),
    ("-in-split", "attention splits merged by their last block"),
    ("-attention-tiled", "attention: a tile of rows sharing each staged chunk of keys"),
    ("-opt-in", "opt-in: in-split merge, one-launch prefill, pipelined"),
]
warp_rows = [(n, [(label, load(os.path.join(out, f"parspec-{n}{suffix}.json")))
                  for suffix, label in variant_labels]) for n in rows]
warp_rows = [r for r in warp_rows if r[1][0][1] and any(res for _, res in r[1][1:])]
if warp_rows:
    print()
    print("| model | matmul | decode tok/s | L(1) ms | L(2) ms | L(4) ms | L(8) ms | L(16) ms "
          "| L(32) ms | L(64) ms | pp512 tok/s |")
    print("|---|---|---|---|---|---|---|---|---|---|---|")
    for n, results in warp_rows:
        for label, res in results:
            if res is None:
                continue
            r = res["results"][0]
            lat = r["latency_ms"]
            pp = lat.get("512")
            print(f"| {n} | {label} | {r['decode_tok_per_s']:.1f} | {fmt(lat.get('1'), 2)} "
                  f"| {fmt(lat.get('2'), 2)} | {fmt(lat.get('4'), 2)} | {fmt(lat.get('8'), 2)} | {fmt(lat.get('16'), 2)} "
                  f"| {fmt(lat.get('32'), 2)} | {fmt(lat.get('64'), 2)} "
                  f"| {fmt(512 / pp * 1000 if pp else None, 0)} |")
    # Each variant against the default of the same run: what promoting it would bring
    # (decode and prefill: > 1 is faster; L(n): < 1 is faster).
    print()
    print("| model | variant | decode × default | L(1) × | L(2) × | L(3) × | L(4) × | L(8) × "
          "| L(32) × | L(64) × | L(512) × |")
    print("|---|---|---|---|---|---|---|---|---|---|---|")
    for n, results in warp_rows:
        base = results[0][1]["results"][0]
        for label, res in results[1:]:
            if res is None:
                continue
            r = res["results"][0]
            ratio = lambda key: (r["latency_ms"].get(key) / base["latency_ms"][key]
                                 if r["latency_ms"].get(key) and base["latency_ms"].get(key)
                                 else None)
            print(f"| {n} | {label} | {r['decode_tok_per_s'] / base['decode_tok_per_s']:.3f} "
                  f"| {fmt(ratio('1'), 3)} | {fmt(ratio('2'), 3)} | {fmt(ratio('3'), 3)} "
                  f"| {fmt(ratio('4'), 3)} "
                  f"| {fmt(ratio('8'), 3)} | {fmt(ratio('32'), 3)} "
                  f"| {fmt(ratio('64'), 3)} | {fmt(ratio('512'), 3)} |")
half_rows = [(n, load(os.path.join(out, f"parspec-{n}.json")),
              load(os.path.join(out, f"parspec-{n}-half-warp.json"))) for n in rows]
half_rows = [r for r in half_rows if r[1] and r[2]]
if half_rows:
    print()
    print("F16 weights: the tensor cores (default) against the warp kernel "
          "(PARSPEC_CUDA_HALF_MATMUL=warp):")
    print()
    print("| model | matmul | decode tok/s | L(1) ms | L(8) ms | L(32) ms | L(64) ms | pp512 tok/s |")
    print("|---|---|---|---|---|---|---|---|")
    for n, default, half in half_rows:
        for label, res in (("tensor cores (default)", default), ("warp", half)):
            r = res["results"][0]
            lat = r["latency_ms"]
            pp = lat.get("512")
            print(f"| {n} | {label} | {r['decode_tok_per_s']:.1f} | {fmt(lat.get('1'), 2)} "
                  f"| {fmt(lat.get('8'), 2)} | {fmt(lat.get('32'), 2)} | {fmt(lat.get('64'), 2)} "
                  f"| {fmt(512 / pp * 1000 if pp else None, 0)} |")
def all_rows(path):
    data = load(path) or {}
    rows = data.get("results", [])
    sets = {r["prompt_set"] for r in rows}
    which = "all" if "all" in sets else next(iter(sets), None)
    return {r["strategy"]: r for r in rows if r["prompt_set"] == which}
easyspec_runs = {n: all_rows(os.path.join(out, f"easyspec-{n}.json")) for n in (1, 2)}
easyspec_runs = {n: r for n, r in easyspec_runs.items() if "easyspec" in r}
if easyspec_runs:
    print()
    print("EasySpec by layer-group size N (`--strategies ar,sd,easyspec --draft-max 4 --lp-size N`, "
          "code and prose, 2 prompts each, 64 tokens):")
    print()
    print("| N | easyspec draft ms/step | verify ms/step | α | τ | × ar | sd draft ms/step | sd α | sd × ar |")
    print("|---|---|---|---|---|---|---|---|---|")
    for n, r in sorted(easyspec_runs.items()):
        e, sd = r["easyspec"], r.get("sd", {})
        print(f"| {n} | {e['t_draft_ms']:.2f} | {e['t_verify_ms']:.2f} | {e['alpha']:.3f} | {e['tau']:.2f} "
              f"| {e['speedup']:.2f} | {fmt(sd.get('t_draft_ms'), 2)} | {fmt(sd.get('alpha'), 3)} "
              f"| {fmt(sd.get('speedup'), 2)} |")
for md, title in (("strategies.md", ""), ("strategies-more.md", ""), ("strategies-auto.md", ""),
                  ("strategies-ppd-tuned.md", "ppd with the trees tune --ppd sized"),
                  ("strategies-long.md", "A prompt of over 2000 tokens"),
                  ("strategies-long-grouped.md", "The same with PARSPEC_CUDA_ATTENTION=grouped"),
                  ("strategies-candidates.md",
                   "With the candidate kernels (stream-split-dual, prefetch-operands)"),
                  ("strategies-cpu-draft.md", "The drafter on the CPU (-ngld 0)"),
                  ("strategies-f16.md", "The 8B-class F16 target"),
                  ("strategies-q4_k_m.md", "The 8B-class Q4_K_M target"),
                  ("strategies-pearl-normal.md",
                   "PEARL with the drafter's stream at normal priority (PARSPEC_CUDA_DRAFT_PRIORITY=normal)")):
    path = os.path.join(out, md)
    if os.path.exists(path):
        print()
        if title:
            print(f"**{title}**")
            print()
        print(open(path).read().strip())
placement = os.path.join(out, "tune-placement.txt")
if os.path.exists(placement):
    lines = [l.rstrip() for l in open(placement)]
    start = next((i for i, l in enumerate(lines) if l.startswith("drafter placement")), None)
    if start is not None:
        print()
        print("`parspec tune` with both models on the GPU and no -ngld:")
        print()
        print("```")
        print("\n".join(lines[start:start + 4]))
        print("```")
classes = {"8b-q4_0": "8B-class Q4_0", "100m-f16": "100M-class F16", "1b-f16": "1B-class F16",
           "8b-f16": "8B-class F16"}
profiles = (re.fullmatch(r"profile-(.+)-(\d+)-(\d+)\.txt", f) for f in sorted(os.listdir(out)))
for m in sorted(filter(None, profiles), key=lambda m: (m.group(1), int(m.group(2)), int(m.group(3)))):
    name, rows, context = m.groups()
    path = os.path.join(out, m.group(0))
    lines = [l.rstrip() for l in open(path) if l.startswith("  ") or l.startswith("GPU time")]
    if lines:
        model = classes.get(name, name)
        print()
        print(f"GPU time by kernel group, {model}, {rows} row(s) after {context} tokens"
              " (PARSPEC_CUDA_PROFILE=1, no graphs, the context's prefill among the passes):")
        print()
        print("```")
        print("\n".join(lines))
        print("```")
for rows in ("1", "8"):
    path = os.path.join(out, f"ncu-{rows}.csv")
    if not os.path.exists(path):
        continue
    kernels = {}
    for rec in csv.DictReader(l for l in open(path) if l.startswith('"')):
        k = kernels.setdefault(rec["ID"], {"name": rec["Kernel Name"], "grid": rec["Grid Size"]})
        k[rec["Metric Name"]] = float(rec["Metric Value"].replace(",", ""))
    # One forward of `rows` rows: from its embedding launch to the next forward's.
    launches = [kernels[i] for i in sorted(kernels, key=int)]
    embeds = [i for i, k in enumerate(launches) if "embed_kernel" in k["name"]]
    first = next((i for i in embeds if re.match(rf"\(\s*{rows}\s*,", launches[i]["grid"])), None)
    end = next((i for i in embeds if first is not None and i > first), None)
    if end is not None:  # else the window as it is (a decode step's launches, rotated)
        kernels = {str(i): k for i, k in enumerate(launches[first:end])}
    groups = {}
    for k in kernels.values():
        name = re.sub(r"\(.*", "", k["name"]).replace("(anonymous namespace)::", "")
        name = name.replace("unnamed>::", "").replace("void ", "")
        g = groups.setdefault((name, k["grid"]), [0, 0.0, 0.0])
        g[0] += 1
        g[1] += k.get("gpu__time_duration.sum", 0.0)
        g[2] += k.get("dram__bytes_read.sum", 0.0)
    if groups:
        total = sum(g[1] for g in groups.values())
        print()
        print(f"Nsight Compute, 8B-class Q4_0, the kernels of one forward of {rows} row(s) after 64 "
              f"tokens (no graphs; {len(kernels)} launches, {total / 1e3:.0f} µs of kernel time):")
        print()
        print("| kernel | grid | launches | µs each | GB/s from DRAM |")
        print("|---|---|---|---|---|")
        for (name, grid), (n, ns, b) in sorted(groups.items(), key=lambda x: -x[1][1]):
            print(f"| {name} | {grid} | {n} | {ns / n / 1e3:.2f} | {b / ns if ns else 0:.0f} |")
def ncu_kernels(path):
    """Per kernel launch, {metric: value} from ncu's CSV (long or wide form)."""
    records = list(csv.reader(l for l in open(path) if l.startswith('"')))
    if not records:
        return []
    head = records[0]
    kernels = {}
    if "Metric Name" in head:
        at = {name: i for i, name in enumerate(head)}
        for rec in records[1:]:
            k = kernels.setdefault(rec[at["ID"]], {"Kernel Name": rec[at["Kernel Name"]]})
            k[rec[at["Metric Name"]]] = rec[at["Metric Value"]]
        return list(kernels.values())
    out_rows = []
    for rec in records[1:]:
        if len(rec) == len(head) and rec[0] not in ("", "ID"):
            out_rows.append(dict(zip(head, rec)))
    return out_rows
def number(text):
    try:
        return float(str(text).replace(",", ""))
    except ValueError:
        return None
for label in ("stream", "gemv", "attention", "prestaged", "prefill", "half", "kquant"):
    path = os.path.join(out, f"ncu-stalls-{label}.csv")
    if not os.path.exists(path):
        continue
    launches = ncu_kernels(path)
    if not launches:
        continue
    print()
    model = {"half": "8B-class F16", "kquant": "8B-class Q4_K_M"}.get(label, "8B-class Q4_0")
    print(f"Nsight Compute, {model}, why the first {label} launches take their time "
          f"(ncu-stalls-{label}.csv has every metric):")
    print()
    print("| kernel | µs | registers | achieved occupancy % | issue active % | DRAM % of peak | top stalls (cycles per issue) | busiest pipes (% of peak) |")
    print("|---|---|---|---|---|---|---|---|")
    for k in launches:
        def pick(*names):
            for n in names:
                if n in k and number(k[n]) is not None:
                    return number(k[n])
            return None
        stalls = sorted(((number(v), n) for n, v in k.items()
                         if "issue_stalled" in n and n.endswith("per_issue_active.ratio")
                         and number(v) is not None), reverse=True)[:4]
        stall_text = ", ".join(f"{re.sub(r'.*issue_stalled_|_per_issue_active.ratio', '', n)} {v:.1f}"
                               for v, n in stalls)
        pipes = {}
        for n, v in k.items():
            m = re.fullmatch(r"sm__(?:inst_executed_pipe|pipe)_(\w+?)(?:_cycles_active)?"
                             r"\.avg\.pct_of_peak_sustained_(?:active|elapsed)", n)
            if m and number(v) is not None:
                pipes[m.group(1)] = max(pipes.get(m.group(1), 0.0), number(v))
        pipe_text = ", ".join(f"{n} {v:.0f}" for n, v in
                              sorted(pipes.items(), key=lambda x: -x[1])[:4])
        name = k.get("Kernel Name", "?").replace("(anonymous namespace)::", "")
        name = re.sub(r"\(parspec::cuda::WeightKind\)", "", name.replace("void ", ""))
        name = re.sub(r"\(.*", "", name.replace("parspec::cuda::", ""))
        duration = pick("gpu__time_duration.sum")
        print(f"| {name} | {fmt(duration / 1e3 if duration else None, 2)} "
              f"| {fmt(pick('launch__registers_per_thread'), 0)} "
              f"| {fmt(pick('sm__warps_active.avg.pct_of_peak_sustained_active'), 1)} "
              f"| {fmt(pick('smsp__issue_active.avg.pct_of_peak_sustained_active'), 1)} "
              f"| {fmt(pick('dram__throughput.avg.pct_of_peak_sustained_elapsed', 'gpu__dram_throughput.avg.pct_of_peak_sustained_elapsed'), 1)} "
              f"| {stall_text or '–'} | {pipe_text or '–'} |")
for strategy in ("ar", "sd"):
    path = os.path.join(out, f"serve-load-{strategy}.txt")
    if os.path.exists(path):
        print()
        print(f"serve -ngl 99 --strategy {strategy} -np 16, bench/loadgen.py --concurrency 1,4,16 "
              "--requests 16 --max-tokens 64 --ignore-eos:")
        print()
        print(open(path).read().strip())
spec = os.path.join(out, "llama-speculative.tsv")
if os.path.exists(spec):
    sums = {}
    for line in open(spec):
        parts = line.rstrip("\n").split("\t")
        if len(parts) == 4 and parts[2] and parts[3]:
            key = (parts[0], int(parts[1]))
            n, sec = sums.get(key, (0, 0.0))
            sums[key] = (n + int(parts[2]), sec + float(parts[3]))
    if sums:
        print()
        print("llama.cpp llama-speculative-simple (same files, -ngl 99 -ngld 99, greedy, 64 tokens):")
        print()
        print("| prompt set | --draft-max | tok/s |")
        print("|---|---|---|")
        for (s, dm), (n, sec) in sorted(sums.items()):
            print(f"| {s} | {dm} | {n / sec:.1f} |")
# The issues' goals, from the tables above (each speedup against ar in its own bench).
def bench_rows(name):
    data = load(os.path.join(out, f"{name}.json")) or {}
    return {r["strategy"]: r for r in data.get("results", []) if r.get("prompt_set") == "all"}
strategy_rows = {}
for name in ("strategies", "strategies-more", "strategies-auto"):
    for k, v in bench_rows(name).items():
        if k != "ar":
            strategy_rows[k] = v
goals = []
long_runs = {}
for path in sorted(os.listdir(out)):
    m = re.fullmatch(r"long-(\d+)-([a-z-]+)\.json", path)
    p = load(os.path.join(out, path)) if m else None
    if p:
        long_runs[(int(m.group(1)), m.group(2))] = p["results"][0]
if long_runs:
    print()
    print("After a long context (8B-class Q4_0; decode tok/s, then L(8) in ms; in brackets the "
          "time against the default attention's, under 1 is faster):")
    print()
    print("| committed tokens | attention | decode tok/s | L(8) ms |")
    print("|---|---|---|---|")
    for (context, variant), r in sorted(long_runs.items()):
        base = long_runs.get((context, "default"))
        dec, l8 = r["decode_tok_per_s"], r["latency_ms"].get("8")
        rel = lambda a, b: f" ({a / b:.2f})" if a and b and variant != "default" else ""
        b_dec = base["decode_tok_per_s"] if base else None
        b_l8 = base["latency_ms"].get("8") if base else None
        print(f"| {context} | {variant} | {fmt(dec)}{rel(b_dec, dec)} | {fmt(l8, 2)}{rel(l8, b_l8)} |")
def goal(text, value, target, higher=True, digits=2):
    bound = f"{'≥' if higher else '≤'} {target}"
    if value is None:
        goals.append(f"| {text} | – | {bound} | – |")
        return
    met = value >= target if higher else value <= target
    goals.append(f"| {text} | {value:.{digits}f} | {bound} | {'yes' if met else 'no'} |")
def decode_ratio(name, variant=""):
    p = load(os.path.join(out, f"parspec-{name}{variant}.json"))
    l = load(os.path.join(out, f"llama-{name}.json")) or []
    tg = next((x["avg_ts"] for x in l if x.get("n_gen") == 128 and x.get("n_prompt") == 0), None)
    return p["results"][0]["decode_tok_per_s"] / tg if p and tg else None
def lat_ratio(name, n, variant=""):
    p = load(os.path.join(out, f"parspec-{name}{variant}.json"))
    lat = p["results"][0]["latency_ms"] if p else {}
    return lat[str(n)] / lat["1"] if str(n) in lat and "1" in lat else None
for name, target in (("8b-q4_0", 2.0), ("1b-f16", 2.0), ("8b-q8_0", 1.5), ("8b-f16", 1.25),
                     ("100m-f16", 3.0)):
    goal(f"decode × llama.cpp, {name}", decode_ratio(name), target)
def pp_ratio(name, variant=""):
    p = load(os.path.join(out, f"parspec-{name}{variant}.json"))
    l = load(os.path.join(out, f"llama-{name}.json")) or []
    pp = next((x["avg_ts"] for x in l if x.get("n_prompt") == 512 and x.get("n_gen") == 0), None)
    lat = p["results"][0]["latency_ms"] if p else {}
    return 512 / lat["512"] * 1000 / pp if "512" in lat and pp else None
for name in ("8b-q4_0", "8b-q8_0", "8b-f16", "1b-f16", "100m-f16"):
    goal(f"pp512 × llama.cpp, {name}", pp_ratio(name), 0.7)
goal("L(8)/L(1), 8b-q4_0", lat_ratio("8b-q4_0", 8), 1.15, higher=False)
goal("L(32)/L(1), 8b-q4_0", lat_ratio("8b-q4_0", 32), 1.5, higher=False)
# The Q4_0 goals on the Q4_K_M mix most users' files have.
if load(os.path.join(out, "parspec-8b-q4_k_m.json")):
    goal("decode × llama.cpp, 8b-q4_k_m (Q4_0's goal)", decode_ratio("8b-q4_k_m"), 2.0)
    goal("pp512 × llama.cpp, 8b-q4_k_m", pp_ratio("8b-q4_k_m"), 0.7)
    goal("L(8)/L(1), 8b-q4_k_m", lat_ratio("8b-q4_k_m", 8), 1.15, higher=False)
    goal("L(32)/L(1), 8b-q4_k_m", lat_ratio("8b-q4_k_m", 32), 1.5, higher=False)
# The same goals with the candidate kernels (what promoting them would give).
for name, target in (("8b-q4_0", 2.0), ("8b-f16", 1.25), ("100m-f16", 3.0)):
    if load(os.path.join(out, f"parspec-{name}-candidates.json")):
        goal(f"decode × llama.cpp, {name}, candidates", decode_ratio(name, "-candidates"), target)
        goal(f"pp512 × llama.cpp, {name}, candidates", pp_ratio(name, "-candidates"), 0.7)
if load(os.path.join(out, "parspec-8b-q4_0-candidates.json")):
    goal("L(8)/L(1), 8b-q4_0, candidates", lat_ratio("8b-q4_0", 8, "-candidates"), 1.15,
         higher=False)
    goal("L(32)/L(1), 8b-q4_0, candidates", lat_ratio("8b-q4_0", 32, "-candidates"), 1.5,
         higher=False)
# The kernels not yet the default, against the same goals.
for variant in ("fused-rope", "prefetch", "prefetch-operands"):
    for name, target in (("8b-q4_0", 2.0), ("8b-f16", 1.25), ("100m-f16", 3.0)):
        if load(os.path.join(out, f"parspec-{name}-{variant}.json")):
            goal(f"decode × llama.cpp, {name}, {variant}", decode_ratio(name, f"-{variant}"),
                 target)
for variant in ("stream-persistent", "rows-persistent", "stream-mixed", "stream-split",
                "stream-dual", "prefetch-operands"):
    if load(os.path.join(out, f"parspec-8b-q4_0-{variant}.json")):
        for n, target in ((8, 1.15), (32, 1.5)):
            goal(f"L({n})/L(1), 8b-q4_0, {variant}", lat_ratio("8b-q4_0", n, f"-{variant}"),
                 target, higher=False)
speed = lambda k: strategy_rows[k]["speedup"] if k in strategy_rows else None
goal("auto × ar", speed("auto"), 2.0)
if os.path.exists(spec) and "auto" in strategy_rows:
    best = max((n / sec for (n, sec) in sums.values() if sec > 0), default=None) if sums else None
    goal("auto × llama.cpp's best speculative row",
         strategy_rows["auto"]["tok_per_s"] / best if best else None, 2.5)
goal("ppd × ar", speed("ppd"), 1.3)
tuned_ppd = bench_rows("strategies-ppd-tuned").get("ppd")
goal("ppd × ar, trees from tune --ppd", tuned_ppd["speedup"] if tuned_ppd else None, 1.3)
f16_auto = bench_rows("strategies-f16").get("auto")
goal("auto × ar, 8B-class F16 target", f16_auto["speedup"] if f16_auto else None, 2.0)
qk_auto = bench_rows("strategies-q4_k_m").get("auto")
goal("auto × ar, 8B-class Q4_K_M target (Q4_0's goal)", qk_auto["speedup"] if qk_auto else None, 2.0)
if 1 in easyspec_runs and 2 in easyspec_runs:
    e1, e2 = easyspec_runs[1]["easyspec"], easyspec_runs[2]["easyspec"]
    goal("easyspec drafting ms/step, N = 2 ÷ N = 1", e2["t_draft_ms"] / e1["t_draft_ms"], 0.7,
         higher=False)
    if e1["alpha"] > 0:
        goal("easyspec α drop, N = 2 against N = 1", (e1["alpha"] - e2["alpha"]) / e1["alpha"], 0.07,
             higher=False)
if speed("easyspec") is not None and speed("sd") is not None:
    goal("easyspec ÷ sd (each × its bench's ar)", speed("easyspec") / speed("sd"), 1.0)
if speed("pearl") is not None and speed("sd") is not None:
    goal("pearl ÷ sd", speed("pearl") / speed("sd"), 1.0)
trees = [speed(k) for k in ("tree", "tree:d2c2", "dyntree", "dyntree:d3c2w4", "specinfer", "cosine")
         if speed(k) is not None]
chains = [speed(k) for k in ("sd", "sd:2", "sd:4", "sd:8") if speed(k) is not None]
if trees and chains:
    goal("best tree ÷ best chain", max(trees) / max(chains), 1.0)
print()
print("Goals (issues 37 and 38), from the tables above:")
print()
print("| goal | measured | target | met |")
print("|---|---|---|---|")
print("\n".join(goals))

print()
print("L(n) in ms (parspec, one forward over a chain of n tokens after 64 committed):")
print()
for name, lat in curves:
    print(f"- {name}: " + ", ".join(f"L({n}) {v:.2f}" for n, v in sorted(lat.items())))
EOF
step "done: tables in $out"
