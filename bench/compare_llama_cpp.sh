#!/usr/bin/env bash
# parspec beside llama.cpp on the same GGUF files, thread counts and machine,
# one engine after the other for each thread count:
#   - decode:  llama-bench tg (-n) against parspec bench-forward's decode tok/s
#   - prefill: llama-bench pp (-p) against parspec bench-forward's L(n) (n tokens / L(n))
#
#   LLAMA_CPP_DIR=/path/to/llama.cpp bash bench/compare_llama_cpp.sh [-t 1,2] [-p 8,512] MODEL.gguf...
#
# LLAMA_CPP_DIR is a llama.cpp checkout with a build in build/bin (or the bin
# directory itself). Optional: nothing in parspec's build or tests needs it.
# PARSPEC=path/to/parspec measures another build (default build/parspec);
# SKIP_LLAMA=1 prints the parspec rows only (an earlier build beside a run);
# LABEL names the parspec rows (default "parspec").
set -euo pipefail
cd "$(dirname "$0")/.."
threads=1,2
prompts=8,64
decode_tokens=32
repeat=3
while [[ $# -gt 0 ]]; do
  case "$1" in
    -t) threads="$2"; shift 2 ;;
    -p) prompts="$2"; shift 2 ;;
    -r) repeat="$2"; shift 2 ;;
    -h|--help) sed -n '2,14p' "$0"; exit 0 ;;
    *) break ;;
  esac
done
[[ $# -ge 1 ]] || { echo "usage: LLAMA_CPP_DIR=DIR $0 [-t LIST] [-p LIST] [-r N] MODEL.gguf..." >&2; exit 2; }
[[ -n "${LLAMA_CPP_DIR:-}" ]] || { echo "set LLAMA_CPP_DIR to a llama.cpp build" >&2; exit 2; }
bench=""
for candidate in "$LLAMA_CPP_DIR/build/bin/llama-bench" "$LLAMA_CPP_DIR/llama-bench" "$LLAMA_CPP_DIR/bin/llama-bench"; do
  [[ -x $candidate ]] && { bench=$candidate; break; }
done
[[ -n $bench ]] || { echo "no llama-bench under $LLAMA_CPP_DIR" >&2; exit 1; }
parspec=${PARSPEC:-build/parspec}
[[ -x $parspec ]] || { echo "build parspec first: bash scripts/build.sh" >&2; exit 1; }
out=out/compare_llama_cpp
mkdir -p "$out"
py=/usr/bin/python3

echo "cpu: $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2- | xargs) ($(nproc) cores visible)"
echo "llama.cpp: $bench"
echo "parspec kernels: $($parspec info "$1" | sed -n 's/^  kernels *//p')"
echo
echo "| model | threads | engine | decode tok/s | $(echo "$prompts" | tr ',' '\n' | sed 's/.*/pp& tok\/s/' | paste -sd'|' | sed 's/|/ | /g') | loadavg |"
echo "|---|---|---|---|$(echo "$prompts" | tr ',' '\n' | sed 's/.*/---/' | paste -sd'|')|---|"
for model in "$@"; do
  name=$(basename "$model" .gguf)
  for t in ${threads//,/ }; do
    load=$(cut -d' ' -f1 /proc/loadavg)
    json="$out/$name-t$t-llama.json"
    [[ ${SKIP_LLAMA:-0} == 1 ]] || "$bench" -m "$model" -t "$t" -p "$prompts" -n "$decode_tokens" -r "$repeat" -o json >"$json" 2>/dev/null
    [[ ${SKIP_LLAMA:-0} == 1 ]] || $py - "$json" "$prompts" "$name" "$t" "$load" <<'EOF'
import json, sys
rows = json.load(open(sys.argv[1]))
prompts = [int(p) for p in sys.argv[2].split(",")]
def rate(n_prompt, n_gen):
    for r in rows:
        if r["n_prompt"] == n_prompt and r["n_gen"] == n_gen:
            return r["avg_ts"]
    return float("nan")
tg = next(r["avg_ts"] for r in rows if r["n_prompt"] == 0)
print(f"| {sys.argv[3]} | {sys.argv[4]} | llama.cpp | {tg:.2f} | " +
      " | ".join(f"{rate(p, 0):.1f}" for p in prompts) + f" | {sys.argv[5]} |")
EOF
    load=$(cut -d' ' -f1 /proc/loadavg)
    json="$out/$name-t$t-parspec.json"
    "$parspec" bench-forward -m "$model" -t "$t" -b "$prompts" -r "$repeat" \
      --decode-tokens "$decode_tokens" --json "$json" >/dev/null 2>&1
    $py - "$json" "$prompts" "$name" "$t" "$load" "${LABEL:-parspec}" <<'EOF'
import json, sys
d = json.load(open(sys.argv[1]))["results"][0]
prompts = sys.argv[2].split(",")
print(f"| {sys.argv[3]} | {sys.argv[4]} | {sys.argv[6]} | {d['decode_tok_per_s']:.2f} | " +
      " | ".join(f"{int(p) * 1000.0 / d['latency_ms'][p]:.1f}" for p in prompts) +
      f" | {sys.argv[5]} |")
EOF
  done
done
echo
echo "decode: llama-bench tg$decode_tokens vs bench-forward decode (after 64 tokens of context);"
echo "ppN: N-token prompt in one forward (llama-bench ppN; parspec N / L(N)). Raw JSON in $out/."
