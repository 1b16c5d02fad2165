#!/usr/bin/env bash
# parspec beside llama.cpp on the same GGUF files, thread counts and machine,
# one engine after the other for each thread count:
#   - decode:  llama-bench tg (-n) against parspec bench-forward's decode tok/s
#   - prefill: llama-bench pp (-p) against parspec bench-forward's L(n) (n tokens / L(n))
#
#   LLAMA_CPP_DIR=/path/to/llama.cpp bash bench/compare_llama_cpp.sh [-t 1,2] [-p 8,512] [-r 3] [-i 1] MODEL.gguf...
#
# -r is the repetitions inside each engine's run; -i runs that many rounds of
# both engines, alternating which goes first, and reports the median of the
# rounds' ratios: on a VM whose memory speed drifts, single runs minutes apart
# move by 20% to 2x, a pair run back to back much less.
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
rounds=1
while [[ $# -gt 0 ]]; do
  case "$1" in
    -t) threads="$2"; shift 2 ;;
    -p) prompts="$2"; shift 2 ;;
    -r) repeat="$2"; shift 2 ;;
    -i) rounds="$2"; shift 2 ;;
    -h|--help) sed -n '2,17p' "$0"; exit 0 ;;
    *) break ;;
  esac
done
[[ $# -ge 1 ]] || { echo "usage: LLAMA_CPP_DIR=DIR $0 [-t LIST] [-p LIST] [-r N] [-i N] MODEL.gguf..." >&2; exit 2; }
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
# One round runs each engine once; odd rounds run llama.cpp first, even rounds
# parspec first, so a drift of the machine's memory speed does not favour one.
run_llama() {  # model threads json
  [[ ${SKIP_LLAMA:-0} == 1 ]] && return 0
  "$bench" -m "$1" -t "$2" -p "$prompts" -n "$decode_tokens" -r "$repeat" -o json >"$3" 2>/dev/null
}
run_parspec() {  # model threads json
  "$parspec" bench-forward -m "$1" -t "$2" -b "$prompts" -r "$repeat" \
    --decode-tokens "$decode_tokens" --json "$3" >/dev/null 2>&1
}
for model in "$@"; do
  name=$(basename "$model" .gguf)
  for t in ${threads//,/ }; do
    load=$(cut -d' ' -f1 /proc/loadavg)
    rm -f "$out/$name-t$t-"*.json
    for ((round = 1; round <= rounds; round++)); do
      llama_json="$out/$name-t$t-llama-$round.json"
      parspec_json="$out/$name-t$t-parspec-$round.json"
      if ((round % 2)); then
        run_llama "$model" "$t" "$llama_json"; run_parspec "$model" "$t" "$parspec_json"
      else
        run_parspec "$model" "$t" "$parspec_json"; run_llama "$model" "$t" "$llama_json"
      fi
    done
    $py - "$out" "$name-t$t" "$rounds" "$prompts" "$name" "$t" "$load" "${LABEL:-parspec}" <<'EOF'
import json, os, statistics, sys
out, stem, rounds, prompts, name, t, load, label = sys.argv[1:]
prompts = [int(p) for p in prompts.split(",")]
def llama(path):  # decode and ppN rates of one llama-bench run
    rows = json.load(open(path))
    tg = next(r["avg_ts"] for r in rows if r["n_prompt"] == 0)
    pp = [next((r["avg_ts"] for r in rows if r["n_prompt"] == p and r["n_gen"] == 0), float("nan"))
          for p in prompts]
    return [tg] + pp
roofs = []  # the read-bandwidth roofline (tok/s) bench-forward measured in each round
def parspec(path):
    d = json.load(open(path))["results"][0]
    roofs.append(d["roofline_tok_per_s"])
    return [d["decode_tok_per_s"]] + [p * 1000.0 / d["latency_ms"][str(p)] for p in prompts]
runs = {"llama": [], "parspec": []}
for r in range(1, int(rounds) + 1):
    for engine, read in (("llama", llama), ("parspec", parspec)):
        path = f"{out}/{stem}-{engine}-{r}.json"
        if os.path.exists(path):
            runs[engine].append(read(path))
def median_row(rows):
    return [statistics.median(column) for column in zip(*rows)]
def cells(values, fmt):
    return " | ".join(fmt.format(v) for v in values)
if runs["llama"]:
    print(f"| {name} | {t} | llama.cpp | {cells(median_row(runs['llama']), '{:.2f}')} | {load} |")
print(f"| {name} | {t} | {label} | {cells(median_row(runs['parspec']), '{:.2f}')} | {load} |")
if runs["llama"]:
    # The ratio of each round's pair, then the median (and range) over rounds:
    # a pair ran minutes apart at most, so it shares the machine's state.
    ratios = [[p / l for p, l in zip(pr, lr)] for pr, lr in zip(runs["parspec"], runs["llama"])]
    columns = list(zip(*ratios))
    text = [f"**{statistics.median(c):.2f}**" + (f" ({min(c):.2f}–{max(c):.2f})" if len(c) > 1 else "")
            for c in columns]
    print(f"| {name} | {t} | × llama.cpp | {' | '.join(text)} | |")
    # Each engine's decode against the read-bandwidth roofline parspec measured
    # in the same round: no engine decodes above it, so roofline / llama.cpp is
    # the largest decode ratio this machine allows.
    shares = {e: statistics.median(row[0] / f for row, f in zip(runs[e], roofs)) for e in runs}
    ceiling = statistics.median(f / row[0] for row, f in zip(runs["llama"], roofs))
    print(f"| {name} | {t} | decode / roofline | llama.cpp {shares['llama']:.0%}, {label} "
          f"{shares['parspec']:.0%}; ceiling {ceiling:.2f}× | |")
EOF
  done
done
echo
echo "decode: llama-bench tg$decode_tokens vs bench-forward decode (after 64 tokens of context);"
echo "ppN: N-token prompt in one forward (llama-bench ppN; parspec N / L(N)). Rates are medians over"
echo "$rounds interleaved round(s); × llama.cpp is the median (and range) of the rounds' ratios; decode / roofline"
echo "is each engine's decode against the roofline bench-forward measured in the same round, and the"
echo "ceiling is roofline / llama.cpp decode: the largest decode ratio the memory allows (for models"
echo "larger than the caches; a cache-resident model decodes above it). Raw JSON in $out/."
