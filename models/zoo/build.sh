#!/usr/bin/env bash
# Rebuilds the model zoo from scratch: corpus -> BPE tokenizer -> token streams
# -> target and general drafter (trained side by side) -> domain drafters
# (fine-tuned from the general drafter) -> GGUF export -> evaluation.
# Resumable: finished stages are skipped and training continues from its last
# checkpoint, so rerunning after an interruption picks up where it stopped.
#
# Environment:
#   ZOO_WORK        work directory (default out/zoo): corpus, checkpoints, logs
#   ZOO_MODELS_DIR  where the GGUF files go (default models)
#   ZOO_SCALE       multiplies every token budget (default 1; e.g. 0.02 for a smoke test)
#   ZOO_THREADS     PyTorch threads per training process (default: cores / 2, at least 1)
#   ZOO_RESELECT=1  choose the corpus files anew (rewrites models/zoo/corpus/manifest.tsv)
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

# --- dependencies (Debian packages; every machine starts fresh) ---------------
need=()
$PY -c "import torch" 2>/dev/null || need+=(python3-torch)
$PY -c "import numpy" 2>/dev/null || need+=(python3-numpy)
$PY -c "import regex" 2>/dev/null || need+=(python3-regex)
dpkg -s libopenblas0-pthread >/dev/null 2>&1 || need+=(libopenblas0-pthread)
if [ ${#need[@]} -gt 0 ]; then
  log "installing ${need[*]}"
  SUDO=""
  [ "$(id -u)" -eq 0 ] || SUDO=sudo
  $SUDO apt-get update
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y "${need[@]}"
fi

cores=$(nproc)
export ZOO_THREADS="${ZOO_THREADS:-$(( cores / 2 > 0 ? cores / 2 : 1 ))}"
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
# Shapes: target 6 x 256 (5.2M parameters); drafter 2 x 128 (0.63M, 1/8.3 of the target).
TARGET_SHAPE='{"n_vocab":2048,"n_embd":256,"n_layer":6,"n_head":4,"n_head_kv":2,"n_ff":768,"n_ctx":256}'
DRAFT_SHAPE='{"n_vocab":2048,"n_embd":128,"n_layer":2,"n_head":2,"n_head_kv":1,"n_ff":352,"n_ctx":256}'
GENERAL_MIX="code=0.4,prose=0.25,config=0.15,math=0.2"
TRAIN=("$PY" "$ZOO/train.py" train --data "$WORK/tokens" --batch 8 --seq 256)

train_target() {
  "${TRAIN[@]}" --out "$WORK/target.pt" --shape "$TARGET_SHAPE" --mix "$GENERAL_MIX" \
    --tokens "$(tokens 720000)" --lr 3e-3 --warmup 30
}
train_drafters() {
  "${TRAIN[@]}" --out "$WORK/draft.pt" --shape "$DRAFT_SHAPE" --mix "$GENERAL_MIX" \
    --tokens "$(tokens 1500000)" --lr 4e-3 --warmup 30
  for domain in code prose math; do
    "${TRAIN[@]}" --out "$WORK/draft-$domain.pt" --init "$WORK/draft.pt" --mix "$domain=1" \
      --tokens "$(tokens 300000)" --lr 1.5e-3 --warmup 10 --seed 2
  done
}
log "training target (log: $WORK/target.log) and drafters (log: $WORK/drafters.log) side by side"
train_target > "$WORK/target.log" 2>&1 &
target_pid=$!
train_drafters > "$WORK/drafters.log" 2>&1 &
drafters_pid=$!
status=0
wait $target_pid || { log "target training failed: see $WORK/target.log"; status=1; }
wait $drafters_pid || { log "drafter training failed: see $WORK/drafters.log"; status=1; }
[ $status -eq 0 ] || exit 1
phase "training done"

# --- export and evaluation ----------------------------------------------------
for m in target draft draft-code draft-prose draft-math; do
  $PY "$ZOO/export.py" --ckpt "$WORK/$m.pt" --tokenizer "$WORK/tokenizer.json" \
    --out "$MODELS/$m.gguf" --name "parspec-zoo-$m" --type f16
done
phase "export done"
prompts=()
[ -d "$ROOT/bench/prompts" ] && prompts=(--prompts-dir "$ROOT/bench/prompts")
$PY "$ZOO/evaluate.py" --models target="$MODELS/target.gguf" draft="$MODELS/draft.gguf" \
  draft-code="$MODELS/draft-code.gguf" draft-prose="$MODELS/draft-prose.gguf" \
  draft-math="$MODELS/draft-math.gguf" --tokens "$WORK/tokens" "${prompts[@]}" --out "$WORK/eval.json"
phase "evaluation done"
log "zoo built in $(( $(date +%s) - stamp_start ))s; models in $MODELS, evaluation in $WORK/eval.json"
