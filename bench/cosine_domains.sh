#!/usr/bin/env bash
# Mixed-domain acceptance (docs/performance.md, "CoSine"): τ per prompt set for every
# single drafter alone (`sd`), the unrouted multi-drafter tree (`specinfer`) and `cosine`
# (routing + fusion; all drafters and ROUTE of them per step, then TOP2_ROUTES with the
# drafters' runner-up tokens as leaves, --fusion-top 2), all through `parspec bench` (greedy, outputs
# checked against `ar`); then both pool strategies again at one equal budget of verified
# nodes per step (--tree-budget: the nodes of highest estimated acceptance; the budget is
# specinfer's own mean tree size, rounded down). Prints markdown
# tables (τ per set; tree size, draft forwards and acceptance per depth over all sets);
# the JSON of each run stays in $OUT.
#
# Usage: bash bench/cosine_domains.sh
# Env:   PARSPEC (build/parspec), TARGET (models/target.gguf), DRAFTERS (the four zoo
#        drafters), N (tokens per prompt, 64), K (--draft-max, 4), ROUTE (cosine --route, 2),
#        TOP2_ROUTES (the --route values run with --fusion-top 2, 0,2,3), TABLE_ONLY (set: only
#        print the tables from the JSON already in $OUT),
#        BUDGET (--tree-budget of the equal-budget runs; default: specinfer's nodes per step),
#        THREADS (-t, 1), OUT (out/cosine-domains)
set -euo pipefail
cd "$(dirname "$0")/.."
PARSPEC=${PARSPEC:-build/parspec}
TARGET=${TARGET:-models/target.gguf}
DRAFTERS=${DRAFTERS:-models/draft.gguf,models/draft-code.gguf,models/draft-prose.gguf,models/draft-math.gguf}
N=${N:-64}
K=${K:-4}
ROUTE=${ROUTE:-2}
TOP2_ROUTES=${TOP2_ROUTES:-0,2,3}
THREADS=${THREADS:-1}
OUT=${OUT:-out/cosine-domains}
[[ -x "$PARSPEC" ]] || { echo "cosine_domains: $PARSPEC not found; build first" >&2; exit 1; }
mkdir -p "$OUT"
common=(-m "$TARGET" -n "$N" -t "$THREADS" --draft-max "$K" --prompts code,prose,math,config,chat)
pool=(--drafters "$DRAFTERS")
every_node=(--tree-budget 0)  # the trees as drafted (the default sizes them by this machine's L(n))

if [[ -z "${TABLE_ONLY:-}" ]]; then
  for d in ${DRAFTERS//,/ }; do
    name=$(basename "$d" .gguf)
    "$PARSPEC" bench "${common[@]}" --strategies ar,sd -md "$d" --json "$OUT/sd-$name.json" >/dev/null
  done
  "$PARSPEC" bench "${common[@]}" "${pool[@]}" "${every_node[@]}" --strategies ar,specinfer,cosine \
    --route 0 --json "$OUT/pool-all.json" >/dev/null
  "$PARSPEC" bench "${common[@]}" "${pool[@]}" "${every_node[@]}" --strategies ar,cosine \
    --route "$ROUTE" --json "$OUT/cosine-route.json" >/dev/null
  for r in ${TOP2_ROUTES//,/ }; do
    "$PARSPEC" bench "${common[@]}" "${pool[@]}" "${every_node[@]}" --strategies ar,cosine \
      --route "$r" --fusion-top 2 --json "$OUT/cosine-route$r-top2.json" >/dev/null
  done
fi
if [[ -z "${BUDGET:-}" ]]; then
  BUDGET=$(/usr/bin/python3 -c '
import json, sys
for r in json.load(open(sys.argv[1]))["results"]:
    if r["strategy"] == "specinfer" and r["prompt_set"] == "all":
        print(int(r["drafted"] / r["verify_steps"]))' "$OUT/pool-all.json")
fi
[[ -n "${TABLE_ONLY:-}" ]] ||
  "$PARSPEC" bench "${common[@]}" "${pool[@]}" --strategies ar,specinfer,cosine --route 0 \
    --fusion-top 2 --tree-budget "$BUDGET" --json "$OUT/pool-budget.json" >/dev/null

/usr/bin/python3 - "$OUT" "$DRAFTERS" "$ROUTE" "$BUDGET" "$TOP2_ROUTES" <<'PY'
import json, os, sys
out, drafters = sys.argv[1], [os.path.basename(d)[:-5] for d in sys.argv[2].split(",")]
route, budget, top2_routes = sys.argv[3], sys.argv[4], sys.argv[5].split(",")
columns, rows, ok = [], {}, True
def take(path, strategy, label):
    global ok
    d = json.load(open(path))
    ok = ok and not d.get("mismatches")
    columns.append(label)
    for r in d["results"]:
        if r["strategy"] == strategy:
            rows[(label, r["prompt_set"])] = r
for name in drafters:
    take(os.path.join(out, f"sd-{name}.json"), "sd", f"sd {name}")
take(os.path.join(out, "pool-all.json"), "specinfer", "specinfer (all)")
take(os.path.join(out, "pool-all.json"), "cosine", "cosine --route 0")
take(os.path.join(out, "cosine-route.json"), "cosine", f"cosine --route {route}")
for r in top2_routes:
    take(os.path.join(out, f"cosine-route{r}-top2.json"), "cosine", f"cosine --route {r} --fusion-top 2")
take(os.path.join(out, "pool-budget.json"), "specinfer", f"specinfer --tree-budget {budget}")
take(os.path.join(out, "pool-budget.json"), "cosine", f"cosine --route 0 --fusion-top 2 --tree-budget {budget}")
sets = ["code", "prose", "math", "config", "chat", "all"]
print("| prompt set | " + " | ".join(columns) + " |")
print("|---|" + "---:|" * len(columns))
for s in sets:
    cells = [rows[(c, s)]["tau"] if (c, s) in rows else None for c in columns]
    best = max(v for v in cells if v is not None)
    print(f"| τ {s} | " + " | ".join(("**%.2f**" if v == best else "%.2f") % v if v is not None else "–"
                                     for v in cells) + " |")
def stat(f):
    print(f"| {f.__doc__} | " + " | ".join(f(rows[(c, 'all')]) for c in columns) + " |")
def nodes(r):
    "nodes verified per step (all)"
    return "%.2f" % (r["drafted"] / r["verify_steps"])
def forwards(r):
    "draft forwards per step (all)"
    return "%.1f" % (r["draft_forwards"] / r["verify_steps"])
def per_node(r):
    "τ per verified node (all)"
    return "%.3f" % (r["tau"] / (r["drafted"] / r["verify_steps"]))
def depth(r):
    "acceptance at depth 1/2/3/4 (sd: of all steps; trees: of steps reaching it)"
    return "/".join("%.2f" % a for a in r.get("per_position_acceptance", [])[:4])
for f in (nodes, per_node, forwards, depth):
    stat(f)
print("\ngreedy outputs identical to ar in every run:", "yes" if ok else "NO")
PY
