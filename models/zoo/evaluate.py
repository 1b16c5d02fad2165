"""Measures the zoo from its GGUF files (the weights the engine loads).

1. Held-out loss per domain for every model: mean next-token cross-entropy
   (nats) over consecutive windows of each domain's held-out token stream.
2. A Python-side estimate of greedy chain speculative decoding: the target
   continues each prompt greedily; each drafter, fed the same tokens, predicts
   every continuation token (its argmax given the exact prefix). With greedy
   verification a step of gamma drafts accepts the longest run of agreeing
   predictions and emits it plus one target token, so tau (tokens per target
   step) and alpha (accepted / drafted) follow exactly -- up to floating-point
   differences between this PyTorch forward and the engine's.
   Prompts: the first tokens of 24 held-out documents of each domain, and all
   prompts of the benchmark sets (bench/prompts/<domain>.jsonl) where they exist.
"""

import argparse
import json
import os
import sys
import time

import numpy as np
import torch
import torch.nn.functional as F

from reference import greedy_batch, load_gguf_model
from train import DOMAINS, load_split, set_threads

N_PROMPTS = 24
PROMPT_TOKENS = 32
N_GEN = 128


@torch.no_grad()
def heldout_loss(model, stream, seq, max_tokens):
    n_win = max(1, min(len(stream) - 1, max_tokens) // seq)
    total, count = 0.0, 0
    for i in range(0, n_win, 8):
        x = torch.stack([stream[j * seq:(j + 1) * seq + 1] for j in range(i, min(n_win, i + 8))])
        logits = model(x[:, :-1])
        total += F.cross_entropy(logits.reshape(-1, logits.shape[-1]), x[:, 1:].reshape(-1), reduction="sum").item()
        count += x[:, 1:].numel()
    return total / count


def heldout_prompts(stream, bos, n, n_tokens):
    """BOS + the first n_tokens of n held-out documents (spread over the stream)."""
    starts = np.flatnonzero(stream.numpy() == bos)
    ends = list(starts[1:]) + [len(stream)]
    docs = [(s, e) for s, e in zip(starts, ends) if e - s > n_tokens + 8]
    pick = np.linspace(0, len(docs) - 1, min(n, len(docs))).round().astype(int)
    return [stream[docs[i][0]:docs[i][0] + 1 + n_tokens].tolist() for i in pick]


def bench_prompts(prompts_dir):
    """{domain: prompt texts} of the benchmark sets (<prompts_dir>/<domain>.jsonl) that exist."""
    sets = {}
    for d in ("code", "prose", "math"):
        path = os.path.join(prompts_dir, f"{d}.jsonl")
        if os.path.exists(path):
            with open(path) as f:
                sets[d] = [json.loads(line)["prompt"] for line in f if line.strip()]
    return sets


@torch.no_grad()
def simulate(draft, prompt, gen, gamma):
    """Greedy chain SD of `gen` (the target's continuation) with this drafter."""
    ids = torch.tensor([prompt + gen])
    pred = draft(ids)[0, len(prompt) - 1:-1].argmax(-1).tolist()
    match = [p == g for p, g in zip(pred, gen)]
    i = steps = drafted = accepted = 0
    while i < len(gen):
        k = 0
        while k < gamma and i + k < len(gen) and match[i + k]:
            k += 1
        drafted += min(gamma, len(gen) - i)
        accepted += k
        i += k + 1
        steps += 1
    return {"steps": steps, "drafted": drafted, "accepted": accepted, "n_gen": len(gen), "agree": sum(match)}


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--models", nargs="+", required=True, help="name=path.gguf ...; the first is the target")
    ap.add_argument("--tokens", required=True, help="directory with <domain>.heldout.npy")
    ap.add_argument("--prompts-dir", default="", help="bench/prompts, when present")
    ap.add_argument("--loss-tokens", type=int, default=12288)
    ap.add_argument("--gamma", type=int, default=4)
    ap.add_argument("--out", required=True)
    args = ap.parse_args()
    set_threads()
    torch.set_flush_denormal(True)
    t0 = time.time()
    models = {}
    for spec in args.models:
        name, path = spec.split("=", 1)
        models[name], tok, _ = load_gguf_model(path)
    target_name = next(iter(models))
    target = models[target_name]
    streams = load_split(args.tokens, "heldout")

    result = {"loss": {}, "spec": {}, "gamma": args.gamma, "n_gen": N_GEN}
    for name, model in models.items():
        seq = min(256, model.c.n_ctx)
        result["loss"][name] = {d: heldout_loss(model, streams[d], seq, args.loss_tokens) for d in DOMAINS}
        print(name, "held-out loss", json.dumps({d: round(v, 4) for d, v in result["loss"][name].items()}), flush=True)

    prompt_sets = {f"heldout-{d}": heldout_prompts(streams[d], tok.bos, N_PROMPTS, PROMPT_TOKENS) for d in DOMAINS}
    if args.prompts_dir:
        for d, texts in bench_prompts(args.prompts_dir).items():
            prompt_sets[f"bench-{d}"] = [tok.encode(t, add_bos=True) for t in texts]
    for set_name, prompts in prompt_sets.items():
        gens = greedy_batch(target, prompts, N_GEN, stop=tok.eos)
        result["spec"][set_name] = {}
        for name, draft in models.items():
            if name == target_name:
                continue
            runs = [simulate(draft, p, g, args.gamma) for p, g in zip(prompts, gens)]
            tot = {k: sum(r[k] for r in runs) for k in runs[0]}
            result["spec"][set_name][name] = {
                "tau": tot["n_gen"] / tot["steps"],
                "alpha": tot["accepted"] / tot["drafted"],
                "agree": tot["agree"] / tot["n_gen"],
                "n_gen": tot["n_gen"],
                "prompts": len(prompts),
            }
        print(set_name, json.dumps({k: round(v["tau"], 3) for k, v in result["spec"][set_name].items()}), flush=True)
        result["sample_" + set_name] = tok.decode(prompts[0] + gens[0])
    result["seconds"] = time.time() - t0
    with open(args.out, "w") as f:
        json.dump(result, f, indent=1, ensure_ascii=False)
    print(f"evaluation took {result['seconds']:.0f}s -> {args.out}")


if __name__ == "__main__":
    sys.exit(main())
