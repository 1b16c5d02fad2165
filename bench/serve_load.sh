#!/usr/bin/env bash
# Load on `parspec serve` (docs/performance.md, "The server under load"):
#   open      Poisson arrivals at each rate in RATES, N streamed requests each, ar and sd
#             (speculation off vs on under load) on the zoo pair;
#   open-1b   the same on the inflated 1B-class pair (RATES_1B, N_1B, MAX_TOKENS_1B);
#   load      open + open-1b: the issue's "1000 streamed requests at several rates" set;
#   closed    1 client vs 8 clients back to back (batched throughput at 8 concurrent
#             requests vs one) on the zoo pair;  closed-1b  the same on the inflated pair.
# Every run prints the loadgen table (errors, 429s, throughput, TTFT/TPOT, the server's
# RSS start/peak/end sampled over the run) and, from /metrics, how many requests each
# target pass served and the strategy's tau/alpha.
# Usage: bash bench/serve_load.sh [open|open-1b|load|closed|closed-1b|all]
# Env: PARSPEC (build/parspec), THREADS (2), RATES (10,20,40), N (1000), MAX_TOKENS (32),
#      RATES_1B (0.5,1), N_1B (1000), MAX_TOKENS_1B (8), CLOSED_1B_REQUESTS (3 per client),
#      CLOSED_1B_MAX_TOKENS (32), STRATEGIES ("ar sd": the open modes' strategies),
#      PROMPTS_1B (chat,math: open-1b's prompt sets),
#      OUT (out: where the inflated pair is), PORT (18480)
set -euo pipefail
cd "$(dirname "$0")/.."
PARSPEC=${PARSPEC:-build/parspec}
THREADS=${THREADS:-2}
RATES=${RATES:-10,20,40}
N=${N:-1000}
MAX_TOKENS=${MAX_TOKENS:-32}
RATES_1B=${RATES_1B:-0.5,1}
N_1B=${N_1B:-1000}
MAX_TOKENS_1B=${MAX_TOKENS_1B:-8}
CLOSED_1B_REQUESTS=${CLOSED_1B_REQUESTS:-3}     # per client, closed-1b
CLOSED_1B_MAX_TOKENS=${CLOSED_1B_MAX_TOKENS:-32}
STRATEGIES=${STRATEGIES:-ar sd}
PROMPTS_1B=${PROMPTS_1B:-chat,math}
OUT=${OUT:-out}
PORT=${PORT:-18480}
WHICH=${1:-all}
PY=/usr/bin/python3
TARGET_1B=$OUT/zoo-target-1b-f16.gguf
DRAFT_1B=$OUT/zoo-draft-100m-f16.gguf

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
# The server's own counters: requests per target pass (the batch of one target
# forward), tau and alpha per strategy.
server_stats() {
  curl -sf "http://127.0.0.1:$PORT/metrics" | $PY -c '
import re, sys
m = {}
for line in sys.stdin:
    if line.startswith("#") or not line.strip():
        continue
    name, value = line.rsplit(" ", 1)
    m[name] = float(value)
passes = m.get("parspec_batch_target_passes_total", 0)
served = m.get("parspec_batch_target_sequence_forwards_total", 0)
tau = {k: v for k, v in m.items() if k.startswith("parspec_tau")}
alpha = {k: v for k, v in m.items() if k.startswith("parspec_alpha")}
print(f"# server: {int(passes)} target passes, {served / max(passes, 1):.2f} requests per target pass;",
      " ".join(f"{k}={v:.3f}" for k, v in {**tau, **alpha}.items()))'
}
stop() {
  server_stats || true
  kill -TERM "$SERVER_PID"
  wait "$SERVER_PID" || true
}

echo "# $(date -u '+%Y-%m-%d %H:%M UTC'), load average before: $(cut -d' ' -f1-3 /proc/loadavg)"
echo "# CPU: $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | xargs), $(nproc) cores usable"

# open_pair NAME TARGET DRAFT RATES N MAX_TOKENS CTX PROMPTS
open_pair() {
  local name=$1 target=$2 draft=$3 rates=$4 n=$5 max_tokens=$6 ctx=$7 prompts=$8
  for strategy in $STRATEGIES; do
    echo
    echo "## $name, --strategy $strategy, -np 8, -t $THREADS, $n streamed requests per rate," \
      "max_tokens $max_tokens, prompts $prompts"
    serve -m "$target" -md "$draft" --strategy "$strategy" -np 8 -c "$ctx"
    $PY bench/loadgen.py --url "http://127.0.0.1:$PORT" --rates "$rates" --requests "$n" \
      --max-tokens "$max_tokens" --prompts "$prompts" --pid "$SERVER_PID" || true
    stop
    echo "# load average now: $(cut -d' ' -f1-3 /proc/loadavg)"
  done
}

if [[ $WHICH == open || $WHICH == load || $WHICH == all ]]; then
  open_pair "zoo (models/target.gguf + models/draft.gguf)" models/target.gguf models/draft.gguf \
    "$RATES" "$N" "$MAX_TOKENS" 256 code,math,prose,chat
fi
if [[ $WHICH == open-1b || $WHICH == load || $WHICH == all ]]; then
  if [[ -s $TARGET_1B && -s $DRAFT_1B ]]; then
    open_pair "inflated 1B-class pair (f16)" "$TARGET_1B" "$DRAFT_1B" "$RATES_1B" "$N_1B" \
      "$MAX_TOKENS_1B" 256 "$PROMPTS_1B"
  else
    echo "serve_load: $TARGET_1B missing (bash bench/make_pairs.sh small): skipped"
  fi
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
      --pid "$SERVER_PID" --json /tmp/parspec-serve-c1.json || true
    $PY bench/loadgen.py --url "http://127.0.0.1:$PORT" --concurrency 8 \
      --requests $((8 * per_client)) --max-tokens "$max_tokens" --ignore-eos --prompts code,math \
      --pid "$SERVER_PID" --json /tmp/parspec-serve-c8.json | tail -1 || true
    $PY -c 'import json, sys
one, eight = (json.load(open(f))["results"][0]["throughput_tok_s"] for f in sys.argv[1:])
print(f"# 8 clients / 1 client: {eight / one:.2f}x ({eight:.1f} / {one:.1f} tok/s)")' \
      /tmp/parspec-serve-c1.json /tmp/parspec-serve-c8.json || true
    stop
    echo "# load average now: $(cut -d' ' -f1-3 /proc/loadavg)"
  done
}

if [[ $WHICH == closed || $WHICH == all ]]; then
  closed_pair "zoo" models/target.gguf models/draft.gguf 40 64
fi
if [[ $WHICH == closed-1b || $WHICH == all ]]; then
  if [[ -s $TARGET_1B && -s $DRAFT_1B ]]; then
    closed_pair "inflated 1B-class pair (f16)" "$TARGET_1B" "$DRAFT_1B" "$CLOSED_1B_REQUESTS" \
      "$CLOSED_1B_MAX_TOKENS"
  else
    echo "serve_load: $TARGET_1B missing (bash bench/make_pairs.sh small): skipped"
  fi
fi
