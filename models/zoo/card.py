"""Collects the measured numbers of a zoo build into models/zoo/results.json
and renders the tables of the model card from them.

  card.py --work out/zoo --models models --results models/zoo/results.json   # collect
  card.py --results models/zoo/results.json --tables                         # print Markdown tables
"""

import argparse
import json
import os
import sys

MODELS = ("target", "draft", "draft-code", "draft-prose", "draft-math")
DOMAINS = ("code", "prose", "config", "math")


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
    with open(os.path.join(args.work, "timings.txt")) as f:
        res["timings"] = f.read().splitlines()
    with open(args.results, "w") as f:
        json.dump(res, f, indent=1, ensure_ascii=False)
    print(f"wrote {args.results}")


def tables(res):
    out = []
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
    for name in MODELS:
        best = {d: min(loss[n][d] for n in MODELS) for d in DOMAINS}
        cells = [f"**{loss[name][d]:.3f}**" if loss[name][d] == best[d] else f"{loss[name][d]:.3f}" for d in DOMAINS]
        out.append(f"| {name} | " + " | ".join(cells) + " |")
    out.append("")
    spec = res["eval"]["spec"]
    drafters = MODELS[1:]
    out.append("| prompts | " + " | ".join(f"{d} τ / α" for d in drafters) + " |")
    out.append("|---|" + "---|" * len(drafters))
    for set_name, row in spec.items():
        best = max(row[d]["tau"] for d in drafters)
        cells = []
        for d in drafters:
            cell = f"{row[d]['tau']:.2f} / {row[d]['alpha']:.2f}"
            cells.append(f"**{cell}**" if row[d]["tau"] == best else cell)
        n = row[drafters[0]]
        out.append(f"| {set_name} ({n['prompts']} prompts, {n['n_gen']} tokens) | " + " | ".join(cells) + " |")
    return "\n".join(out)


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--work")
    ap.add_argument("--models")
    ap.add_argument("--results", required=True)
    ap.add_argument("--tables", action="store_true")
    args = ap.parse_args()
    if args.tables:
        with open(args.results) as f:
            print(tables(json.load(f)))
    else:
        collect(args)


if __name__ == "__main__":
    sys.exit(main())
