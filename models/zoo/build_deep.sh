#!/usr/bin/env bash
# The deep drafter (models/draft-deep.gguf): 8 narrow layers at about the cost of
# the 2-layer draft.gguf, so that layer-parallel drafting (EasySpec) has layers to
# group. Pre-trained on data, then distilled from the exported target.gguf (the
# teacher is read from the GGUF file, so this stage needs only the committed
# target and the token streams). Called by build.sh after the export; runs alone
# too (it then prepares corpus, tokenizer and token streams itself):
#   bash models/zoo/build_deep.sh
# Environment: ZOO_WORK, ZOO_MODELS_DIR, ZOO_SCALE, ZOO_THREADS, ZOO_DEVICE as in build.sh.
set -euo pipefail
ROOT="$(cd "$(dirname "$0")/../.." && pwd)"
cd "$ROOT"
ZOO="$ROOT/models/zoo"
WORK="${ZOO_WORK:-$ROOT/out/zoo}"
MODELS="${ZOO_MODELS_DIR:-$ROOT/models}"
SCALE="${ZOO_SCALE:-1}"
PY=/usr/bin/python3
export ZOO_THREADS="${ZOO_THREADS:-1}"
mkdir -p "$WORK"
log() { echo "[zoo-deep $(date +%H:%M:%S)] $*"; }
tokens() { $PY -c "print(max(2048, int($1 * $SCALE)))"; }

if [ ! -f "$WORK/tokens/stats.json" ]; then
  log "preparing corpus, tokenizer and token streams in $WORK"
  if [ ! -f "$WORK/corpus/stats.json" ]; then
    $PY "$ZOO/corpus.py" build --manifest "$ZOO/corpus/manifest.tsv" --out "$WORK/corpus.tmp"
    rm -rf "$WORK/corpus" && mv "$WORK/corpus.tmp" "$WORK/corpus"
  fi
  if [ ! -f "$WORK/tokenizer.json" ]; then
    $PY "$ZOO/bpe.py" --corpus "$WORK/corpus" --n-vocab 2048 --out "$WORK/tokenizer.json.tmp"
    mv "$WORK/tokenizer.json.tmp" "$WORK/tokenizer.json"
  fi
  $PY "$ZOO/train.py" tokenize --corpus "$WORK/corpus" --tokenizer "$WORK/tokenizer.json" --out "$WORK/tokens.tmp"
  rm -rf "$WORK/tokens" && mv "$WORK/tokens.tmp" "$WORK/tokens"
fi

# 8 x 96 (2 heads of 48, one KV head), n_ff 128: 0.71 M parameters, per token about
# 1.1x the multiply-adds of draft.gguf (2 x 128, n_ff 352), 43% of a layer's weights in
# attention. A deep, narrow model needs more tokens than the 2-layer drafter to reach its
# quality (with 1.2 M + 0.3 M tokens its acceptance was 0.09): 12 M + 4 M tokens take
# about 3 minutes on one GPU (ZOO_DEVICE=auto picks it) and hours on a CPU core.
DEEP_SHAPE='{"n_vocab":2048,"n_embd":96,"n_layer":8,"n_head":2,"n_head_kv":1,"n_ff":128,"n_ctx":256}'
GENERAL_MIX="code=0.4,prose=0.25,config=0.15,math=0.2"
TRAIN=("$PY" "$ZOO/train.py" train --data "$WORK/tokens" --seq 256 --device "${ZOO_DEVICE:-auto}")

log "deep drafter, phase 1: data only (log: $WORK/draft-deep-base.log)"
"${TRAIN[@]}" --out "$WORK/draft-deep-base.pt" --shape "$DEEP_SHAPE" --mix "$GENERAL_MIX" \
  --tokens "$(tokens 12000000)" --batch 16 --lr 4e-3 --warmup 50 --seed 5 >> "$WORK/draft-deep-base.log" 2>&1
log "deep drafter, phase 2: distilled from $MODELS/target.gguf (log: $WORK/draft-deep.log)"
"${TRAIN[@]}" --out "$WORK/draft-deep.pt" --init "$WORK/draft-deep-base.pt" --teacher "$MODELS/target.gguf" \
  --kd-weight 0.8 --mix "$GENERAL_MIX" --tokens "$(tokens 4000000)" --batch 8 --lr 1.5e-3 --warmup 20 \
  --seed 6 >> "$WORK/draft-deep.log" 2>&1
$PY "$ZOO/export.py" --ckpt "$WORK/draft-deep.pt" --tokenizer "$WORK/tokenizer.json" \
  --out "$MODELS/draft-deep.gguf" --name "parspec-zoo-draft-deep" --type f16
log "wrote $MODELS/draft-deep.gguf"

# Acceptance: the Python-side estimate (greedy, gamma 4, as in the card) beside the
# general drafter, and the engine's own sd:4 run (outputs checked against ar).
prompts=()
[ -d "$ROOT/bench/prompts" ] && prompts=(--prompts-dir "$ROOT/bench/prompts")
$PY "$ZOO/evaluate.py" --models target="$MODELS/target.gguf" draft="$MODELS/draft.gguf" \
  draft-deep="$MODELS/draft-deep.gguf" --tokens "$WORK/tokens" "${prompts[@]}" --out "$WORK/eval-deep.json"
PARSPEC="${PARSPEC:-$ROOT/build/parspec}"
if [ -x "$PARSPEC" ]; then
  "$PARSPEC" bench -m "$MODELS/target.gguf" -md "$MODELS/draft-deep.gguf" --strategies ar,sd:4 -n 128 -t 1 \
    -td 1 --warmup 0 --json "$WORK/engine-draft-deep.json" > "$WORK/engine-draft-deep.log" 2>&1 ||
    { log "engine run failed: see $WORK/engine-draft-deep.log"; exit 1; }
fi
sha256sum "$MODELS/draft-deep.gguf"
