#!/usr/bin/env bash
# Fuzz campaign: builds the GGUF, tokenizer and HTTP-request fuzzers (libFuzzer, clang++ with
# ASan + UBSan) and runs each for SECONDS, all three at once, from the kept corpus: the
# repository's tests/fuzz/corpus/tokenizer and tests/fuzz/corpus/http (small text inputs), and
# for GGUF files, whose corpus runs to megabytes, DIR/tests/fuzz/gguf-corpus in the build tree
# (also read by ctest's gguf_fuzz). Then prints executions, speed and crashes per fuzzer and,
# unless --no-merge, replaces each kept corpus by the minimized union of the old one and what the
# run found (libFuzzer's -merge=1: only inputs that add coverage are kept).
#
#   tests/fuzz/campaign.sh SECONDS [--build DIR] [--no-merge] [--only gguf,tokenizer,http]
#
# --only runs some of the fuzzers (a campaign in parts: the kept corpus carries each part on).
# Each run keeps its logs, new inputs and crashing inputs in DIR/tests/fuzz/campaign/STAMP/; the
# exit code is 1 if any fuzzer crashed, leaked, timed out (an input over 30 s: at nice 19 on a
# busy machine the processor can be away for seconds) or ran out of memory. Run it under
# `nice -n 19` on a shared machine.
set -euo pipefail

usage() {
  echo "usage: $0 SECONDS [--build DIR] [--no-merge] [--only gguf,tokenizer,http]" >&2
  exit 2
}
[ $# -ge 1 ] || usage
seconds=$1
shift
[[ "$seconds" =~ ^[1-9][0-9]*$ ]] || usage
root=$(cd "$(dirname "$0")/../.." && pwd)
build="$root/build"
merge=1
fuzzers=(gguf tokenizer http)
while [ $# -gt 0 ]; do
  case "$1" in
    --build) [ $# -ge 2 ] || usage; build=$(realpath -m "$2"); shift 2 ;;
    --no-merge) merge=0; shift ;;
    --only)
      [ $# -ge 2 ] || usage
      IFS=, read -r -a fuzzers <<< "$2"
      for name in "${fuzzers[@]}"; do
        case "$name" in gguf | tokenizer | http) ;; *) usage ;; esac
      done
      shift 2
      ;;
    *) usage ;;
  esac
done

if [ ! -f "$build/CMakeCache.txt" ]; then
  cmake -S "$root" -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=Release
fi
cmake --build "$build" --target parspec_fuzz_gguf parspec_fuzz_tokenizer parspec_fuzz_http \
  parspec_gguf_fuzz_seeds
bin="$build/tests/fuzz"
for f in fuzz_gguf fuzz_tokenizer fuzz_http; do
  [ -x "$bin/$f" ] || { echo "campaign: $bin/$f was not built (clang++ and libFuzzer needed)" >&2; exit 1; }
done

# Each campaign keeps its own folder (logs, new inputs, artifacts), so that one in parts, or
# campaigns of other fuzzers beside it, overwrite nothing.
work="$bin/campaign/$(date -u +%Y%m%dT%H%M%S)-$$"
mkdir -p "$work/artifacts"
# The loader allocates per input: a small quarantine, no malloc fill and no allocation stacks
# (recording them is a few percent of the time) keep ASan fast; every error is still caught,
# and a crashing input, rerun on its own, gives the allocation stacks.
export ASAN_OPTIONS=quarantine_size_mb=8:max_malloc_fill_size=0:malloc_context_size=0

kept_corpus() {
  if [ "$1" = gguf ]; then echo "$bin/gguf-corpus"; else echo "$root/tests/fuzz/corpus/$1"; fi
}

# fuzzer name, its max_len and its dictionary; the GGUF fuzzer also starts from the
# models `parspec make-model` wrote at build time.
run() {
  local name=$1 max_len=$2 dict=$3
  shift 3
  local corpus
  corpus=$(kept_corpus "$name")
  mkdir -p "$work/$name" "$corpus"
  local rc=0
  "$bin/fuzz_$name" -max_total_time="$seconds" -max_len="$max_len" -timeout=30 \
    -rss_limit_mb=2048 -print_final_stats=1 -dict="$root/tests/fuzz/$dict" \
    -artifact_prefix="$work/artifacts/$name-" "$work/$name" "$corpus" "$@" \
    > "$work/$name.log" 2>&1 || rc=$?
  echo $rc > "$work/$name.rc"
}

echo "campaign: $seconds s per fuzzer (${fuzzers[*]}), started $(date -u '+%Y-%m-%d %H:%M UTC')"
for name in "${fuzzers[@]}"; do
  case "$name" in
    gguf) run gguf 16384 gguf.dict "$bin/gguf-seeds" & ;;
    tokenizer) run tokenizer 1024 tokenizer.dict & ;;
    http) run http 4096 http.dict & ;;
  esac
done
wait

failed=0
printf '%-10s %8s %14s %9s %8s %8s\n' fuzzer seconds executions exec/s crashes corpus
for name in "${fuzzers[@]}"; do
  log="$work/$name.log"
  runs=$(sed -n 's/^stat::number_of_executed_units: *//p' "$log" | tail -1)
  runs=${runs:-0}
  # Slow inputs (libFuzzer's slow-unit-*, over 10 s) are listed, not failures: at nice 19 on a
  # busy machine an input can wait that long for the processor.
  crashes=$(find "$work/artifacts" -name "$name-*" ! -name "$name-slow-unit-*" | wc -l)
  find "$work/artifacts" -name "$name-slow-unit-*" -printf "campaign: slow input %p\n" >&2
  rc=$(cat "$work/$name.rc")
  if [ "$rc" != 0 ] || [ "$crashes" != 0 ]; then
    failed=1
    [ "$crashes" != 0 ] || crashes="rc=$rc"
    echo "campaign: fuzz_$name failed; its log: $log" >&2
    grep -m 5 -E "ERROR|SUMMARY|Test unit written" "$log" >&2 || true
  fi
  corpus=$(kept_corpus "$name")
  if [ "$merge" = 1 ] && [ "$rc" = 0 ]; then
    rm -rf "$work/$name.merged"
    mkdir -p "$work/$name.merged"
    extra=()
    [ "$name" != gguf ] || extra=("$bin/gguf-seeds")
    "$bin/fuzz_$name" -merge=1 -max_len=16384 "$work/$name.merged" "$corpus" "$work/$name" \
      "${extra[@]}" > "$work/$name.merge.log" 2>&1
    find "$corpus" -type f -delete
    cp "$work/$name.merged"/* "$corpus"/ 2> /dev/null || true
  fi
  printf '%-10s %8s %14s %9s %8s %8s\n' "$name" "$seconds" "$runs" $((runs / seconds)) \
    "$crashes" "$(find "$corpus" -type f | wc -l)"
done
exit $failed
