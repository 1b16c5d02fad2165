#!/usr/bin/env bash
# CoSine against its baselines in the server (docs/performance.md, "CoSine"): for each
# strategy a `parspec serve` on the same target, then bench/loadgen.py with Poisson arrivals
# at a low, a high and a fluctuating rate; prints one markdown table (mean and p99 latency,
# throughput) and keeps each run's JSON in $OUT.
#
# Usage: bash bench/cosine_load.sh
# Env:   PARSPEC (build/parspec), TARGET (models/target.gguf), DRAFT (models/draft.gguf, sd's),
#        DRAFTERS (the four zoo drafters, comma-separated), STRATEGIES (ar,sd,specinfer,cosine),
#        RATES (2,20,2~20), PERIOD (seconds of each phase of a fluctuating rate, 5), REQUESTS (60 per rate), MAX_TOKENS (64), THREADS (-t, 1),
#        THREADS_DRAFT (-td, 1: drafting passes beside verification), SLOTS (-np, 4),
#        EXTRA (more serve flags), COSINE_FLAGS (cosine's own, e.g. "--fusion-top 2"),
#        OUT (out/cosine-load), TABLE_ONLY (set: only print the table from the JSON in $OUT)
set -euo pipefail
cd "$(dirname "$0")/.."
PARSPEC=${PARSPEC:-build/parspec}
TARGET=${TARGET:-models/target.gguf}
DRAFT=${DRAFT:-models/draft.gguf}
DRAFTERS=${DRAFTERS:-models/draft.gguf,models/draft-code.gguf,models/draft-prose.gguf,models/draft-math.gguf}
STRATEGIES=${STRATEGIES:-ar,sd,specinfer,cosine}
RATES=${RATES:-2,20,2~20}
PERIOD=${PERIOD:-5}
REQUESTS=${REQUESTS:-60}
MAX_TOKENS=${MAX_TOKENS:-64}
THREADS=${THREADS:-1}
THREADS_DRAFT=${THREADS_DRAFT:-1}
SLOTS=${SLOTS:-4}
EXTRA=${EXTRA:-}
COSINE_FLAGS=${COSINE_FLAGS:-}
OUT=${OUT:-out/cosine-load}
[[ -x "$PARSPEC" ]] || { echo "cosine_load: $PARSPEC not found; build first" >&2; exit 1; }
mkdir -p "$OUT"

server_pid=""
stop_server() { [[ -n "$server_pid" ]] && kill "$server_pid" 2>/dev/null && wait "$server_pid" 2>/dev/null; server_pid=""; }
trap stop_server EXIT

for strategy in ${STRATEGIES//,/ }; do
  [[ -z "${TABLE_ONLY:-}" ]] || break
  flags=(-m "$TARGET" --strategy "$strategy" -t "$THREADS" -np "$SLOTS" --port 0)
  case $strategy in
    ar) ;;
    sd) flags+=(-md "$DRAFT" -td "$THREADS_DRAFT") ;;
    cosine)
      # shellcheck disable=SC2206
      flags+=(--drafters "$DRAFTERS" -td "$THREADS_DRAFT" $COSINE_FLAGS) ;;
    *) flags+=(--drafters "$DRAFTERS" -td "$THREADS_DRAFT") ;;
  esac
  # shellcheck disable=SC2086
  "$PARSPEC" serve "${flags[@]}" $EXTRA >"$OUT/$strategy.server.log" 2>&1 &
  server_pid=$!
  port=""
  # cosine times L(n) at start when `parspec tune` has no entry for the pair: up to 60 s.
  for _ in $(seq 300); do
    port=$(sed -n 's/.*listening on http:\/\/[^:]*:\([0-9]*\).*/\1/p' "$OUT/$strategy.server.log")
    [[ -n "$port" ]] && break
    sleep 0.2
  done
  [[ -n "$port" ]] || { cat "$OUT/$strategy.server.log" >&2; exit 1; }
  /usr/bin/python3 bench/loadgen.py --url "http://127.0.0.1:$port" --rates "$RATES" --period "$PERIOD" \
    --requests "$REQUESTS" --max-tokens "$MAX_TOKENS" --ignore-eos --prompts code,prose,math,config,chat \
    --pid "$server_pid" --json "$OUT/$strategy.json" >"$OUT/$strategy.loadgen.md"
  curl -s "http://127.0.0.1:$port/metrics" >"$OUT/$strategy.metrics.txt" || true
  stop_server
done

/usr/bin/python3 - "$OUT" "$STRATEGIES" <<'PY'
import json, os, sys
out, strategies = sys.argv[1], sys.argv[2].split(",")
print("| strategy | rate | latency mean (ms) | latency p99 (ms) | throughput (tok/s) | TTFT p50 (ms) | errors | load (1 min) |")
print("|---|---|---:|---:|---:|---:|---:|---:|")
for s in strategies:
    d = json.load(open(os.path.join(out, s + ".json")))
    for r in d["results"]:
        print(f"| {s} | {r.get('rate', r.get('load'))} | {r['latency_mean_ms']:.0f} | {r['latency_p99_ms']:.0f} | "
              f"{r['throughput_tok_s']:.1f} | {r['ttft_p50_ms']:.1f} | {r['errors']} | {d['load'][0]:.1f} |")
PY
