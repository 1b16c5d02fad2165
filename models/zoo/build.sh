#!/usr/bin/env bash
# Rebuilds the model zoo from scratch: corpus -> BPE tokenizer -> token streams
# -> target and general drafter (trained side by side) -> domain drafters
# (fine-tuned from the general drafter) -> GGUF export -> evaluation -> the
# engine's own measurements (building build/parspec first if it is missing).
# Resumable: finished stages are skipped and training continues from its last
# checkpoint, so rerunning after an interruption picks up where it stopped.
#
# Environment:
#   ZOO_WORK        work directory (default out/zoo): corpus, checkpoints, logs
#   ZOO_MODELS_DIR  where the GGUF files go (default models)
#   ZOO_SCALE       multiplies every token budget (default 1; e.g. 0.02 for a smoke test)
#   ZOO_THREADS     PyTorch threads per training process (default: cores / 2, at least 1)
#   ZOO_DEVICE      where PyTorch trains: cpu, cuda or auto (default: CUDA when it sees a GPU)
#   ZOO_RESELECT=1  choose the corpus files anew (rewrites models/zoo/corpus/manifest.tsv)
#   ZOO_RESULTS     where the measured numbers go (default models/zoo/results.json)
#   PARSPEC         the engine binary for the measurements (default build/parspec, built if missing)
set -euo pipefail
ROOT="$(cd "$(dirname "$0")/../.." && pwd)"
cd "$ROOT"
ZOO="$ROOT/models/zoo"
WORK="${ZOO_WORK:-$ROOT/out/zoo}"
MODELS="${ZOO_MODELS_DIR:-$ROOT/models}"
SCALE="${ZOO_SCALE:-1}"
PY=/usr/bin/python3
mkdir -p "$WORK" "$MODELS"
TIMES="$WORK/timings.txt"

log() { echo "[zoo $(date +%H:%M:%S)] $*"; }

# --- dependencies: the project's Debian packages (PyTorch, NumPy, regex, OpenBLAS,
# and the compiler for the engine's measurements) ------------------------------
bash "$ROOT/scripts/install-deps.sh"

cores=$(nproc)
# One thread per process: PyTorch's OpenMP threads stall badly when other jobs share the
# cores, separate processes do not. Two training processes run at a time.
export ZOO_THREADS="${ZOO_THREADS:-$(( cores / 2 > 0 ? cores / 2 : 1 ))}"
PROCS=2
tokens() { $PY -c "print(max(2048, int($1 * $SCALE)))"; }
stamp_start=$(date +%s)
phase() { echo "$1 $(( $(date +%s) - stamp_start ))s" >> "$TIMES"; log "$1"; }
echo "build started $(date -u +%FT%TZ) on $cores cores, $ZOO_THREADS threads per trainer, scale $SCALE" >> "$TIMES"

# --- corpus, tokenizer, token streams ----------------------------------------
if [ "${ZOO_RESELECT:-0}" = 1 ]; then
  $PY "$ZOO/corpus.py" select --manifest "$ZOO/corpus/manifest.tsv"
fi
if [ ! -f "$WORK/corpus/stats.json" ]; then
  $PY "$ZOO/corpus.py" build --manifest "$ZOO/corpus/manifest.tsv" --out "$WORK/corpus.tmp"
  rm -rf "$WORK/corpus" && mv "$WORK/corpus.tmp" "$WORK/corpus"
fi
phase "corpus ready"
if [ ! -f "$WORK/tokenizer.json" ]; then
  $PY "$ZOO/bpe.py" --corpus "$WORK/corpus" --n-vocab 2048 --out "$WORK/tokenizer.json.tmp"
  mv "$WORK/tokenizer.json.tmp" "$WORK/tokenizer.json"
fi
phase "tokenizer ready"
if [ ! -f "$WORK/tokens/stats.json" ]; then
  $PY "$ZOO/train.py" tokenize --corpus "$WORK/corpus" --tokenizer "$WORK/tokenizer.json" --out "$WORK/tokens.tmp"
  rm -rf "$WORK/tokens" && mv "$WORK/tokens.tmp" "$WORK/tokens"
fi
phase "token streams ready"

# --- training -----------------------------------------------------------------
# Shapes: target 6 x 256 (5.2M parameters); drafters 2 x 128 (0.63M, 1/8.3 of the target).
# Budgets were sized from single-thread rates measured on the 2-core build machine
# while other jobs shared it (target ~1100-3200 tokens/s, drafter ~6500-11000
# tokens/s, distillation ~2600-5000 tokens/s); a build from scratch took 2470 s (41 min).
TARGET_SHAPE='{"n_vocab":2048,"n_embd":256,"n_layer":6,"n_head":4,"n_head_kv":2,"n_ff":768,"n_ctx":256}'
DRAFT_SHAPE='{"n_vocab":2048,"n_embd":128,"n_layer":2,"n_head":2,"n_head_kv":1,"n_ff":352,"n_ctx":256}'
GENERAL_MIX="code=0.4,prose=0.25,config=0.15,math=0.2"
TRAIN=("$PY" "$ZOO/train.py" train --data "$WORK/tokens" --seq 256 --device "${ZOO_DEVICE:-auto}")

run_logged() {  # name, command...: runs in the background, appending to $WORK/<name>.log
  local name=$1
  shift
  echo "=== $(date -u +%FT%TZ) $*" >> "$WORK/$name.log"
  "$@" >> "$WORK/$name.log" 2>&1 &
  pids+=($!)
  names+=("$name")
}
wait_all() {
  local i failed=0
  for i in "${!pids[@]}"; do
    wait "${pids[$i]}" || { log "${names[$i]} failed: see $WORK/${names[$i]}.log"; failed=1; }
  done
  pids=()
  names=()
  [ $failed -eq 0 ] || exit 1
}
pids=()
names=()

# 1. target and general drafter pre-training, side by side (one core each)
log "phase 1: target and drafter pre-training (logs: $WORK/target-base.log, $WORK/draft-base.log)"
run_logged target-base "${TRAIN[@]}" --out "$WORK/target-base.pt" --shape "$TARGET_SHAPE" --mix "$GENERAL_MIX" \
  --tokens "$(tokens 2300000)" --batch 8 --lr 3e-3 --warmup 100
run_logged draft-base "${TRAIN[@]}" --out "$WORK/draft-base.pt" --shape "$DRAFT_SHAPE" --mix "$GENERAL_MIX" \
  --tokens "$(tokens 6000000)" --batch 16 --lr 4e-3 --warmup 50
wait_all
phase "phase 1 done"

# 1b. the target continues on both cores (data-parallel processes) until it has seen as
# many tokens as the drafter, so that it is the better model on every domain
log "phase 1b: target continued training (log: $WORK/target.log)"
run_logged target "${TRAIN[@]}" --out "$WORK/target.pt" --init "$WORK/target-base.pt" --mix "$GENERAL_MIX" \
  --tokens "$(tokens 3700000)" --batch 16 --procs "$PROCS" --lr 1.5e-3 --warmup 30 --seed 2
wait_all
phase "phase 1b done"

# 2. the general drafter learns the target's distributions on the general mix
log "phase 2: distilling the general drafter from the target (log: $WORK/draft.log)"
run_logged draft "${TRAIN[@]}" --out "$WORK/draft.pt" --init "$WORK/draft-base.pt" --teacher "$WORK/target.pt" \
  --kd-weight 0.8 --mix "$GENERAL_MIX" --tokens "$(tokens 2400000)" --batch 8 --procs "$PROCS" --lr 1.5e-3 \
  --warmup 20 --seed 3
wait_all
phase "phase 2 done"

# 3. domain drafters: the general drafter fine-tuned (and distilled) on one domain each;
# 15% of each batch replays the other domains so that the drafter still follows the
# target when a continuation wanders off the domain
log "phase 3: domain drafters (logs: $WORK/draft-{code,prose,math}.log)"
declare -A DOMAIN_MIX=(
  [code]="code=0.85,prose=0.05,config=0.05,math=0.05"
  [prose]="prose=0.85,code=0.05,config=0.05,math=0.05"
  [math]="math=0.85,code=0.05,prose=0.05,config=0.05"
)
for domain in code prose math; do
  run_logged "draft-$domain" "${TRAIN[@]}" --out "$WORK/draft-$domain.pt" --init "$WORK/draft.pt" \
    --teacher "$WORK/target.pt" --kd-weight 0.9 --mix "${DOMAIN_MIX[$domain]}" --tokens "$(tokens 600000)" \
    --batch 8 --lr 1.5e-3 --warmup 10 --seed 4
done
wait_all
phase "training done"

# --- export and evaluation ----------------------------------------------------
for m in target draft draft-code draft-prose draft-math; do
  $PY "$ZOO/export.py" --ckpt "$WORK/$m.pt" --tokenizer "$WORK/tokenizer.json" \
    --out "$MODELS/$m.gguf" --name "parspec-zoo-$m" --type f16
done
phase "export done"
# the deep drafter (8 narrow layers, for layer-parallel drafting), distilled from the
# target just exported; it evaluates itself (eval-deep.json, engine-draft-deep.json)
ZOO_WORK="$WORK" ZOO_MODELS_DIR="$MODELS" ZOO_SCALE="$SCALE" bash "$ZOO/build_deep.sh"
phase "deep drafter done"
# the chat model (the target fine-tuned on ChatML turns made from the corpus, the template in
# its metadata); it evaluates itself against the target (eval-chat.json)
ZOO_WORK="$WORK" ZOO_MODELS_DIR="$MODELS" ZOO_SCALE="$SCALE" bash "$ZOO/build_chat.sh"
phase "chat model done"
# the chat model's drafter (the general drafter distilled from the chat model on its
# conversations); it measures itself with the engine when a parspec binary is there
ZOO_WORK="$WORK" ZOO_MODELS_DIR="$MODELS" ZOO_SCALE="$SCALE" bash "$ZOO/build_chat_draft.sh"
phase "chat drafter done"
# PPD prompt tokens for the target (models/zoo/ppd_train.py): the target frozen, 3 prompt
# tokens x 1 ensemble token distilled from its own next-token distributions (seeded, one
# process of ZOO_THREADS threads); kept when newer than the target it was trained for
if [ ! "$MODELS/target.ppd.gguf" -nt "$MODELS/target.gguf" ]; then
  log "PPD prompt tokens for the target (log: $WORK/ppd.log)"
  ppd_steps=$($PY -c "print(max(20, int(350 * $SCALE)))")
  $PY "$ZOO/ppd_train.py" --model "$MODELS/target.gguf" --tokens "$WORK/tokens" \
    --out "$MODELS/target.ppd.gguf" --steps "$ppd_steps" --threads "$ZOO_THREADS" \
    --device "${ZOO_DEVICE:-auto}" > "$WORK/ppd.log" 2>&1 || { log "PPD training failed: see $WORK/ppd.log"; exit 1; }
fi
phase "ppd done"
prompts=()
[ -d "$ROOT/bench/prompts" ] && prompts=(--prompts-dir "$ROOT/bench/prompts")
$PY "$ZOO/evaluate.py" --models target="$MODELS/target.gguf" draft="$MODELS/draft.gguf" \
  draft-code="$MODELS/draft-code.gguf" draft-prose="$MODELS/draft-prose.gguf" \
  draft-math="$MODELS/draft-math.gguf" --tokens "$WORK/tokens" "${prompts[@]}" --out "$WORK/eval.json"
phase "evaluation done"
# the engine's own speculative-decoding figures per drafter (greedy sd, gamma = 4), with every
# output checked against autoregressive decoding; needs the parspec binary
PARSPEC="${PARSPEC:-$ROOT/build/parspec}"
if [ ! -x "$PARSPEC" ] && [ "$PARSPEC" = "$ROOT/build/parspec" ]; then
  log "building the engine (scripts/build.sh) for the engine measurements"
  bash "$ROOT/scripts/build.sh" || log "engine build failed"
fi
if [ -x "$PARSPEC" ]; then
  for m in draft draft-code draft-prose draft-math; do
    log "engine: sd at gamma 4 with $m"
    "$PARSPEC" bench -m "$MODELS/target.gguf" -md "$MODELS/$m.gguf" --strategies ar,sd:4 -n 128 -t 1 -td 1 \
      --warmup 0 --json "$WORK/engine-$m.json" > "$WORK/engine-$m.log" 2>&1 ||
      { log "engine run failed: see $WORK/engine-$m.log"; exit 1; }
  done
  phase "engine measurements done"
else
  log "no parspec binary at $PARSPEC: the card will lack the engine's figures"
fi
$PY "$ZOO/card.py" --work "$WORK" --models "$MODELS" --results "${ZOO_RESULTS:-$ZOO/results.json}"
log "zoo built in $(( $(date +%s) - stamp_start ))s; models in $MODELS, evaluation in $WORK/eval.json"
$PY "$ZOO/card.py" --results "${ZOO_RESULTS:-$ZOO/results.json}" --check || log "some of the zoo's goals are not met (above)"
