#!/usr/bin/env bash
# Mixture-of-experts models (Mixtral-style llama files with experts, qwen2moe)
# against llama.cpp: random-weight GGUF files written by `parspec make-model`
# must give the same perplexity (within 0.1%) and the same greedy tokens in
# llama.cpp and parspec. llama.cpp's figures are recorded into
# tests/data/moe_llama_cpp.json, which the CTest MoeLlamaCpp.* checks parspec
# against on every run without llama.cpp (the models are regenerated from
# their make-model arguments: the writer is deterministic).
#   bash scripts/check_moe_llama_cpp.sh LLAMA_CPP_DIR     # llama.cpp's source tree, built in build/
# Needs parspec built (build/parspec, build/tests/test_moe_llama_cpp) and python3.
set -euo pipefail
ROOT=$(cd "$(dirname "$0")/.." && pwd)
LLAMA_CPP=${1:?usage: check_moe_llama_cpp.sh LLAMA_CPP_DIR}
BIN=$LLAMA_CPP/build/bin
PARSPEC=$ROOT/build/parspec
OUT=$ROOT/tests/data/moe_llama_cpp.json
WORK=$(mktemp -d)
trap 'rm -rf "$WORK"' EXIT
CTX=128
N_PREDICT=24

# name | make-model arguments (the shape, weights and seed of the model)
CASES=(
  "mixtral_f32|--arch llama --experts 8 --experts-used 2 --n-embd 64 --n-ff 128 --n-layer 2 --n-vocab 300 --seed 3"
  "mixtral_q8_0|--arch llama --experts 4 --experts-used 2 --n-embd 64 --n-ff 96 --n-layer 3 --n-head 8 --n-head-kv 2 --n-vocab 300 --type q8_0 --seed 5"
  "qwen2moe_f32|--arch qwen2moe --experts 8 --experts-used 4 --n-ff-expert 64 --n-ff-shared 160 --n-embd 64 --n-ff 128 --n-layer 2 --n-vocab 300 --seed 7"
  "qwen2moe_f16|--arch qwen2moe --experts 6 --experts-used 3 --n-ff-expert 96 --n-ff-shared 64 --n-embd 64 --n-ff 128 --n-layer 3 --n-vocab 300 --type f16 --seed 9"
)
PROMPTS=("Once upon a time" "def add(a, b):" "The capital of France is")

g++ -std=c++17 -O1 -I"$LLAMA_CPP/include" -I"$LLAMA_CPP/ggml/include" \
  "$ROOT/scripts/llama_cpp_greedy_ids.cpp" -L"$BIN" -lllama -Wl,-rpath,"$BIN" \
  -o "$WORK/llama_cpp_greedy_ids"
commit=$(git -C "$LLAMA_CPP" rev-parse --short=9 HEAD 2>/dev/null || echo unknown)

# The scored text: the bundled prose prompts, a fixed copy kept in the JSON.
python3 - "$ROOT/bench/prompts/prose.jsonl" "$WORK/text.txt" <<'PY'
import json, sys
lines = [json.loads(l)["prompt"] for l in open(sys.argv[1]) if l.strip()]
open(sys.argv[2], "w").write("\n".join(lines)[:1800])
PY
# Byte-level vocabulary without merges: a prompt's ids are BOS and its bytes.
prompt_ids=$(python3 -c 'import json,sys; print(json.dumps([[256]+list(p.encode()) for p in sys.argv[1:]]))' "${PROMPTS[@]}")

fail=0
entries=()
for case in "${CASES[@]}"; do
  name=${case%%|*}
  args=${case#*|}
  model=$WORK/$name.gguf
  # shellcheck disable=SC2086
  "$PARSPEC" make-model $args -o "$model" 2>/dev/null
  ref_ppl=$("$BIN/llama-perplexity" -m "$model" -f "$WORK/text.txt" -c $CTX -t 1 2>&1 |
    sed -n 's/.*Final estimate: PPL = \([0-9.]*\).*/\1/p')
  ours_ppl=$("$PARSPEC" perplexity -m "$model" -f "$WORK/text.txt" -c $CTX -t 1 2>/dev/null |
    sed -n 's/^PPL = \([0-9.]*\)$/\1/p')
  ref_greedy=$("$WORK/llama_cpp_greedy_ids" "$model" $N_PREDICT "$prompt_ids")
  ours_greedy=$(for p in "${PROMPTS[@]}"; do
    "$PARSPEC" generate -m "$model" -p "$p" -n $N_PREDICT --temp 0 --ignore-eos --json -t 1 \
      2>/dev/null | python3 -c 'import json,sys; print(json.dumps(json.load(sys.stdin)["tokens"]))'
  done | python3 -c 'import json,sys; print(json.dumps([json.loads(l) for l in sys.stdin]))')
  verdict=$(python3 - "$ref_ppl" "$ours_ppl" "$ref_greedy" "$ours_greedy" <<'PY'
import json, sys
ref, ours = float(sys.argv[1]), float(sys.argv[2])
same = json.loads(sys.argv[3]) == json.loads(sys.argv[4])
rel = abs(ours - ref) / ref
print(f"{'ok' if rel <= 1e-3 and same else 'FAIL'} perplexity llama.cpp {ref} parspec {ours} "
      f"({100 * rel:.4f}%), greedy tokens {'equal' if same else 'DIFFER'}")
PY
)
  echo "$name: $verdict"
  [[ $verdict == ok* ]] || fail=1
  entries+=("$(python3 -c 'import json,sys; print(json.dumps({"name": sys.argv[1], "make_model": sys.argv[2].split(), "perplexity": float(sys.argv[3]), "greedy": json.loads(sys.argv[4])}))' "$name" "$args" "$ref_ppl" "$ref_greedy")")
done

python3 - "$OUT" "$commit" "$CTX" "$N_PREDICT" "$WORK/text.txt" "$(printf '%s\n' "${PROMPTS[@]}")" \
  "$(printf '%s\n' "${entries[@]}")" <<'PY'
import json, sys
out, commit, ctx, n_predict, text_path, prompts, entries = sys.argv[1:]
data = {"llama_cpp_commit": commit,
        "recorded_by": "scripts/check_moe_llama_cpp.sh",
        "ctx": int(ctx), "n_predict": int(n_predict),
        "text": open(text_path).read(),
        "prompts": prompts.splitlines(),
        "models": [json.loads(e) for e in entries.splitlines()]}
with open(out, "w") as f:
    json.dump(data, f, indent=1)
    f.write("\n")
PY
echo "wrote $OUT (llama.cpp $commit)"
exit $fail
