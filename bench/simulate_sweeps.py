#!/usr/bin/env python3
"""The simulator's scale results (docs/simulate.md): pp, stpp and pipedec over pipeline
depth, link latency, link bandwidth and PipeDec's tree shape, and CoSine's drafter-node pool,
on a simulated GPU cluster, with the zoo pair's real tokens.

Usage: /usr/bin/python3 bench/simulate_sweeps.py [--quick]
Env:   PARSPEC (build/parspec), N (tokens per prompt, 64)
Out:   out/sim-sweeps/{results.json,tables.md}, docs/simulate/*.svg
"""
import json
import os
import subprocess
import sys

root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
os.chdir(root)
parspec = os.environ.get("PARSPEC", "build/parspec")
quick = "--quick" in sys.argv
n = os.environ.get("N", "32" if quick else "64")
out = "out/sim-sweeps"
charts = "docs/simulate"
os.makedirs(out, exist_ok=True)
os.makedirs(charts, exist_ok=True)


def first_prompt(name):
    with open(f"bench/prompts/{name}.jsonl") as f:
        return json.loads(f.readline())["prompt"]


prompt_sets = ["code", "prose"] if quick else ["code", "prose", "math"]
prompts = [first_prompt(p) for p in prompt_sets]
mixed = [first_prompt(p) for p in ("code", "math", "prose", "chat")]
# PipeDec's cluster: Llama-3.1-70B in FP16 on RTX 3090s (936 GB/s, 71 TFLOPS FP16 tensor
# math), the Llama-3.2-1B drafter on an L40 (864 GB/s, 181 TFLOPS), 10 Gb/s Ethernet.
gpu70b = ["--shape", "llama-3.1-70b", "--cost-profile", "roofline:936:71",
          "--draft-shape", "llama-3.2-1b", "--draft-cost-profile", "roofline:864:181"]
common = ["-m", "models/target.gguf", "-md", "models/draft.gguf", "-n", n, "--temp", "0", "-t",
          "1", "--ignore-eos", "--json"]


def simulate(ranks, strategy, extra, prompt_list=None, models=None):
    total_ms, total_tokens = 0.0, 0
    for prompt in prompt_list or prompts:
        cmd = [parspec, "simulate", "--ranks", str(ranks), "--strategy", strategy, "-p", prompt,
               *(models or []), *common, *extra]
        p = subprocess.run(cmd, capture_output=True, text=True)
        if p.returncode != 0:
            sys.exit(f"failed: {' '.join(cmd)}\n{p.stderr[-1500:]}")
        j = json.loads(p.stdout)
        total_ms += j["t_gen_ms"]
        total_tokens += j["n_gen"]
    return total_ms / total_tokens


def shape(strategy, depth=None, width=32, branch=2):
    if strategy == "stpp":
        return ["--tree-depth", "3", "--tree-branch", "2"]
    if strategy == "pipedec":
        return ["--tree-depth", str(depth), "--tree-width", str(width), "--tree-branch",
                str(branch)]
    return []


def link(latency_us=25, gbps=10):
    return ["--link-latency-us", str(latency_us), "--link-gbps", str(gbps)]


results = {}

# Pipeline depth.
stage_counts = [2, 4, 8, 14] if quick else [2, 4, 8, 14, 21, 32]
rows = []
for stages in stage_counts:
    row = {"stages": stages}
    for s in ("pp", "stpp", "pipedec"):
        row[s] = simulate(stages + 1, s, [*gpu70b, *link(), *shape(s, depth=max(4, stages))])
    rows.append(row)
    print(json.dumps(row), flush=True)
results["stages"] = rows

# Link latency and bandwidth at 14 stages.
rows = []
for latency in [1, 10, 100, 1000]:
    row = {"latency_us": latency}
    for s in ("pp", "stpp", "pipedec"):
        row[s] = simulate(15, s, [*gpu70b, *link(latency), *shape(s, depth=14)])
    rows.append(row)
    print(json.dumps(row), flush=True)
results["latency"] = rows
rows = []
for gbps in [10, 100, 0]:
    row = {"gbps": gbps}
    for s in ("pp", "stpp", "pipedec"):
        row[s] = simulate(15, s, [*gpu70b, *link(25, gbps), *shape(s, depth=14)])
    rows.append(row)
    print(json.dumps(row), flush=True)
results["bandwidth"] = rows

# PipeDec's tree: width and depth at 14 stages.
rows = []
for depth in ([7, 14] if quick else [4, 7, 14, 28]):
    row = {"depth": depth}
    for width in [2, 4, 8, 16, 32]:
        row[str(width)] = simulate(15, "pipedec", [*gpu70b, *link(), *shape("pipedec", depth,
                                                                            width)])
    rows.append(row)
    print(json.dumps(row), flush=True)
results["tree"] = rows

# CoSine's drafter nodes: an 8B-class target on one L40-class node, 1B-class drafters on
# RTX 3090-class nodes of their own, mixed prompts (code, math, prose, chat).
pool = ["models/draft.gguf", "models/draft-code.gguf", "models/draft-math.gguf",
        "models/draft-prose.gguf", "models/draft-chat.gguf", "models/draft-deep.gguf"]
cosine_cost = ["--shape", "llama-3.1-8b", "--cost-profile", "roofline:864:181",
               "--draft-shape", "llama-3.2-1b", "--draft-cost-profile", "roofline:936:71"]
rows = []
base = simulate(2, "ar", [*cosine_cost, *link()], mixed)
sd = simulate(2, "sd", [*cosine_cost, *link(), "--draft-max", "4"], mixed)
for k in range(1, len(pool) + 1):
    drafters = ["--drafters", ",".join(pool[:k])]
    row = {"drafters": k, "ar": base, "sd": sd}
    for label, strategy, extra in (("cosine", "cosine", ["--route", "2"]),
                                   ("cosine, no routing", "cosine", ["--route", "0"]),
                                   ("specinfer", "specinfer", [])):
        row[label] = simulate(2, strategy, [*cosine_cost, *link(), *drafters, "--draft-max", "4",
                                            *extra], mixed)
    rows.append(row)
    print(json.dumps(row), flush=True)
results["cosine"] = rows

with open(f"{out}/results.json", "w") as f:
    json.dump({"n": int(n), "prompts": prompt_sets, "results": results}, f, indent=1)


def svg_chart(path, title, xlabel, ylabel, xs, series, log_x=False):
    """A small line chart: series is {label: [y per x]}."""
    import math
    w, h, left, right, top, bottom = 560, 320, 60, 150, 30, 45
    fx = (lambda v: math.log10(v)) if log_x else (lambda v: v)
    x0, x1 = fx(min(xs)), fx(max(xs))
    ymax = max(v for ys in series.values() for v in ys) * 1.08
    px = lambda v: left + (fx(v) - x0) / ((x1 - x0) or 1) * (w - left - right)
    py = lambda v: h - bottom - v / ymax * (h - top - bottom)
    colors = ["#1f77b4", "#d62728", "#2ca02c", "#9467bd", "#ff7f0e", "#8c564b"]
    parts = [f'<svg xmlns="http://www.w3.org/2000/svg" width="{w}" height="{h}" '
             f'font-family="sans-serif" font-size="11">',
             f'<rect width="{w}" height="{h}" fill="white"/>',
             f'<text x="{w / 2 - 60}" y="18" font-size="13">{title}</text>',
             f'<line x1="{left}" y1="{h - bottom}" x2="{w - right}" y2="{h - bottom}" stroke="black"/>',
             f'<line x1="{left}" y1="{top}" x2="{left}" y2="{h - bottom}" stroke="black"/>',
             f'<text x="{(left + w - right) / 2 - 30}" y="{h - 8}">{xlabel}</text>',
             f'<text x="12" y="{top + 40}" transform="rotate(-90 12 {top + 40})">{ylabel}</text>']
    for x in xs:
        parts.append(f'<text x="{px(x) - 6}" y="{h - bottom + 15}">{x:g}</text>')
    for i in range(6):
        v = ymax * i / 5
        parts.append(f'<text x="{left - 40}" y="{py(v) + 4}">{v:.3g}</text>')
        parts.append(f'<line x1="{left}" y1="{py(v)}" x2="{w - right}" y2="{py(v)}" '
                     f'stroke="#ddd"/>')
    for k, (label, ys) in enumerate(series.items()):
        c = colors[k % len(colors)]
        pts = " ".join(f"{px(x):.1f},{py(y):.1f}" for x, y in zip(xs, ys))
        parts.append(f'<polyline points="{pts}" fill="none" stroke="{c}" stroke-width="2"/>')
        for x, y in zip(xs, ys):
            parts.append(f'<circle cx="{px(x):.1f}" cy="{py(y):.1f}" r="3" fill="{c}"/>')
        parts.append(f'<text x="{w - right + 10}" y="{top + 15 + 16 * k}" fill="{c}">{label}</text>')
    parts.append("</svg>")
    open(path, "w").write("\n".join(parts) + "\n")


tables = []
st = results["stages"]
svg_chart(f"{charts}/stages.svg", "70B-class target, 1B drafter: speedup over pp", "stages",
          "x pp", [r["stages"] for r in st],
          {"pipedec": [r["pp"] / r["pipedec"] for r in st],
           "stpp": [r["pp"] / r["stpp"] for r in st]})
tables.append("| stages | pp ms/token | stpp | pipedec | pipedec over pp | over stpp |\n"
              "|---|---|---|---|---|---|\n" + "\n".join(
                  f"| {r['stages']} | {r['pp']:.1f} | {r['stpp']:.1f} | {r['pipedec']:.1f} | "
                  f"{r['pp'] / r['pipedec']:.2f}x | {r['stpp'] / r['pipedec']:.2f}x |" for r in st))
lt = results["latency"]
svg_chart(f"{charts}/latency.svg", "14 stages: ms per token over link latency", "latency (us)",
          "ms/token", [r["latency_us"] for r in lt],
          {s: [r[s] for r in lt] for s in ("pp", "stpp", "pipedec")}, log_x=True)
tables.append("| link latency | pp ms/token | stpp | pipedec | pipedec over pp |\n"
              "|---|---|---|---|---|\n" + "\n".join(
                  f"| {r['latency_us']} us | {r['pp']:.1f} | {r['stpp']:.1f} | "
                  f"{r['pipedec']:.1f} | {r['pp'] / r['pipedec']:.2f}x |" for r in lt))
bw = results["bandwidth"]
tables.append("| link bandwidth | pp ms/token | stpp | pipedec | pipedec over pp | over stpp |\n"
              "|---|---|---|---|---|---|\n" + "\n".join(
                  f"| {'unlimited' if r['gbps'] == 0 else str(r['gbps']) + ' Gb/s'} | "
                  f"{r['pp']:.1f} | {r['stpp']:.1f} | {r['pipedec']:.1f} | "
                  f"{r['pp'] / r['pipedec']:.2f}x | {r['stpp'] / r['pipedec']:.2f}x |" for r in bw))
tr = results["tree"]
widths = ["2", "4", "8", "16", "32"]
svg_chart(f"{charts}/tree.svg", "PipeDec on 14 stages: ms per token over tree width",
          "tree width", "ms/token", [int(x) for x in widths],
          {f"depth {r['depth']}": [r[x] for x in widths] for r in tr}, log_x=True)
tables.append("| pipedec depth | " + " | ".join(f"width {x}" for x in widths) + " |\n|---|" +
              "---|" * len(widths) + "\n" + "\n".join(
                  f"| {r['depth']} | " + " | ".join(f"{r[x]:.1f}" for x in widths) + " |"
                  for r in tr))
co = results["cosine"]
labels = ["cosine", "cosine, no routing", "specinfer"]
svg_chart(f"{charts}/cosine.svg", "CoSine: speedup over ar by drafter nodes", "drafter nodes",
          "x ar", [r["drafters"] for r in co],
          {**{l: [r["ar"] / r[l] for r in co] for l in labels},
           "sd (1 drafter)": [r["ar"] / r["sd"] for r in co]})
tables.append("| drafter nodes | " + " | ".join(labels) + " | sd (1 drafter) | ar |\n|---|" +
              "---|" * (len(labels) + 2) + "\n" + "\n".join(
                  f"| {r['drafters']} | " + " | ".join(f"{r[l]:.2f}" for l in labels) +
                  f" | {r['sd']:.2f} | {r['ar']:.2f} |" for r in co))
open(f"{out}/tables.md", "w").write("\n\n".join(tables) + "\n")
print("\n\n".join(tables))
