#!/usr/bin/env bash
# EasySpec (layer-parallel drafting) on cores: the table and the cosine-similarity
# figure of docs/performance.md ("EasySpec"). For every layer-group size N it runs
#   bench --strategies ar,sd,easyspec           (chain, γ = GAMMA; sd: the same drafter, layer-sequential)
#   bench --strategies ar,easyspec --lp-tree    (EasySpec's fixed-width tree; N = 1 is the tree baseline)
# interleaved prompt by prompt within each run (greedy: outputs checked against ar),
# then `parspec lp-similarity` on the drafter, and prints one Markdown table.
#
# Usage: bash bench/easyspec.sh [zoo|inflated|drafter]   (default zoo)
#   zoo:      models/target.gguf + models/draft-deep.gguf (8 layers)
#   inflated: out/zoo-target-1b-f16.gguf + out/zoo-draft-deep-100m-f16.gguf
#             (bash bench/make_pairs.sh small makes them)
#   drafter:  models/target.gguf + out/zoo-draft-deep-100m-f16.gguf: a cheap target, so that
#             the memory-bound drafter's time per step is measured quickly (same α as zoo)
# Env: PARSPEC (build/parspec), OUT (out/easyspec), SIZES ("1 2 3 4"), GAMMA (4),
#      DEPTH (4), WIDTH (4), CALIBRATE (every), THREADS (-t, 2), THREADS_DRAFT (-td, 0),
#      N_PREDICT (64; inflated 32), MAX_PROMPTS (4; inflated 1), PROMPTS (code,math,prose,config),
#      TARGET, DRAFT (other model files), TREE (1; 0 skips the tree runs)
set -euo pipefail
cd "$(dirname "$0")/.."
PAIR=${1:-zoo}
PARSPEC=${PARSPEC:-build/parspec}
OUT=${OUT:-out/easyspec}
SIZES=${SIZES:-1 2 3 4}
GAMMA=${GAMMA:-4}
DEPTH=${DEPTH:-4}
WIDTH=${WIDTH:-4}
CALIBRATE=${CALIBRATE:-every}
THREADS=${THREADS:-2}
THREADS_DRAFT=${THREADS_DRAFT:-0}
PROMPTS=${PROMPTS:-code,math,prose,config}
case "$PAIR" in
  zoo)
    TARGET=${TARGET:-models/target.gguf} DRAFT=${DRAFT:-models/draft-deep.gguf}
    N_PREDICT=${N_PREDICT:-64} MAX_PROMPTS=${MAX_PROMPTS:-4}
    ;;
  inflated)
    TARGET=${TARGET:-out/zoo-target-1b-f16.gguf} DRAFT=${DRAFT:-out/zoo-draft-deep-100m-f16.gguf}
    N_PREDICT=${N_PREDICT:-32} MAX_PROMPTS=${MAX_PROMPTS:-1}
    ;;
  drafter)
    TARGET=${TARGET:-models/target.gguf} DRAFT=${DRAFT:-out/zoo-draft-deep-100m-f16.gguf}
    N_PREDICT=${N_PREDICT:-32} MAX_PROMPTS=${MAX_PROMPTS:-1}
    ;;
  *)
    echo "usage: $0 [zoo|inflated|drafter]" >&2
    exit 2
    ;;
esac
[[ -x "$PARSPEC" ]] || { echo "easyspec.sh: $PARSPEC not found; build first (bash scripts/build.sh)" >&2; exit 1; }
for f in "$TARGET" "$DRAFT"; do
  [[ -s "$f" ]] || { echo "easyspec.sh: $f missing (inflated pair: bash bench/make_pairs.sh small)" >&2; exit 1; }
done
mkdir -p "$OUT"
COMMON=(-m "$TARGET" -md "$DRAFT" -t "$THREADS" -td "$THREADS_DRAFT" -n "$N_PREDICT"
  --max-prompts "$MAX_PROMPTS" --prompts "$PROMPTS" --warmup 8 --calibrate "$CALIBRATE")
echo "easyspec.sh: $PAIR pair, load $(cut -d' ' -f1-3 /proc/loadavg) at start" >&2
for n in $SIZES; do
  echo "easyspec.sh: lp size $n, chain" >&2
  "$PARSPEC" bench "${COMMON[@]}" --strategies ar,sd,easyspec --draft-max "$GAMMA" --lp-size "$n" \
    --json "$OUT/$PAIR-chain-$n.json" > "$OUT/$PAIR-chain-$n.log" 2>&1
  [[ ${TREE:-1} == 1 ]] || continue
  echo "easyspec.sh: lp size $n, tree" >&2
  "$PARSPEC" bench "${COMMON[@]}" --strategies ar,easyspec --lp-tree --tree-depth "$DEPTH" \
    --tree-width "$WIDTH" --lp-size "$n" --json "$OUT/$PAIR-tree-$n.json" > "$OUT/$PAIR-tree-$n.log" 2>&1
done
"$PARSPEC" lp-similarity -m "$DRAFT" --lp-sizes 2,3,4 --prompts "$PROMPTS" --max-prompts "$MAX_PROMPTS" \
  --json "$OUT/$PAIR-similarity.json" > "$OUT/$PAIR-similarity.log"
echo "easyspec.sh: load $(cut -d' ' -f1-3 /proc/loadavg) at the end" >&2
/usr/bin/python3 bench/easyspec_table.py "$OUT" "$PAIR" $SIZES | tee "$OUT/$PAIR-table.md"
