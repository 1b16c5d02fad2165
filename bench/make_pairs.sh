#!/usr/bin/env bash
# Builds realistically sized target/drafter pairs from the bundled zoo, without
# downloads, with `parspec make-model --inflate` (the zoo's functions in large
# shapes: see bench/README.md):
#
#   out/zoo-target-1b-f16.gguf     + out/zoo-draft-100m-f16.gguf   (exact zoo functions)
#                                  + out/zoo-draft-deep-100m-f16.gguf (models/draft-deep.gguf, 8 layers
#                                    kept, width only: 1344 wide, n_ff 1792, about draft-100m's cost)
#   out/zoo-target-1b-q8_0.gguf    + out/zoo-draft-100m-q8_0.gguf, out/zoo-draft-deep-100m-q8_0.gguf
#                                    (the same shapes in Q8_0: half the bytes per token, the format
#                                    most local users run; functions equal up to Q8_0 rounding)
#   out/zoo-target-8b-q4_0.gguf    + out/zoo-draft-1b-q8_0.gguf    (quantized zoo functions)
#
#   q8_0: only out/zoo-target-1b-q8_0.gguf + out/zoo-draft-100m-q8_0.gguf (the pair scripts/setup.sh
#         measures; about 10 s to make)
#
# Usage: bash bench/make_pairs.sh [small|large|q8_0|all]   (default: all)
# Env:   PARSPEC=path/to/parspec (default build/parspec), OUT=dir (default out/)
# Disk:  about 1.9 + 0.2 + 1.0 + 0.2 GB (small) and 3.9 + 1.0 GB (large). Existing files are kept.
set -euo pipefail

cd "$(dirname "$0")/.."
PARSPEC=${PARSPEC:-build/parspec}
OUT=${OUT:-out}
WHICH=${1:-all}
case "$WHICH" in small | large | q8_0 | all) ;; *)
  echo "usage: $0 [small|large|q8_0|all]" >&2
  exit 2
  ;;
esac
[[ -x "$PARSPEC" ]] || { echo "make_pairs: $PARSPEC not found; build first (bash scripts/build.sh)" >&2; exit 1; }
mkdir -p "$OUT"

# inflate_one SRC PRESET TYPE NAME [SHAPE FLAGS...]: one inflated model, skipped when it
# exists (PRESET "-": the shape flags alone).
inflate_one() {
  local src=$1 preset=$2 type=$3 path="$OUT/$4"
  shift 4
  local shape=("$@")
  [[ $preset == - ]] || shape=(--preset "$preset" "${shape[@]}")
  # make-model --inflate also widens SRC.ppd.gguf (PPD's prompt tokens) to OUT.ppd.gguf;
  # a model inflated before the source had them is made again to get them.
  if [[ -s "$path" && -s "${src%.gguf}.ppd.gguf" && ! -s "${path%.gguf}.ppd.gguf" ]]; then
    echo "make_pairs: $path lacks ${path%.gguf}.ppd.gguf; inflating it again"
    rm -f "$path"
  fi
  if [[ -s "$path" ]]; then
    echo "make_pairs: $path exists, kept"
    return
  fi
  echo "make_pairs: $path  <=  $src, preset $preset, $type"
  local start=$SECONDS
  "$PARSPEC" make-model --inflate "$src" "${shape[@]}" --type "$type" -o "$path"
  echo "make_pairs: $path done in $((SECONDS - start)) s ($(du -h "$path" | cut -f1))"
}

if [[ $WHICH == small || $WHICH == all ]]; then
  for type in f16 q8_0; do
    inflate_one models/target.gguf 1b "$type" "zoo-target-1b-$type.gguf"
    inflate_one models/draft.gguf 100m "$type" "zoo-draft-100m-$type.gguf"
    # the deep drafter for layer-parallel drafting (bench/easyspec.sh inflated): every layer real
    if [[ -s models/draft-deep.gguf ]]; then
      inflate_one models/draft-deep.gguf - "$type" "zoo-draft-deep-100m-$type.gguf" --n-embd 1344 --n-ff 1792
    fi
  done
fi
if [[ $WHICH == q8_0 ]]; then
  inflate_one models/target.gguf 1b q8_0 zoo-target-1b-q8_0.gguf
  inflate_one models/draft.gguf 100m q8_0 zoo-draft-100m-q8_0.gguf
  exit 0
fi
if [[ $WHICH == large || $WHICH == all ]]; then
  inflate_one models/target.gguf 8b q4_0 zoo-target-8b-q4_0.gguf
  inflate_one models/draft.gguf 1b q8_0 zoo-draft-1b-q8_0.gguf
fi
echo "make_pairs: measure with e.g."
echo "  $PARSPEC bench -m $OUT/zoo-target-1b-f16.gguf -md $OUT/zoo-draft-100m-f16.gguf \\"
echo "      --strategies ar,sd:2,sd,pearl:3 -t 2 -n 64 --prompts code,math,prose,config,chat --max-prompts 2"
