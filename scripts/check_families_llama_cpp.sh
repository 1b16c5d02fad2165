#!/usr/bin/env bash
# Checks parspec's forward pass of the dense families llama.cpp knows (gemma2,
# phi3 with a sliding window and with LongRoPE, Mistral-style llama) against
# llama.cpp: random-weight models written by `parspec make-model` (fixed seeds)
# must give the same perplexity (within 0.1%) on tests/data/families_text.txt
# and the same greedy tokens.
#   scripts/check_families_llama_cpp.sh LLAMA_CPP_DIR            compare, exit 1 on a mismatch
#   scripts/check_families_llama_cpp.sh LLAMA_CPP_DIR --record   also write llama.cpp's results
#                                           to tests/data/families_llama_cpp.json, which the CTest
#                                           FamiliesLlamaCpp checks parspec against on every run
# LLAMA_CPP_DIR is a llama.cpp checkout built with CMake (build/bin/llama-perplexity and
# libllama.so); recorded with c392e5094. Needs build/parspec (ninja -C build parspec).
# What that llama.cpp does with llama.attention.sliding_window: nothing (it reads the key for
# phi3, gemma2 and cohere2 only), so the llama case is compared within its window (context <=
# window), where a window changes nothing; the window rule itself is compared through phi3
# (every layer) and gemma2 (even layers), which llama.cpp masks as parspec does.
set -euo pipefail
ROOT=$(cd "$(dirname "$0")/.." && pwd)
if [[ $# -lt 1 || ! -x "$1/build/bin/llama-perplexity" ]]; then
  echo "usage: $0 LLAMA_CPP_DIR [--record]  (LLAMA_CPP_DIR/build/bin/llama-perplexity must exist)" >&2
  exit 2
fi
LLAMA_CPP=$(cd "$1" && pwd)
RECORD=${2:-}
PARSPEC=$ROOT/build/parspec
TEXT=$ROOT/tests/data/families_text.txt
PROMPT="Speculative decoding lets a small model"
N_PREDICT=32
WORK=$(mktemp -d)
trap 'rm -rf "$WORK"' EXIT

g++ -std=c++17 -O1 -I"$LLAMA_CPP/include" -I"$LLAMA_CPP/ggml/include" \
  "$ROOT/scripts/llama_cpp_greedy.cpp" -L"$LLAMA_CPP/build/bin" -lllama \
  -Wl,-rpath,"$LLAMA_CPP/build/bin" -o "$WORK/llama_cpp_greedy"
commit=$(git -C "$LLAMA_CPP" rev-parse --short=9 HEAD 2>/dev/null || echo unknown)

# name | context | make-model arguments (hidden-style: --logit-spread above 1)
CASES=(
  "gemma2|128|--arch gemma2 --n-layer 26 --n-vocab 512 --sliding-window 16 --attn-softcap 2 --final-softcap 5 --logit-spread 2 --seed 1"
  "phi3_sliding|128|--arch phi3 --n-layer 3 --n-vocab 512 --sliding-window 16 --logit-spread 3 --seed 2"
  "phi3_longrope_long|128|--arch phi3 --n-layer 2 --n-vocab 512 --ctx 4096 --longrope-context 64 --logit-spread 3 --seed 3"
  "phi3_longrope_short|128|--arch phi3 --n-layer 2 --n-vocab 512 --ctx 4096 --longrope-context 128 --logit-spread 3 --seed 3"
  "llama_sliding|128|--arch llama --n-layer 3 --n-vocab 512 --sliding-window 128 --logit-spread 3 --seed 4"
)

status=0
results=()
for entry in "${CASES[@]}"; do
  IFS='|' read -r name ctx args <<< "$entry"
  model=$WORK/$name.gguf
  # shellcheck disable=SC2086
  "$PARSPEC" make-model -o "$model" $args 2> /dev/null
  ppl_ref=$("$LLAMA_CPP/build/bin/llama-perplexity" -m "$model" -f "$TEXT" -c "$ctx" -b "$ctx" -t 2 2>&1 |
    sed -n 's/.*Final estimate: PPL = \([0-9.]*\).*/\1/p')
  ppl_ours=$("$PARSPEC" perplexity -m "$model" -f "$TEXT" -c "$ctx" -t 2 2> /dev/null |
    sed -n 's/^PPL = \([0-9.]*\)$/\1/p')
  greedy_ref=$("$WORK/llama_cpp_greedy" "$model" "$ctx" "$N_PREDICT" "$PROMPT")
  greedy_ours=$("$PARSPEC" generate -m "$model" -p "$PROMPT" -n "$N_PREDICT" --temp 0 \
    --ignore-eos -c "$ctx" -t 1 --json 2> /dev/null)
  line=$(/usr/bin/python3 - "$name" "$ctx" "$args" "$model" "$ppl_ref" "$ppl_ours" \
    "$greedy_ref" "$greedy_ours" <<'PY'
import json, sys
name, ctx, args, model, ppl_ref, ppl_ours, greedy_ref, greedy_ours = sys.argv[1:]
ref, ours = json.loads(greedy_ref), json.loads(greedy_ours)
ppl_ref, ppl_ours = float(ppl_ref), float(ppl_ours)
h = 0xCBF29CE484222325  # FNV-1a 64 of the file: the CTest checks it is rewritten byte for byte
for b in open(model, "rb").read():
    h = ((h ^ b) * 0x100000001B3) & 0xFFFFFFFFFFFFFFFF
rel = abs(ppl_ours - ppl_ref) / ppl_ref
same = ours["tokens"] == ref["tokens"]
ok = rel <= 1e-3 and same
print(f"{name}: llama.cpp PPL {ppl_ref:.4f}, parspec {ppl_ours:.4f} ({100 * rel:.4f}%); "
      f"greedy {'equal' if same else 'DIFFERENT'} ({len(ref['tokens'])} tokens): "
      f"{'OK' if ok else 'MISMATCH'}", file=sys.stderr)
if not same:
    print(f"  llama.cpp {ref['tokens']}\n  parspec   {ours['tokens']}", file=sys.stderr)
print(json.dumps({"name": name, "ctx": int(ctx), "make_model": args, "fnv1a64": f"{h:016x}",
                  "prompt_ids": ref["prompt"], "perplexity": ppl_ref, "greedy": ref["tokens"],
                  "ok": ok}))
PY
)
  results+=("$line")
  if [[ $(/usr/bin/python3 -c 'import json,sys; print(json.loads(sys.argv[1])["ok"])' "$line") != True ]]; then
    status=1
  fi
done

if [[ $RECORD == --record && $status -ne 0 ]]; then
  echo "not recording: parspec and llama.cpp disagree" >&2
elif [[ $RECORD == --record ]]; then
  printf '%s\n' "${results[@]}" > "$WORK/results.jsonl"
  /usr/bin/python3 - "$commit" "$PROMPT" "$N_PREDICT" "$WORK/results.jsonl" \
    "$ROOT/tests/data/families_llama_cpp.json" <<'PY'
import json, sys
commit, prompt, n_predict, results, out = sys.argv[1:]
cases = [json.loads(line) for line in open(results) if line.strip()]
for c in cases:
    del c["ok"]
data = {"llama_cpp_commit": commit, "recorded_by": "scripts/check_families_llama_cpp.sh",
        "text": "tests/data/families_text.txt", "prompt": prompt, "n_predict": int(n_predict),
        "cases": cases}
with open(out, "w") as f:
    json.dump(data, f, indent=1)
    f.write("\n")
PY
  echo "wrote $ROOT/tests/data/families_llama_cpp.json (llama.cpp $commit)" >&2
fi
exit $status
