# Sourced by the zoo's chat stages (build_chat.sh, build_chat_draft.sh) after they cd to the
# repository root (ROOT): the zoo's paths and settings (ZOO_WORK, ZOO_MODELS_DIR, ZOO_SCALE,
# ZOO_THREADS as in build.sh), tokens() to scale a token budget, and the streams both train
# on, each made only when missing: the corpus, the committed target's tokenizer, the token
# streams and the chat conversations.
ZOO="$ROOT/models/zoo"
WORK="${ZOO_WORK:-$ROOT/out/zoo}"
MODELS="${ZOO_MODELS_DIR:-$ROOT/models}"
SCALE="${ZOO_SCALE:-1}"
PY=/usr/bin/python3
export ZOO_THREADS="${ZOO_THREADS:-1}"
mkdir -p "$WORK"
tokens() { $PY -c "print(max(2048, int($1 * $SCALE)))"; }

if [ ! -f "$WORK/corpus/stats.json" ]; then
  $PY "$ZOO/corpus.py" build --manifest "$ZOO/corpus/manifest.tsv" --out "$WORK/corpus.tmp"
  rm -rf "$WORK/corpus" && mv "$WORK/corpus.tmp" "$WORK/corpus"
fi
if [ ! -f "$WORK/tokenizer.json" ]; then  # the committed target's vocabulary, not a new BPE run
  (cd "$ZOO" && $PY -c "import sys, gguf_writer, reference; \
reference.tokenizer_from_meta(gguf_writer.read_gguf(sys.argv[1])[0]).save(sys.argv[2])" \
    "$MODELS/target.gguf" "$WORK/tokenizer.json")
fi
if [ ! -f "$WORK/tokens/stats.json" ]; then
  $PY "$ZOO/train.py" tokenize --corpus "$WORK/corpus" --tokenizer "$WORK/tokenizer.json" --out "$WORK/tokens.tmp"
  rm -rf "$WORK/tokens" && mv "$WORK/tokens.tmp" "$WORK/tokens"
fi
if [ ! -f "$WORK/tokens/chat.heldout.npy" ]; then
  $PY "$ZOO/chat_data.py" --corpus "$WORK/corpus" --tokenizer "$WORK/tokenizer.json" --out "$WORK/tokens"
fi
