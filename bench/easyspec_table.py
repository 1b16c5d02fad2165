"""Markdown tables of bench/easyspec.sh's runs: per layer-group size N, drafting and
verification time per step, alpha, tau, tokens/s and speedups (chain: against ar and sd
of the same run; tree: against ar of the same run and the N = 1 tree), then the cosine
similarity of exact and fuzzy drafting. Usage: easyspec_table.py OUT PAIR N..."""

import json
import os
import sys


def overall(path, strategy):
    with open(path) as f:
        report = json.load(f)
    sets = {r["prompt_set"] for r in report["results"]}
    # bench adds an "all" row only when there are several prompt sets
    which = "all" if "all" in sets else next(iter(sets))
    rows = {r["strategy"]: r for r in report["results"] if r["prompt_set"] == which}
    return rows[strategy], rows, report


def main():
    out, pair, sizes = sys.argv[1], sys.argv[2], [int(n) for n in sys.argv[3:]]
    cores = os.cpu_count() or 1
    print("| mode | N | groups | draft ms/step | verify ms/step | α | τ | tok/s | vs ar | vs sd / tree N=1 | exact |")
    print("|---|---|---|---|---|---|---|---|---|---|---|")
    tree_base = None
    for mode in ("chain", "tree"):
        for n in sizes:
            path = f"{out}/{pair}-{mode}-{n}.json"
            if not os.path.exists(path):
                continue
            es, rows, report = overall(path, "easyspec")
            draft_layers = report["config"]["draft"]["n_layer"]
            groups = group_label(draft_layers, n)
            if mode == "chain":
                sd = rows["sd"]
                versus = f"{es['tok_per_s'] / sd['tok_per_s']:.2f}x (sd {sd['tok_per_s']:.0f} tok/s, α {sd['alpha']:.3f})"
            else:
                if n == 1:
                    tree_base = es["tok_per_s"]
                versus = f"{es['tok_per_s'] / tree_base:.2f}x" if tree_base else "-"
            note = " (oversubscribed)" if n > cores else ""
            exact = "yes" if not es["mismatch"] else f"NO ({es['mismatch']})"
            print(f"| {mode} | {n}{note} | {groups} | {es['t_draft_ms']:.3f} | {es['t_verify_ms']:.3f} | "
                  f"{es['alpha']:.3f} | {es['tau']:.2f} | {es['tok_per_s']:.1f} | {es['speedup']:.2f}x | {versus} | {exact} |")
    sim_path = f"{out}/{pair}-similarity.json"
    if os.path.exists(sim_path):
        with open(sim_path) as f:
            sim = json.load(f)
        print()
        print(f"Cosine similarity, exact vs fuzzy ({sim['sequences']} sequences, layers after the first of their group):")
        print()
        print("| LP size | groups | h | q | k | v | attention output | samples |")
        print("|---|---|---|---|---|---|---|---|")
        for c in sim["configs"]:
            m = c["mean"]
            print(f"| {c['lp_size']} | {c['groups']} | {m['h']:.3f} | {m['q']:.3f} | {m['k']:.3f} | {m['v']:.3f} | "
                  f"{m['attn_output']:.3f} | {m['samples']} |")


def group_label(n_layer, lp_size):
    # As groups_from_lp_size: first and last layer alone.
    groups = ["0"]
    layer = 1
    while layer < n_layer - 1:
        last = min(layer + lp_size, n_layer - 1) - 1
        groups.append(str(layer) if last == layer else f"{layer}-{last}")
        layer = last + 1
    if n_layer > 1:
        groups.append(str(n_layer - 1))
    return "/".join(groups)


if __name__ == "__main__":
    main()
