#!/usr/bin/env bash
# The chat model's drafter (models/draft-chat.gguf): the general drafter draft.gguf
# distilled from target-chat.gguf on the chat conversations (chat_data.py) with some of
# the general mix replayed, the domain drafters' recipe with the chat model as teacher.
# The zoo drafters were distilled from the plain target on plain text and rarely agree
# with the chat model on its turns. Called by build.sh after build_chat.sh; runs alone
# too (it then prepares corpus, token streams and chat streams itself, with the
# tokenizer read from the committed target.gguf):
#   bash models/zoo/build_chat_draft.sh
# Environment: ZOO_WORK, ZOO_MODELS_DIR, ZOO_SCALE, ZOO_THREADS, ZOO_DEVICE as in build.sh;
# PARSPEC, the engine binary for the acceptance measurement (default build/parspec,
# skipped when missing).
set -euo pipefail
ROOT="$(cd "$(dirname "$0")/../.." && pwd)"
cd "$ROOT"
source "$ROOT/models/zoo/chat_streams.sh"
log() { echo "[zoo-chat-draft $(date +%H:%M:%S)] $*"; }

# One process of ZOO_THREADS threads, seeded (a batch depends only on seed and step):
# the domain drafters' fine-tune (KD weight 0.9, batch 8 x 256, lr 1.5e-3), teacher
# target-chat.gguf, on the chat model's own phase-1 mix: 85% chat conversations and 15%
# the general mix, so that the drafter still follows when a turn continues code or text.
CHAT_MIX="chat=0.85,code=0.05,prose=0.04,config=0.02,math=0.04"
log "distilling $MODELS/draft.gguf from $MODELS/target-chat.gguf (log: $WORK/draft-chat.log)"
$PY "$ZOO/train.py" train --data "$WORK/tokens" --seq 256 --device "${ZOO_DEVICE:-auto}" \
  --out "$WORK/draft-chat.pt" --init "$MODELS/draft.gguf" --teacher "$MODELS/target-chat.gguf" \
  --kd-weight 0.9 --mix "$CHAT_MIX" --tokens "$(tokens 600000)" --batch 8 --lr 1.5e-3 --warmup 10 \
  --seed 4 >> "$WORK/draft-chat.log" 2>&1
$PY "$ZOO/export.py" --ckpt "$WORK/draft-chat.pt" --tokenizer "$WORK/tokenizer.json" \
  --out "$MODELS/draft-chat.gguf" --name "parspec-zoo-draft-chat" --type f16
log "wrote $MODELS/draft-chat.gguf"

# Acceptance with the engine: greedy sd (gamma 4) for the chat model on the chat prompt
# set (each prompt one user turn in the model's template), with the general drafter and
# with this one; every output checked against ar.
PARSPEC="${PARSPEC:-$ROOT/build/parspec}"
if [ -x "$PARSPEC" ]; then
  for m in draft draft-chat; do
    "$PARSPEC" bench -m "$MODELS/target-chat.gguf" -md "$MODELS/$m.gguf" --strategies ar,sd --prompts chat \
      -n 64 -t 1 --json "$WORK/engine-chat-$m.json" > "$WORK/engine-chat-$m.log" 2>&1 ||
      { log "engine run failed: see $WORK/engine-chat-$m.log"; exit 1; }
    $PY -c "import json, sys; r = next(r for r in json.load(open(sys.argv[1]))['results'] if r['strategy'] != 'ar'); \
print(f\"target-chat + {sys.argv[2]}: sd tau {r['tau']:.2f} alpha {r['alpha']:.2f}, \
{'identical to ar' if not r['mismatch'] else 'OUTPUT DIFFERS FROM ar'}\")" "$WORK/engine-chat-$m.json" "$m"
  done
else
  log "no parspec binary at $PARSPEC: acceptance not measured"
fi
sha256sum "$MODELS/draft-chat.gguf"
