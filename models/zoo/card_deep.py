"""Markdown tables for the deep drafter's section of models/README.md, from the files
build_deep.sh writes: <work>/eval-deep.json (held-out loss and the Python-side greedy
estimate at gamma 4, beside the general drafter), <work>/engine-draft-deep.json (the
engine's sd:4 run) and the training logs.

  card_deep.py --work out/zoo
"""

import argparse
import json
import os
import re


def last_line(path, pattern):
    found = None
    with open(path) as f:
        for line in f:
            if re.search(pattern, line):
                found = line.strip()
    return found


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--work", default="out/zoo")
    args = ap.parse_args()
    for log in ("draft-deep-base.log", "draft-deep.log"):
        path = os.path.join(args.work, log)
        if os.path.exists(path):
            print(f"- `{log}`: {last_line(path, '^done:')}")
    print()
    with open(os.path.join(args.work, "eval-deep.json")) as f:
        ev = json.load(f)
    domains = list(next(iter(ev["loss"].values())).keys())
    print("| model | " + " | ".join(domains) + " |")
    print("|---|" + "---|" * len(domains))
    for name, losses in ev["loss"].items():
        print(f"| {name} | " + " | ".join(f"{losses[d]:.3f}" for d in domains) + " |")
    print()
    print("| prompts | draft τ / α | draft-deep τ / α |")
    print("|---|---|---|")
    for set_name, per in ev["spec"].items():
        cells = [f"{per[m]['tau']:.2f} / {per[m]['alpha']:.2f}" for m in ("draft", "draft-deep")]
        print(f"| {set_name} ({per['draft']['prompts']} prompts, {per['draft']['n_gen']} tokens) | " + " | ".join(cells) + " |")
    engine = os.path.join(args.work, "engine-draft-deep.json")
    if os.path.exists(engine):
        with open(engine) as f:
            en = json.load(f)
        print()
        print("| prompt set | draft-deep τ / α (engine, sd:4) | identical to ar |")
        print("|---|---|---|")
        for r in en["results"]:
            if r["strategy"] == "ar":
                continue
            print(f"| {r['prompt_set']} | {r['tau']:.2f} / {r['alpha']:.2f} | {'yes' if not r['mismatch'] else 'NO'} |")


if __name__ == "__main__":
    main()
