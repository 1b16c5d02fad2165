#!/usr/bin/env bash
# One table of speculative decoding on this machine: parspec's ar, auto (the
# tuned choice), sd, tree, dyntree and pearl at their defaults and tuned (the
# best predicted configuration of each family, from `parspec tune`'s line
# "tuned:", which measures or reads the tuning cache auto uses) beside
# llama.cpp's llama-speculative-simple, on the same GGUF files, prompt sets,
# token count and threads. parspec's rows come from one `parspec bench` run
# (strategies interleaved prompt by prompt, greedy outputs checked against ar);
# llama.cpp's from one llama-speculative-simple process per prompt (its
# "decoded N tokens in S seconds" line, summed per set).
#
#   bash bench/speculative_table.sh [-t 2] [-n 64] [-k 2] [PAIR...]
#
# PAIR: zoo (models/target.gguf + models/draft.gguf), 1b (the inflated pair of
# bench/make_pairs.sh: the zoo target and drafter at 1B / 100M class) and
# 1b-deep (the same target with the inflated deep drafter, models/draft-deep.gguf),
# and 1b-q8 / 1b-deep-q8 (the same pairs in Q8_0); TARGET_1B / DRAFT_1B /
# DRAFT_1B_DEEP override the paths (of the F16 or the Q8_0 files); default: zoo 1b. -k: prompts per set (0: all). Env: LLAMA_CPP_DIR (a llama.cpp
# build: its bin/ or a checkout with build/bin; without it the llama.cpp rows
# are left out), LLAMA_DRAFT_MAX (comma list of --draft-max M, or M/P for
# --draft-max M --draft-p-min P; default 16,4,2,16/0,4/0,2/0: llama.cpp's
# default minimum draft probability 0.8 ends a draft early, 0 drafts M always),
# STRATEGIES (parspec's list; the tuned ones are added), NO_TUNED=1 (leave
# the tuned ones out). Prints Markdown (with CPU, load average and the
# commands) and keeps the raw outputs in out/speculative_table/. Run it on a
# quiet machine: every figure is wall time.
set -euo pipefail
cd "$(dirname "$0")/.."
threads=2
n_predict=64
per_set=2
while [[ $# -gt 0 ]]; do
  case "$1" in
    -t) threads="$2"; shift 2 ;;
    -n) n_predict="$2"; shift 2 ;;
    -k) per_set="$2"; shift 2 ;;
    -h | --help) sed -n '2,26p' "$0"; exit 0 ;;
    -*) echo "unknown option $1 (see --help)" >&2; exit 2 ;;
    *) break ;;
  esac
done
pairs=("$@")
[[ ${#pairs[@]} -gt 0 ]] || pairs=(zoo 1b)
parspec=${PARSPEC:-build/parspec}
[[ -x $parspec ]] || { echo "build parspec first: bash scripts/build.sh" >&2; exit 1; }
strategies=${STRATEGIES:-ar,auto,sd,sd:2,tree,dyntree,pearl,pearl:3}
sets=code,math,prose,config,chat
draft_max=${LLAMA_DRAFT_MAX:-16,4,2,16/0,4/0,2/0}
spec=""
if [[ -n ${LLAMA_CPP_DIR:-} ]]; then
  for c in "$LLAMA_CPP_DIR/llama-speculative-simple" "$LLAMA_CPP_DIR/build/bin/llama-speculative-simple" \
    "$LLAMA_CPP_DIR/bin/llama-speculative-simple"; do
    [[ -x $c ]] && { spec=$c; break; }
  done
  [[ -n $spec ]] || { echo "no llama-speculative-simple under $LLAMA_CPP_DIR" >&2; exit 1; }
fi
out=out/speculative_table
mkdir -p "$out"
py=/usr/bin/python3

echo "CPU: $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2- | xargs), $(nproc) cores visible; $threads threads; n = $n_predict; $per_set prompt(s) per set (0: all)"
echo
for pair in "${pairs[@]}"; do
  case "$pair" in
    zoo) target=models/target.gguf draft=models/draft.gguf ;;
    1b | 1b-q8)
      type=f16
      [[ $pair == *-q8 ]] && type=q8_0
      target=${TARGET_1B:-out/zoo-target-1b-$type.gguf} draft=${DRAFT_1B:-out/zoo-draft-100m-$type.gguf}
      ;;
    1b-deep | 1b-deep-q8)
      type=f16
      [[ $pair == *-q8 ]] && type=q8_0
      target=${TARGET_1B:-out/zoo-target-1b-$type.gguf}
      draft=${DRAFT_1B_DEEP:-out/zoo-draft-deep-100m-$type.gguf}
      ;;
    *) echo "unknown pair '$pair' (zoo, 1b, 1b-deep, 1b-q8, 1b-deep-q8)" >&2; exit 2 ;;
  esac
  [[ -f $target && -f $draft ]] || { echo "$pair: $target or $draft missing (bash bench/make_pairs.sh small)" >&2; exit 1; }
  load_before=$(cut -d' ' -f1-3 /proc/loadavg)
  # The tuned configurations: predictions only (--measure 0) from the cache
  # auto reads (measured now if it has no entry for these files and threads).
  tuned=""
  if [[ -z ${NO_TUNED:-} ]]; then
    "$parspec" tune -m "$target" -md "$draft" -t "$threads" --measure 0 >"$out/$pair-tune.txt" \
      2>"$out/$pair-tune.err"
    tuned=$(sed -n 's/^tuned: *//p' "$out/$pair-tune.txt" | tr ' ' ',')
  fi
  run_strategies=$strategies
  for t in ${tuned//,/ }; do
    [[ ",$run_strategies," == *",$t,"* ]] || run_strategies+=",$t"
  done
  cmd=("$parspec" bench -m "$target" -md "$draft" --strategies "$run_strategies" -t "$threads"
    -n "$n_predict" --prompts "$sets" --max-prompts "$per_set" --json "$out/$pair-parspec.json")
  "${cmd[@]}" >"$out/$pair-parspec.txt" 2>"$out/$pair-parspec.err"
  llama_json="$out/$pair-llama.json"
  echo '[]' >"$llama_json"
  if [[ -n $spec ]]; then
    # One process per prompt and --draft-max; the texts are bench/prompts' (raw,
    # without a chat template: llama-speculative-simple applies none).
    $py - "$sets" "$per_set" >"$out/prompts.tsv" <<'EOF'
import json, sys
for s in sys.argv[1].split(","):
    lines = [json.loads(l)["prompt"] for l in open(f"bench/prompts/{s}.jsonl") if l.strip()]
    k = int(sys.argv[2])
    for i, p in enumerate(lines[:k] if k > 0 else lines):
        print(s, json.dumps(p), sep="\t")
EOF
    rows=()
    for dm in ${draft_max//,/ }; do
      while IFS=$'\t' read -r set prompt; do
        text=$($py -c 'import json,sys; print(json.loads(sys.argv[1]), end="")' "$prompt")
        log="$out/$pair-llama-dm${dm/\//-p}.log"
        draft_args=(--draft-max "${dm%%/*}")
        [[ $dm == */* ]] && draft_args+=(--draft-p-min "${dm#*/}")
        "$spec" -m "$target" -md "$draft" -p "$text" -n "$n_predict" -t "$threads" -td "$threads" \
          --temp 0 "${draft_args[@]}" >>"$log" 2>&1 </dev/null || true
        line=$(grep -a 'decoded .* tokens in' "$log" | tail -1)
        rows+=("$dm $set $(echo "$line" | awk '{print $2, $5}')")
        : >"$log"
      done <"$out/prompts.tsv"
    done
    printf '%s\n' "${rows[@]}" | $py -c '
import json, sys
print(json.dumps([dict(zip(("draft_max", "set", "n", "s"), l.split())) for l in sys.stdin if l.strip()]))' >"$llama_json"
  fi
  load_after=$(cut -d' ' -f1-3 /proc/loadavg)
  $py bench/speculative_table.py "$pair" "$out/$pair-parspec.json" "$llama_json" \
    "${cmd[*]}" "$load_before" "$load_after" "$spec" "$threads" "$tuned"
  echo
done
