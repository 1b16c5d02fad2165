#!/usr/bin/env bash
# Mixed-domain acceptance (docs/performance.md, "CoSine"): τ per prompt set for every
# single drafter alone (`sd`), the unrouted multi-drafter tree (`specinfer`) and `cosine`
# (routing + fusion) on the same target, all through `parspec bench` (greedy, outputs
# checked against `ar`). Prints one markdown table; the JSON of each run stays in $OUT.
#
# Usage: bash bench/cosine_domains.sh
# Env:   PARSPEC (build/parspec), TARGET (models/target.gguf), DRAFTERS (the four zoo
#        drafters), N (tokens per prompt, 64), K (--draft-max, 4), ROUTE (cosine --route, 2),
#        THREADS (-t, 1), OUT (out/cosine-domains)
set -euo pipefail
cd "$(dirname "$0")/.."
PARSPEC=${PARSPEC:-build/parspec}
TARGET=${TARGET:-models/target.gguf}
DRAFTERS=${DRAFTERS:-models/draft.gguf,models/draft-code.gguf,models/draft-prose.gguf,models/draft-math.gguf}
N=${N:-64}
K=${K:-4}
ROUTE=${ROUTE:-2}
THREADS=${THREADS:-1}
OUT=${OUT:-out/cosine-domains}
[[ -x "$PARSPEC" ]] || { echo "cosine_domains: $PARSPEC not found; build first" >&2; exit 1; }
mkdir -p "$OUT"
common=(-m "$TARGET" -n "$N" -t "$THREADS" --draft-max "$K" --prompts code,prose,math,config,chat)

for d in ${DRAFTERS//,/ }; do
  name=$(basename "$d" .gguf)
  "$PARSPEC" bench "${common[@]}" --strategies ar,sd -md "$d" --json "$OUT/sd-$name.json" >/dev/null
done
"$PARSPEC" bench "${common[@]}" --strategies ar,specinfer,cosine --drafters "$DRAFTERS" \
  --route "$ROUTE" --json "$OUT/pool.json" >/dev/null

/usr/bin/python3 - "$OUT" "$DRAFTERS" <<'PY'
import json, os, sys
out, drafters = sys.argv[1], [os.path.basename(d)[:-5] for d in sys.argv[2].split(",")]
columns, tau, ok = [], {}, True
def take(path, strategy, label):
    global ok
    d = json.load(open(path))
    ok = ok and not d.get("mismatches")
    columns.append(label)
    for r in d["results"]:
        if r["strategy"] == strategy:
            tau[(label, r["prompt_set"])] = r["tau"]
for name in drafters:
    take(os.path.join(out, f"sd-{name}.json"), "sd", f"sd {name}")
take(os.path.join(out, "pool.json"), "specinfer", "specinfer (all)")
take(os.path.join(out, "pool.json"), "cosine", "cosine")
sets = ["code", "prose", "math", "config", "chat", "all"]
print("| prompt set | " + " | ".join(columns) + " |")
print("|---|" + "---:|" * len(columns))
for s in sets:
    cells = [tau.get((c, s)) for c in columns]
    best = max(v for v in cells if v is not None)
    print(f"| {s} | " + " | ".join(("**%.2f**" if v == best else "%.2f") % v if v is not None else "–"
                                   for v in cells) + " |")
print("\ngreedy outputs identical to ar in every run:", "yes" if ok else "NO")
PY
