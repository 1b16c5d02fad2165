#!/usr/bin/env bash
# The distributed table of docs/performance.md: time between tokens of PipeDec
# and its baselines on 2 MPI ranks (rank 0: head and drafter, rank 1: the whole
# target; one core each, bound by mpirun) with an EMULATED link of 0, 10 and
# 100 us latency, beside single-process ar, sd and auto on 2 threads, on the
# inflated 1B-class pair (bench/make_pairs.sh small).
#
# Usage: bash bench/distributed.sh      Results: out/distributed/{*.json,table.md}
# Env:   N (tokens per prompt, 32), MAX_PROMPTS (per set, 1), PROMPTS (code,math,prose,config,chat),
#        TARGET, DRAFT (default: the inflated 1B/100M pair), PARSPEC (build/parspec),
#        HEAD_LAYERS (0: rank 1 holds the whole target; N: the head runs the first N layers
#        beside the drafter, so the pipeline has two target stages), TREE (the tree flags)
set -euo pipefail
cd "$(dirname "$0")/.."
bin=${PARSPEC:-build/parspec}
target=${TARGET:-out/zoo-target-1b-f16.gguf}
draft=${DRAFT:-out/zoo-draft-100m-f16.gguf}
[[ -f $target && -f $draft ]] || bash bench/make_pairs.sh small
n=${N:-32}
out=out/distributed
mkdir -p "$out"
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
common=(-m "$target" -md "$draft" -n "$n" --prompts "${PROMPTS:-code,math,prose,config,chat}"
  --max-prompts "${MAX_PROMPTS:-1}" --warmup 4)
read -r -a tree <<< "${TREE:---tree-depth 3 --tree-branch 2 --tree-width 2}"
head_layers=${HEAD_LAYERS:-0}
echo "load before: $(cat /proc/loadavg)" | tee "$out/load.txt"
for latency in 0 10 100; do
  # bench always runs ar too: under mpirun that is pp again (a cross-check).
  mpirun -np 2 --bind-to core "$bin" bench "${common[@]}" "${tree[@]}" -t 1 \
    --strategies pp,stpp,pipedec,pearl:3 --link-latency-us "$latency" --head-layers "$head_layers" \
    --json "$out/ranks2-latency$latency.json"
done
"$bin" bench "${common[@]}" -t 2 --strategies ar,sd,auto --json "$out/single.json"
echo "load after: $(cat /proc/loadavg)" | tee -a "$out/load.txt"

/usr/bin/python3 - "$out" << 'PY' | tee "$out/table.md"
import json, sys, collections
out = sys.argv[1]
def per_token_ms(path):
    report = json.load(open(path))
    gen, ms = collections.defaultdict(int), collections.defaultdict(float)
    for r in report["results"]:
        gen[r["strategy"]] += r["n_gen"]
        ms[r["strategy"]] += r["t_gen_ms"]
    return {s: ms[s] / gen[s] for s in gen if gen[s]}, report["config"]
rows = collections.OrderedDict()
for latency in (0, 10, 100):
    times, config = per_token_ms(f"{out}/ranks2-latency{latency}.json")
    assert config.get("link_emulated", False) == (latency > 0), config.get("distributed")
    for s in ("pp", "stpp", "pipedec", "pearl:3", "ar"):
        if s in times:
            name = "ar (= pp, run by bench)" if s == "ar" else s
            rows.setdefault((name, "2 ranks, 1 core each"), {})[latency] = times[s]
single, _ = per_token_ms(f"{out}/single.json")
for s in ("ar", "sd", "auto"):
    if s in single:
        rows[(s, "1 process, 2 threads")] = {l: single[s] for l in (0, 10, 100)}
print("| strategy | where | 0 us | 10 us | 100 us (emulated link latency) |")
print("|---|---|---|---|---|")
for (name, where), t in rows.items():
    cells = " | ".join(f"{t[l]:.1f}" if l in t else "-" for l in (0, 10, 100))
    print(f"| {name} | {where} | {cells} |")
print("\nms between tokens (generation time / generated tokens, all prompts); single-process rows")
print("have no link and show the same measurement in every column.")
PY
