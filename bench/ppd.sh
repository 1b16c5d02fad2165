#!/usr/bin/env bash
# PPD (parallel prompt decoding) figures of docs/performance.md:
#  1. `parspec tune --ppd` on the zoo target and on the inflated 1B-class target:
#     measured L(n), the predicted best tree size (input rows per step), its trees;
#  2. `ppd` against `ar` on both targets, a tree-size sweep (ppd:N = the trees
#     built for N rows per step) beside the tuner's choice, interleaved in one run;
#  3. memory: the side file's size and the extra KV cells a step writes, against
#     the zoo drafter's file and KV per token.
# The inflated target comes from bench/make_pairs.sh (make-model --inflate widens
# models/target.ppd.gguf along with the model). Results go to $OUT/ppd/.
#
# Usage: bash bench/ppd.sh [zoo|inflated|all]   (default: all)
# Env:   PARSPEC (default build/parspec), OUT (default out), THREADS (default 2),
#        N (tokens per prompt, default 64), PROMPTS (prompts per set, default 2)
set -euo pipefail
cd "$(dirname "$0")/.."
PARSPEC=${PARSPEC:-build/parspec}
OUT=${OUT:-out}
THREADS=${THREADS:-2}
N=${N:-64}
PROMPTS=${PROMPTS:-2}
WHICH=${1:-all}
case "$WHICH" in zoo | inflated | all) ;; *)
  echo "usage: $0 [zoo|inflated|all]" >&2
  exit 2
  ;;
esac
[[ -x "$PARSPEC" ]] || { echo "ppd.sh: $PARSPEC not found; build first (bash scripts/build.sh)" >&2; exit 1; }
RES="$OUT/ppd"
mkdir -p "$RES"
echo "ppd.sh: start $(date -u +%FT%TZ), load $(cut -d' ' -f1-3 /proc/loadavg), $(nproc) cores, -t $THREADS" \
  | tee -a "$RES/conditions.txt"

# run_target NAME MODEL SWEEP MAX: tune (budgets up to MAX rows), then ar, the sweep and the
# tuner's choice, interleaved.
run_target() {
  local name=$1 model=$2 sweep=$3 max=$4
  local side="${model%.gguf}.ppd.gguf" tree="$RES/$name.tree"
  [[ -s "$side" ]] || { echo "ppd.sh: $side is missing" >&2; exit 1; }
  echo "== $name: parspec tune --ppd (load $(cut -d' ' -f1 /proc/loadavg))"
  "$PARSPEC" tune -m "$model" --ppd "$side" --ppd-tree-out "$tree" -t "$THREADS" --measure 3 -n 32 \
    --ppd-max-budget "$max" \
    | tee "$RES/$name-tune.txt"
  local chosen list="ar"
  chosen=$(sed -n 's/^choice: budget \([0-9]*\).*/\1/p' "$RES/$name-tune.txt")
  for b in $sweep; do list="$list,ppd:$b"; done
  [[ " $sweep " == *" $chosen "* ]] || list="$list,ppd:$chosen"
  echo "== $name: ar vs ppd, sweep $sweep; the tuner chose $chosen (load $(cut -d' ' -f1 /proc/loadavg))"
  "$PARSPEC" bench -m "$model" --ppd "$side" --strategies "$list" -t "$THREADS" -n "$N" \
    --prompts code,math,prose,config,chat --max-prompts "$PROMPTS" \
    --json "$RES/$name-bench.json" --md "$RES/$name-bench.md" | tee "$RES/$name-bench.txt"
  echo "tuner's choice for $name: ppd:$chosen (its trees: $tree, the same as ppd:$chosen builds)" \
    | tee -a "$RES/$name-bench.txt"
}

# kv_bytes_per_token MODEL: keys + values of one token in the float32 cache.
kv_bytes_per_token() {
  "$PARSPEC" info "$1" | awk '/^  layers/ {l=$2} /^  heads/ {kv=$4; hd=$NF; gsub(/[^0-9]/,"",kv); gsub(/[^0-9]/,"",hd)} END {print 2*l*kv*hd*4}'
}

memory_report() {
  local model=$1 draft=$2 tree=$3
  local side="${model%.gguf}.ppd.gguf" kv_t kv_d rows
  kv_t=$(kv_bytes_per_token "$model")
  kv_d=$(kv_bytes_per_token "$draft")
  rows=$(awk '/^ensemble_tokens/ {e=$2} /^state/ {s=$2} /^node/ {r[s]+=1+e*$3} END {m=0; for (k in r) if (r[k]>m) m=r[k]; print m}' "$tree")
  echo "memory of $model:"
  echo "  ppd side file: $(stat -c %s "$side") bytes; drafter file $draft: $(stat -c %s "$draft") bytes"
  echo "  ppd extra KV per step: at most $rows rows x $kv_t bytes = $((rows * kv_t)) bytes of target cells, dropped after the step"
  echo "  drafter KV: $kv_d bytes per token of context for the whole request ($((kv_d * 4096)) bytes at 4096 tokens), plus its own speculative cells"
}

if [[ $WHICH == zoo || $WHICH == all ]]; then
  run_target zoo models/target.gguf "2 4 6 8 12 16 24 32" 48
  memory_report models/target.gguf models/draft.gguf "$RES/zoo.tree" | tee "$RES/zoo-memory.txt"
fi
if [[ $WHICH == inflated || $WHICH == all ]]; then
  OUT="$OUT" PARSPEC="$PARSPEC" bash bench/make_pairs.sh small
  run_target inflated-1b "$OUT/zoo-target-1b-f16.gguf" "2 4 6 8 12 16" 24
  memory_report "$OUT/zoo-target-1b-f16.gguf" "$OUT/zoo-draft-100m-f16.gguf" "$RES/inflated-1b.tree" \
    | tee "$RES/inflated-1b-memory.txt"
fi
echo "ppd.sh: done $(date -u +%FT%TZ), load $(cut -d' ' -f1-3 /proc/loadavg)" | tee -a "$RES/conditions.txt"
