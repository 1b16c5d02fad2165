#!/usr/bin/env bash
# The zoo's chat model (models/target-chat.gguf): models/target.gguf fine-tuned on
# ChatML conversations made from the zoo corpus (chat_data.py: word problems,
# arithmetic questions, "continue this code/text"), with the ChatML template in its
# GGUF metadata. Same shape and vocabulary as the target, so the zoo drafters draft
# for it. Called by build.sh after the target is exported; runs alone too (it then
# prepares corpus and token streams itself, with the tokenizer read from the
# committed target.gguf):
#   bash models/zoo/build_chat.sh
# Environment: ZOO_WORK, ZOO_MODELS_DIR, ZOO_SCALE, ZOO_THREADS, ZOO_DEVICE as in build.sh.
set -euo pipefail
ROOT="$(cd "$(dirname "$0")/../.." && pwd)"
cd "$ROOT"
source "$ROOT/models/zoo/chat_streams.sh"
log() { echo "[zoo-chat $(date +%H:%M:%S)] $*"; }

# Two phases, two data-parallel processes of ZOO_THREADS threads each (seeded; a batch
# depends only on seed and step): 0.16 M tokens (78 steps of 8 x 256) of 85% chat
# conversations and 15% the general mix replayed so that the model keeps its text, then
# 0.32 M tokens (156 steps) of 90% chat at a lower learning rate.
log "fine-tuning $MODELS/target.gguf on chat turns (log: $WORK/target-chat.log)"
$PY "$ZOO/train.py" train --data "$WORK/tokens" --seq 256 --device "${ZOO_DEVICE:-auto}" \
  --out "$WORK/target-chat-1.pt" --init "$MODELS/target.gguf" \
  --mix chat=0.85,code=0.05,prose=0.04,config=0.02,math=0.04 --tokens "$(tokens 160000)" --batch 8 --procs 2 \
  --lr 1.5e-3 --warmup 8 --seed 8 >> "$WORK/target-chat.log" 2>&1
$PY "$ZOO/train.py" train --data "$WORK/tokens" --seq 256 --device "${ZOO_DEVICE:-auto}" \
  --out "$WORK/target-chat.pt" --init "$WORK/target-chat-1.pt" \
  --mix chat=0.9,code=0.03,prose=0.03,config=0.01,math=0.03 --tokens "$(tokens 320000)" --batch 8 --procs 2 \
  --lr 1e-3 --warmup 5 --seed 9 >> "$WORK/target-chat.log" 2>&1
$PY "$ZOO/export.py" --ckpt "$WORK/target-chat.pt" --tokenizer "$WORK/tokenizer.json" \
  --out "$MODELS/target-chat.gguf" --name "parspec-zoo-target-chat" --type f16 --chat
log "wrote $MODELS/target-chat.gguf"
(cd "$ZOO" && $PY chat_eval.py --base "$MODELS/target.gguf" --chat "$MODELS/target-chat.gguf" \
  --tokens "$WORK/tokens" --out "$WORK/eval-chat.json")
sha256sum "$MODELS/target-chat.gguf"
