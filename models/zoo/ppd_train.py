"""Trains PPD prompt tokens for a frozen GGUF model and writes them as a side file.

  ppd_train.py --model models/target.gguf --tokens DIR --out models/target.ppd.gguf
               [--prompt-tokens 3] [--ensemble 1] [--steps N] [--seed 1]

Parallel prompt decoding ("Hardware-Aware Parallel Prompt Decoding for
Memory-Efficient Acceleration of LLM Inference"): k trained prompt tokens,
each with E ensemble tokens (EPTs), are appended after a token; prompt token i
(0-based) sits at the position i + 1 after that token and predicts the token
i + 2 after it. Virtual token j of prompt token i attends to the past, the
token itself and virtual token j of prompt tokens 0..i (the ensemble mask);
the logits of a prompt token's E virtual tokens are averaged.

Only the k x E embeddings are trained; the base model is frozen. Every step
takes windows of the token streams, cuts each at random points, and
distils the base model's own next-token distributions at distance 1..k after
the cut: loss = sum_i 0.8^i KL(teacher_i || student_i). The embeddings start
as copies of real token embeddings; Adam, learning rate 1e-2 with a cosine
schedule and no warmup, one pass. The batch of step s depends only on
(seed, s), so a run is reproducible on the same PyTorch and CPU.

The side file (GGUF, general.architecture "ppd") holds the tensor
`ppd.prompt_embd` (k*E rows of n_embd, row i*E + j = virtual token j of
prompt token i), the shape (ppd.prompt_tokens, ppd.ensemble_tokens,
ppd.mask = "ensemble", ppd.n_embd), the base model's name and embedding
hash, the training facts, and the accuracies measured on held-out text:
ppd.accuracy.top1/top5 per distance, and ppd.rank_accuracy (k rows of
ppd.rank_count values: how often the base model's greedy token is the
prompt token's r-th most likely token) that the tree construction uses.
"""

import argparse
import hashlib
import json
import os
import sys
import time

import numpy as np
import torch
import torch.nn.functional as F

import gguf_writer as gw
from model import apply_rope, rope_tables
from reference import load_gguf_model
from train import DOMAINS, load_split

RANKS = 10
DISTANCE_DECAY = 0.8


def base_pass(model, ids):
    """Frozen forward of ids (B, T): per-layer rotated keys/values and the logits."""
    c = model.c
    dev = model.tok_embd.weight.device
    ids = torch.as_tensor(ids).to(dev)
    T = ids.shape[1]
    cos, sin = model.rope_cos[:T], model.rope_sin[:T]
    mask = torch.full((T, T), float("-inf"), device=dev).triu(1)
    x = model.tok_embd(ids)
    kv = []
    for block in model.blocks:
        a = block.attn
        h = block.attn_norm(x)
        B = h.shape[0]
        q = apply_rope(a.wq(h).view(B, T, c.n_head, c.head_dim).transpose(1, 2), cos, sin)
        k = apply_rope(a.wk(h).view(B, T, c.n_head_kv, c.head_dim).transpose(1, 2), cos, sin)
        v = a.wv(h).view(B, T, c.n_head_kv, c.head_dim).transpose(1, 2)
        kv.append((k, v))
        rep = c.n_head // c.n_head_kv
        kr, vr = k.repeat_interleave(rep, dim=1), v.repeat_interleave(rep, dim=1)
        att = torch.softmax((q @ kr.transpose(-1, -2)) / c.head_dim ** 0.5 + mask, dim=-1) @ vr
        x = x + a.wo(att.transpose(1, 2).reshape(B, T, c.n_embd))
        x = x + block.ffn(block.ffn_norm(x))
    return kv, model.out_norm(x) @ model.tok_embd.weight.t()


def prompt_pass(model, embd, kv, cuts, k, E):
    """Logits (B, M, k, n_vocab) of the prompt tokens hung after the cut positions cuts (B, M).

    Rows are ordered (cut m, ensemble j, prompt token i); a row sees the base
    keys at positions <= its cut and the rows of the same cut and ensemble
    index with a prompt index <= its own. Logits are averaged over j."""
    c = model.c
    dev = embd.device
    cuts = cuts.to(dev)
    B, M = cuts.shape
    R = M * E * k
    idx_i = torch.arange(k, device=dev).repeat(M * E)                      # prompt index per row
    idx_j = torch.arange(E, device=dev).repeat_interleave(k).repeat(M)     # ensemble index per row
    idx_m = torch.arange(M, device=dev).repeat_interleave(E * k)           # cut per row
    pos = cuts[:, idx_m] + 1 + idx_i[None, :]                   # (B, R)
    T = kv[0][0].shape[2]
    cos_all, sin_all = rope_tables(c.head_dim, T + k + 1, c.rope_base, dev)
    cos, sin = cos_all[pos][:, None], sin_all[pos][:, None]    # (B, 1, R, hd/2)
    base_mask = torch.where(torch.arange(T, device=dev)[None, None, :] <= cuts[:, idx_m][:, :, None], 0.0,
                            float("-inf"))[:, None]             # (B, 1, R, T)
    same = (idx_m[:, None] == idx_m[None, :]) & (idx_j[:, None] == idx_j[None, :])
    self_mask = torch.where(same & (idx_i[None, :] <= idx_i[:, None]), 0.0, float("-inf"))
    x = embd[idx_i * E + idx_j][None].expand(B, R, c.n_embd)
    rep = c.n_head // c.n_head_kv
    for block, (kb, vb) in zip(model.blocks, kv):
        a = block.attn
        h = block.attn_norm(x)
        q = apply_rope(a.wq(h).view(B, R, c.n_head, c.head_dim).transpose(1, 2), cos, sin)
        ks = apply_rope(a.wk(h).view(B, R, c.n_head_kv, c.head_dim).transpose(1, 2), cos, sin)
        vs = a.wv(h).view(B, R, c.n_head_kv, c.head_dim).transpose(1, 2)
        keys = torch.cat((kb, ks), dim=2).repeat_interleave(rep, dim=1)
        vals = torch.cat((vb, vs), dim=2).repeat_interleave(rep, dim=1)
        mask = torch.cat((base_mask, self_mask[None, None].expand(B, 1, R, R)), dim=-1)
        att = torch.softmax((q @ keys.transpose(-1, -2)) / c.head_dim ** 0.5 + mask, dim=-1) @ vals
        x = x + a.wo(att.transpose(1, 2).reshape(B, R, c.n_embd))
        x = x + block.ffn(block.ffn_norm(x))
    logits = model.out_norm(x) @ model.tok_embd.weight.t()
    return logits.view(B, M, E, k, -1).mean(dim=2)


def teacher_logits(base_logits, cuts, k):
    """(B, M, k, V): the base model's logits at cut + 1 + i (they predict the token cut + 2 + i)."""
    dev = base_logits.device
    cuts = cuts.to(dev)
    pos = cuts[:, :, None] + 1 + torch.arange(k, device=dev)[None, None, :]
    B, M = cuts.shape
    return base_logits[torch.arange(B, device=dev)[:, None, None], pos]


def ppd_loss(student, teacher, k):
    logp = F.log_softmax(student, dim=-1)
    logq = F.log_softmax(teacher, dim=-1)
    kl = (logq.exp() * (logq - logp)).sum(-1).mean(dim=(0, 1))  # per distance
    weights = DISTANCE_DECAY ** torch.arange(k, dtype=torch.float32, device=kl.device)
    return (kl * weights).sum(), kl


def batch_for_step(data, names, weights, seed, step, batch, seq, cuts, k):
    """Windows of seq tokens (domains by weight) and `cuts` sorted cut points per window."""
    rng = np.random.default_rng([seed, step])
    rows, cut_rows = [], []
    for d in rng.choice(len(names), size=batch, p=weights):
        stream = data[names[d]]
        start = int(rng.integers(0, len(stream) - seq))
        rows.append(stream[start:start + seq])
        cut_rows.append(np.sort(rng.choice(seq - k - 1, size=cuts, replace=False)))
    return torch.stack(rows), torch.from_numpy(np.stack(cut_rows)).long()


@torch.no_grad()
def evaluate(model, embd, data, k, E, seq, n_windows, cuts, seed):
    """Top-1/top-5 accuracy per distance and the rank table on held-out windows."""
    names = sorted(data)
    hits = torch.zeros(k, RANKS)
    count = 0
    for d_i, name in enumerate(names):
        stream = data[name]
        rng = np.random.default_rng([seed, 1000 + d_i])
        for _ in range(n_windows):
            start = int(rng.integers(0, len(stream) - seq))
            ids = stream[start:start + seq][None]
            cut = torch.from_numpy(np.sort(rng.choice(seq - k - 1, size=cuts, replace=False)))[None].long()
            kv, base_logits = base_pass(model, ids)
            student = prompt_pass(model, embd, kv, cut, k, E)[0]            # (M, k, V)
            greedy = teacher_logits(base_logits, cut, k)[0].argmax(-1)      # (M, k)
            order = student.topk(RANKS, dim=-1).indices                      # (M, k, RANKS)
            hits += (order == greedy[..., None]).float().sum(0).cpu()
            count += cut.shape[1]
    rank_acc = hits / count
    cum = rank_acc.cumsum(-1)
    return {"top1": cum[:, 0].tolist(), "top5": cum[:, 4].tolist(), "rank": rank_acc.tolist(),
            "samples_per_distance": count}


def embedding_hash(model):
    return hashlib.sha256(model.tok_embd.weight.detach().cpu().numpy().astype(np.float32).tobytes()).hexdigest()


def write_side_file(path, embd, args, meta, model, facts):
    k, E = args.prompt_tokens, args.ensemble
    w = gw.GgufWriter()
    w.add_string("general.architecture", "ppd")
    # named after the model it serves, not the output path, so that reruns give the same bytes
    model_name = os.path.basename(args.model)
    w.add_string("general.name", (model_name[:-5] if model_name.endswith(".gguf") else model_name) + ".ppd.gguf")
    w.add_u32("general.alignment", gw.ALIGNMENT)
    w.add_u32("ppd.prompt_tokens", k)
    w.add_u32("ppd.ensemble_tokens", E)
    w.add_string("ppd.mask", "ensemble")
    w.add_u32("ppd.n_embd", model.c.n_embd)
    w.add_string("ppd.base.name", meta.get("general.name", ""))
    w.add_string("ppd.base.token_embd_sha256", embedding_hash(model))
    w.add_u32("ppd.rank_count", RANKS)
    w.add_array("ppd.accuracy.top1", gw.T_F32, facts["eval"]["top1"])
    w.add_array("ppd.accuracy.top5", gw.T_F32, facts["eval"]["top5"])
    w.add_array("ppd.rank_accuracy", gw.T_F32, [a for row in facts["eval"]["rank"] for a in row])
    w.add_string("ppd.training", json.dumps(facts["training"], sort_keys=True))
    w.add_tensor("ppd.prompt_embd", embd.detach().float().cpu().numpy(), gw.F32)
    w.write(path)


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--model", required=True, help="the base GGUF model (frozen)")
    ap.add_argument("--tokens", required=True, help="token streams: <domain>.train.npy / <domain>.heldout.npy")
    ap.add_argument("--out", required=True, help="side file to write (TARGET.ppd.gguf)")
    ap.add_argument("--prompt-tokens", type=int, default=3)
    ap.add_argument("--ensemble", type=int, default=1, help="ensemble tokens (EPTs) per prompt token")
    ap.add_argument("--steps", type=int, default=600)
    ap.add_argument("--batch", type=int, default=8)
    ap.add_argument("--seq", type=int, default=128)
    ap.add_argument("--cuts", type=int, default=24, help="cut points per window")
    ap.add_argument("--lr", type=float, default=1e-2)
    ap.add_argument("--mix", default="code=0.4,prose=0.25,config=0.15,math=0.2")
    ap.add_argument("--eval-windows", type=int, default=24, help="held-out windows per domain")
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--device", default="auto", help="cpu, cuda or auto (CUDA when PyTorch sees a GPU)")
    ap.add_argument("--log-every", type=int, default=25)
    args = ap.parse_args()
    torch.set_num_threads(args.threads)
    torch.manual_seed(args.seed)
    device = "cuda" if args.device == "auto" and torch.cuda.is_available() else \
        ("cpu" if args.device == "auto" else args.device)
    k, E = args.prompt_tokens, args.ensemble
    if k < 1 or E < 1:
        sys.exit("--prompt-tokens and --ensemble must be at least 1")
    model, _, meta = load_gguf_model(args.model)
    for p in model.parameters():
        p.requires_grad_(False)
    if args.seq + k + 1 > model.c.n_ctx:
        sys.exit(f"--seq {args.seq} + prompt tokens exceed the model's context {model.c.n_ctx}")
    mix = dict((name, float(w)) for name, w in (part.split("=") for part in args.mix.split(",")))
    names = sorted(mix)
    weights = np.array([mix[n] for n in names])
    weights = weights / weights.sum()
    train = load_split(args.tokens, "train", names)
    heldout = load_split(args.tokens, "heldout", [d for d in DOMAINS if d in names])

    # initialised from the embeddings of real tokens (drawn with the seed, control tokens excluded)
    rng = np.random.default_rng(args.seed)
    init_ids = rng.choice(model.c.n_vocab - 2, size=k * E, replace=False)
    embd = torch.nn.Parameter(model.tok_embd.weight[torch.from_numpy(init_ids)].clone().to(device))
    opt = torch.optim.Adam([embd], lr=args.lr)
    model.to(device)
    print(f"PPD: {k} prompt tokens x {E} ensemble tokens = {k * E * model.c.n_embd} trainable values "
          f"({100 * k * E * model.c.n_embd / model.n_params():.4f}% of {model.n_params() / 1e6:.3f}M); "
          f"{args.steps} steps of {args.batch} x {args.seq} tokens, {args.cuts} cuts each", flush=True)
    t_start = time.time()
    losses = []
    for step in range(args.steps):
        lr = args.lr * 0.5 * (1 + np.cos(np.pi * step / args.steps))
        for g in opt.param_groups:
            g["lr"] = lr
        ids, cuts = batch_for_step(train, names, weights, args.seed, step, args.batch, args.seq, args.cuts, k)
        with torch.no_grad():
            kv, base_logits = base_pass(model, ids)
            teacher = teacher_logits(base_logits, cuts, k)
        loss, kl = ppd_loss(prompt_pass(model, embd, kv, cuts, k, E), teacher, k)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
        losses.append(loss.item())
        if (step + 1) % args.log_every == 0 or step + 1 == args.steps:
            print(f"step {step + 1}/{args.steps} loss {np.mean(losses[-args.log_every:]):.4f} "
                  f"KL per distance {[round(x, 3) for x in kl.tolist()]} lr {lr:.2e} "
                  f"{time.time() - t_start:.0f}s", flush=True)
    train_seconds = time.time() - t_start
    ev = evaluate(model, embd.detach(), heldout, k, E, args.seq, args.eval_windows, args.cuts, args.seed)
    print("held-out accuracy per distance: top1 " + json.dumps([round(a, 4) for a in ev["top1"]])
          + " top5 " + json.dumps([round(a, 4) for a in ev["top5"]]), flush=True)
    facts = {"training": {"steps": args.steps, "batch": args.batch, "seq": args.seq, "cuts": args.cuts,
                          "lr": args.lr, "schedule": "cosine, no warmup", "loss": "sum_i 0.8^i KL",
                          "seed": args.seed, "mix": args.mix,
                          "final_loss": round(float(np.mean(losses[-50:])), 4), "torch": torch.__version__,
                          "device": device, "eval_samples_per_distance": ev["samples_per_distance"]},
             "eval": ev}
    write_side_file(args.out, embd, args, meta, model, facts)
    print(f"wrote {args.out} ({train_seconds:.0f}s of training)")


if __name__ == "__main__":
    sys.exit(main())
