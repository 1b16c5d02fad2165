#!/usr/bin/env bash
# Load on `parspec serve` (docs/performance.md, "The server under load"):
#   1. open loop: Poisson arrivals at each rate in RATES, N requests each, streamed, for
#      ar and sd on the zoo pair (speculation off vs on under load);
#   2. closed loop: 1 client vs 8 clients back to back (batched throughput at 8
#      concurrent requests vs one), on the zoo pair and, when present, the inflated
#      1B-class pair (bash bench/make_pairs.sh small).
# Usage: bash bench/serve_load.sh [open|closed|closed-1b|all]
# Env: PARSPEC (build/parspec), THREADS (2), RATES (20,50,100), N (1000), MAX_TOKENS (64),
#      OUT (out/: where the inflated pair is), PORT (18480)
set -euo pipefail
cd "$(dirname "$0")/.."
PARSPEC=${PARSPEC:-build/parspec}
THREADS=${THREADS:-2}
RATES=${RATES:-20,50,100}
N=${N:-1000}
MAX_TOKENS=${MAX_TOKENS:-64}
OUT=${OUT:-out}
PORT=${PORT:-18480}
WHICH=${1:-all}
PY=/usr/bin/python3

# serve ARGS...: starts the server in the background, sets SERVER_PID, waits until it answers.
serve() {
  "$PARSPEC" serve --port "$PORT" -t "$THREADS" --max-queue 1000 "$@" > /tmp/parspec-serve-load.log 2>&1 &
  SERVER_PID=$!
  for _ in $(seq 100); do
    curl -sf "http://127.0.0.1:$PORT/health" > /dev/null 2>&1 && return
    sleep 0.2
  done
  echo "serve_load: the server did not start:" >&2
  cat /tmp/parspec-serve-load.log >&2
  exit 1
}
stop() {
  kill -TERM "$SERVER_PID"
  wait "$SERVER_PID" || true
}

echo "# $(date -u '+%Y-%m-%d %H:%M UTC'), load average before: $(cut -d' ' -f1-3 /proc/loadavg)"
echo "# CPU: $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | xargs), $(nproc) cores usable"

if [[ $WHICH == open || $WHICH == all ]]; then
  for strategy in ar sd; do
    echo
    echo "## zoo (models/target.gguf + models/draft.gguf), --strategy $strategy, -np 8, -t $THREADS," \
      "$N streamed requests per rate, max_tokens $MAX_TOKENS, prompts code,math,prose,chat"
    serve -m models/target.gguf -md models/draft.gguf --strategy "$strategy" -np 8 -c 256
    $PY bench/loadgen.py --url "http://127.0.0.1:$PORT" --rates "$RATES" --requests "$N" \
      --max-tokens "$MAX_TOKENS" --prompts code,math,prose,chat --pid "$SERVER_PID" || true
    stop
    echo "# load average now: $(cut -d' ' -f1-3 /proc/loadavg)"
  done
fi

# closed_pair NAME TARGET DRAFT REQUESTS_PER_CLIENT MAX_TOKENS
closed_pair() {
  local name=$1 target=$2 draft=$3 per_client=$4 max_tokens=$5
  for strategy in ar sd; do
    echo
    echo "## $name, --strategy $strategy, closed loop, max_tokens $max_tokens (ignore_eos), -t $THREADS"
    serve -m "$target" -md "$draft" --strategy "$strategy" -np 8 -c 512
    $PY bench/loadgen.py --url "http://127.0.0.1:$PORT" --concurrency 1 \
      --requests "$per_client" --max-tokens "$max_tokens" --ignore-eos --prompts code,math \
      --pid "$SERVER_PID" || true
    $PY bench/loadgen.py --url "http://127.0.0.1:$PORT" --concurrency 8 \
      --requests $((8 * per_client)) --max-tokens "$max_tokens" --ignore-eos --prompts code,math \
      --pid "$SERVER_PID" | tail -1 || true
    stop
    echo "# load average now: $(cut -d' ' -f1-3 /proc/loadavg)"
  done
}

if [[ $WHICH == closed || $WHICH == all ]]; then
  closed_pair "zoo" models/target.gguf models/draft.gguf 40 64
fi
if [[ $WHICH == closed || $WHICH == closed-1b || $WHICH == all ]]; then
  if [[ -s $OUT/zoo-target-1b-f16.gguf && -s $OUT/zoo-draft-100m-f16.gguf ]]; then
    closed_pair "inflated 1B-class pair (f16)" "$OUT/zoo-target-1b-f16.gguf" \
      "$OUT/zoo-draft-100m-f16.gguf" 3 32
  else
    echo "serve_load: $OUT/zoo-target-1b-f16.gguf missing (bash bench/make_pairs.sh small): skipped"
  fi
fi
