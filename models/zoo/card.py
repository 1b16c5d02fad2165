"""Collects the measured numbers of a zoo build into models/zoo/results.json
and renders the tables of the model card from them.

  card.py --work out/zoo --models models --results models/zoo/results.json   # collect
  card.py --results models/zoo/results.json --tables                         # print Markdown tables
"""

import argparse
import json
import os
import re
import sys

MODELS = ("target", "draft", "draft-code", "draft-prose", "draft-math")
DOMAINS = ("code", "prose", "config", "math")


def log_runs(path):
    """Per training run in a log: the losses of its last logged steps and its summary line."""
    runs, current = [], None
    with open(path) as f:
        for line in f:
            if line.startswith("model:") or line.startswith("fine-tuning"):
                if current is None or current.get("done"):
                    current = {"losses": []}
                    runs.append(current)
            m = re.match(r"step (\d+)/(\d+) loss ([0-9.]+)", line)
            if m and current is not None:
                current["losses"].append(float(m.group(3)))
            if line.startswith("done:") and current is not None:
                current["done"] = line.strip()
    return runs


def collect(args):
    import torch  # only needed here

    res = {"models": {}}
    for name in MODELS:
        ck = torch.load(os.path.join(args.work, f"{name}.pt"), map_location="cpu")
        cfg = ck["config"]
        n_params = sum(v.numel() for v in ck["model"].values())
        a = ck["args"]
        res["models"][name] = {
            "config": cfg,
            "params": n_params,
            "steps": ck["step"],
            "tokens": ck["step"] * a["batch"] * a["seq"],
            "train_seconds": round(ck["elapsed"]),
            "mix": a["mix"],
            "init": os.path.basename(a["init"]) if a.get("init") else None,
            "lr": a["lr"],
            "batch": a["batch"],
            "seq": a["seq"],
            "file_bytes": os.path.getsize(os.path.join(args.models, f"{name}.gguf")),
        }
    runs = log_runs(os.path.join(args.work, "target.log")) + log_runs(os.path.join(args.work, "drafters.log"))
    for name, run in zip(MODELS, runs):
        tail = run["losses"][-5:]
        res["models"][name]["final_train_loss"] = round(sum(tail) / len(tail), 4)
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
    out.append("| file | layers | n_embd | heads (kv) | n_ff | context | parameters | size | trained on | tokens | steps | training time | final train loss |")
    out.append("|---|---|---|---|---|---|---|---|---|---|---|---|---|")
    for name in MODELS:
        r, c = m[name], m[name]["config"]
        on = r["mix"] if not r["init"] else f"{r['mix']} (from {r['init'].replace('.pt', '')})"
        out.append(f"| `{name}.gguf` | {c['n_layer']} | {c['n_embd']} | {c['n_head']} ({c['n_head_kv']}) | {c['n_ff']} | "
                   f"{c['n_ctx']} | {r['params'] / 1e6:.3f} M | {r['file_bytes'] / 1e6:.2f} MB | {on} | "
                   f"{r['tokens'] / 1e6:.3f} M | {r['steps']} | {r['train_seconds']} s | {r['final_train_loss']:.3f} |")
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
