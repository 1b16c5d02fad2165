"""Collects the measured numbers of a zoo build into models/zoo/results.json
and renders the tables of the model card from them.

  card.py --work out/zoo --models models --results models/zoo/results.json   # collect
  card.py --results models/zoo/results.json --tables                         # print Markdown tables
  card.py --results models/zoo/results.json --check                          # the zoo's goals, checked

The engine's figures come from `parspec bench` runs that build.sh leaves in
<work>/engine-<drafter>.json (one per drafter, greedy sd at gamma = 4).
"""

import argparse
import json
import os
import sys

MODELS = ("target", "draft", "draft-code", "draft-prose", "draft-math")
DRAFTERS = MODELS[1:]
DOMAINS = ("code", "prose", "config", "math")
SPECIALISTS = {"draft-code": "code", "draft-prose": "prose", "draft-math": "math"}


def describe_phase(p):
    how = f"distilled from {p['teacher'].replace('.pt', '')} (KD weight {p['kd_weight']})" if p["teacher"] else "data only"
    return f"{p['tokens'] / 1e6:.2f} M tokens of {p['mix']}, {how}"


def collect(args):
    import torch  # only needed here

    res = {"models": {}}
    for name in MODELS:
        ck = torch.load(os.path.join(args.work, f"{name}.pt"), map_location="cpu")
        history = ck["history"]
        res["models"][name] = {
            "config": ck["config"],
            "params": sum(v.numel() for v in ck["model"].values()),
            "tokens": sum(p["tokens"] for p in history),
            "steps": sum(p["steps"] for p in history),
            "train_seconds": sum(p["seconds"] for p in history),
            "phases": history,
            "final_train_loss": history[-1]["last_loss"],
            "file_bytes": os.path.getsize(os.path.join(args.models, f"{name}.gguf")),
        }
    for key, fname in (("corpus", "corpus/stats.json"), ("tokens", "tokens/stats.json"), ("eval", "eval.json")):
        with open(os.path.join(args.work, fname)) as f:
            res[key] = json.load(f)
    engine = {}
    for name in DRAFTERS:
        path = os.path.join(args.work, f"engine-{name}.json")
        if not os.path.exists(path):
            continue
        with open(path) as f:
            bench = json.load(f)
        sets = {r["prompt_set"]: {k: r[k] for k in ("tau", "alpha", "n_gen", "runs", "mismatch", "checked_runs")}
                for r in bench["results"] if r["strategy"] != "ar"}
        engine[name] = {"command": bench["config"]["command"], "date": bench["config"]["date"], "sets": sets}
    if engine:
        res["engine"] = engine
    with open(os.path.join(args.work, "timings.txt")) as f:
        res["timings"] = f.read().splitlines()
    with open(args.results, "w") as f:
        json.dump(res, f, indent=1, ensure_ascii=False)
    print(f"wrote {args.results}")


def tables(res):
    out = []
    out.append("| domain | train documents | train MB | train tokens | held-out documents | held-out MB | held-out tokens | bytes/token (held-out) |")
    out.append("|---|---|---|---|---|---|---|---|")
    for d in DOMAINS:
        c_tr, c_ho = res["corpus"][f"{d}.train"], res["corpus"][f"{d}.heldout"]
        t_tr, t_ho = res["tokens"][f"{d}.train"], res["tokens"][f"{d}.heldout"]
        out.append(f"| {d} | {c_tr['documents']} | {c_tr['bytes'] / 1e6:.2f} | {t_tr['tokens']:,} | {c_ho['documents']} | "
                   f"{c_ho['bytes'] / 1e6:.2f} | {t_ho['tokens']:,} | {t_ho['bytes_per_token']:.2f} |")
    out.append("")
    out.append(f"Corpus SHA-256 (over the split JSON lines): `{res['corpus']['sha256']}`")
    out.append("")
    m = res["models"]
    out.append("| file | layers | n_embd | heads (kv) | n_ff | context | parameters | size (F16) | training tokens | steps | training time | final train loss |")
    out.append("|---|---|---|---|---|---|---|---|---|---|---|---|")
    for name in MODELS:
        r, c = m[name], m[name]["config"]
        out.append(f"| `{name}.gguf` | {c['n_layer']} | {c['n_embd']} | {c['n_head']} ({c['n_head_kv']}) | {c['n_ff']} | "
                   f"{c['n_ctx']} | {r['params'] / 1e6:.3f} M | {r['file_bytes'] / 1e6:.2f} MB | "
                   f"{r['tokens'] / 1e6:.2f} M | {r['steps']} | {r['train_seconds']} s | {r['final_train_loss']:.3f} |")
    out.append("")
    out.append("Training phases (in order):")
    out.append("")
    for name in MODELS:
        out.append(f"- `{name}`: " + "; then ".join(describe_phase(p) for p in m[name]["phases"]))
    out.append("")
    loss = res["eval"]["loss"]
    out.append("| model | " + " | ".join(DOMAINS) + " |")
    out.append("|---|" + "---|" * len(DOMAINS))
    best = {d: min(loss[n][d] for n in MODELS) for d in DOMAINS}
    for name in MODELS:
        cells = [f"**{loss[name][d]:.3f}**" if loss[name][d] == best[d] else f"{loss[name][d]:.3f}" for d in DOMAINS]
        out.append(f"| {name} | " + " | ".join(cells) + " |")
    out.append("")
    spec = res["eval"]["spec"]
    out.append("| prompts | " + " | ".join(f"{d} τ / α" for d in DRAFTERS) + " |")
    out.append("|---|" + "---|" * len(DRAFTERS))
    for set_name, row in spec.items():
        cells = tau_alpha_cells([row[d] for d in DRAFTERS])
        n = row[DRAFTERS[0]]
        out.append(f"| {set_name} ({n['prompts']} prompts, {n['n_gen']} tokens) | " + " | ".join(cells) + " |")
    if "engine" in res:
        out.append("")
        out.append(engine_table(res["engine"]))
    return "\n".join(out)


def tau_alpha_cells(runs):
    """'τ / α' of each drafter's run, the best τ in bold."""
    best = max(r["tau"] for r in runs)
    cells = [f"{r['tau']:.2f} / {r['alpha']:.2f}" for r in runs]
    return [f"**{c}**" if r["tau"] == best else c for r, c in zip(runs, cells)]


def engine_table(engine):
    out = ["| prompt set | " + " | ".join(f"`{d}` τ / α" for d in DRAFTERS) + " |", "|---|" + "---|" * len(DRAFTERS)]
    for s in engine["draft"]["sets"]:
        cells = tau_alpha_cells([engine[d]["sets"][s] for d in DRAFTERS])
        out.append(f"| {s} | " + " | ".join(cells) + " |")
    return "\n".join(out)


def check(res):
    """The zoo's goals (issue text), evaluated on the recorded numbers. Returns the failures."""
    failures = []

    def goal(ok, text):
        print(("PASS  " if ok else "FAIL  ") + text)
        if not ok:
            failures.append(text)

    loss = res["eval"]["loss"]
    for d in DOMAINS:
        goal(loss["target"][d] < loss["draft"][d],
             f"target held-out loss below the general drafter's on {d}: {loss['target'][d]:.3f} < {loss['draft'][d]:.3f}")
    engine = res.get("engine")
    if not engine or any(d not in engine for d in DRAFTERS):
        goal(False, "engine measurements of every drafter (engine-<drafter>.json) are present")
        return failures
    tau = {d: {s: r["tau"] for s, r in engine[d]["sets"].items()} for d in DRAFTERS}
    for spec, domain in SPECIALISTS.items():
        others = [d for d in DRAFTERS if d != spec]
        goal(all(tau[spec][domain] > tau[o][domain] for o in others),
             f"{spec} has the highest τ on {domain}: {tau[spec][domain]:.3f} vs "
             + ", ".join(f"{o} {tau[o][domain]:.3f}" for o in others))
        worse = [s for s in tau[spec] if s not in (domain, "all") and tau[spec][s] < tau["draft"][s]]
        goal(bool(worse), f"{spec} is below the general drafter on another set: "
             + (", ".join(f"{s} {tau[spec][s]:.3f} < {tau['draft'][s]:.3f}" for s in worse) or "none"))
    goal(tau["draft"]["code"] >= 2.0, f"general drafter τ on code at γ = 4 is at least 2.0: {tau['draft']['code']:.3f}")
    rows = [r for d in DRAFTERS for r in engine[d]["sets"].values()]
    mismatches, unchecked = sum(r["mismatch"] for r in rows), sum(r["runs"] - r["checked_runs"] for r in rows)
    goal(mismatches == 0 and unchecked == 0,
         f"every engine output checked against ar and identical ({mismatches} mismatches, {unchecked} unchecked)")
    return failures


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--work")
    ap.add_argument("--models")
    ap.add_argument("--results", required=True)
    ap.add_argument("--tables", action="store_true")
    ap.add_argument("--check", action="store_true")
    args = ap.parse_args()
    if args.tables or args.check:
        with open(args.results) as f:
            res = json.load(f)
        if args.tables:
            print(tables(res))
        if args.check:
            return 1 if check(res) else 0
    else:
        collect(args)


if __name__ == "__main__":
    sys.exit(main())
