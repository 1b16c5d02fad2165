"""Markdown table of bench/speculative_table.sh: parspec bench's JSON and
llama-speculative-simple's per-prompt (tokens, seconds), tok/s per prompt set
and the ratio to parspec's ar. Usage (from the script):
  speculative_table.py PAIR PARSPEC.json LLAMA.json COMMAND LOAD_BEFORE LOAD_AFTER SPEC THREADS [TUNED]
TUNED: comma list of the labels `parspec tune` predicts best per family (marked "tuned").
"""
import json
import sys

pair, parspec_json, llama_json, command, load_before, load_after, spec, threads = sys.argv[1:9]
tuned = [t for t in (sys.argv[9] if len(sys.argv) > 9 else "").split(",") if t]
report = json.load(open(parspec_json))
llama = json.load(open(llama_json))
sets = [s["name"] for s in report["config"]["prompt_sets"]] + ["all"]
chosen = report["config"].get("chosen", {})

rate = {}  # (label, set) -> tok/s
for r in report["results"]:
    rate[(r["strategy"], r["prompt_set"])] = r["tok_per_s"]
labels = list(report["config"]["strategies"])
mismatches = len(report.get("mismatches", []))

by_dm = {}
for row in llama:
    dm, s = row["draft_max"], row["set"]
    try:
        n, secs = int(row["n"]), float(row["s"])
    except (TypeError, ValueError):
        continue
    acc = by_dm.setdefault(dm, {})
    for key in (s, "all"):
        tn, ts = acc.get(key, (0, 0.0))
        acc[key] = (tn + n, ts + secs)

print(f"**{pair}**")
print()
print(f"parspec: `{command}`  ")
if spec:
    print(f"llama.cpp: `{spec} -m T -md D -p PROMPT -n N -t {threads} -td {threads} --temp 0 "
          f"--draft-max M [--draft-p-min P]` per prompt (raw prompt texts)  ")
print(f"load average (1/5/15 min) before {load_before}, after {load_after}; greedy outputs "
      f"differing from ar: {mismatches}")
print()
print("| engine | strategy | " + " | ".join(sets) + " | × ar (all) |")
print("|---|---|" + "---|" * len(sets) + "---|")
ar_all = rate.get(("ar", "all"), 0)
for label in labels:
    name = label
    if label.split(":")[0] == "auto" and label in chosen:
        name = f"{label} (ran {chosen[label]})"
    elif label in tuned:
        name = f"{label} (tuned)"
    cells = [f"{rate.get((label, s), float('nan')):.2f}" for s in sets]
    ratio = rate.get((label, "all"), 0) / ar_all if ar_all else float("nan")
    print(f"| parspec | {name} | " + " | ".join(cells) + f" | {ratio:.2f}x |")
for dm, acc in by_dm.items():
    cells = []
    for s in sets:
        n, secs = acc.get(s, (0, 0.0))
        cells.append(f"{n / secs:.2f}" if secs > 0 else "-")
    n, secs = acc.get("all", (0, 0.0))
    ratio = (n / secs) / ar_all if secs > 0 and ar_all else float("nan")
    m, _, p_min = dm.partition("/")
    args = f"--draft-max {m}" + (f" --draft-p-min {p_min}" if p_min else "")
    print(f"| llama.cpp | speculative-simple {args} | " + " | ".join(cells) +
          f" | {ratio:.2f}x |")
print()
print("tok/s of generation (prompt processing excluded in both engines); × ar: over parspec's ar.")
