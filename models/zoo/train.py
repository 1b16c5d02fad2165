"""Tokenizes the corpus and trains / fine-tunes the zoo's models.

  train.py tokenize --corpus DIR --tokenizer tokenizer.json --out DIR
  train.py train --data DIR --shape JSON --tokens N --out ckpt.pt [--init ckpt.pt] [--mix code=1,prose=1]
                 [--teacher ckpt.pt --kd-weight W]

With --teacher the loss is (1 - W) * cross-entropy + W * KL(teacher || model):
the drafters learn the target's distributions, which raises how often their
greedy choice agrees with the target's (speculative acceptance).

Training is resumable: a checkpoint (model, optimizer, step, elapsed time) is
written every --save-every seconds and at the end; rerunning the same command
continues from it, and a finished checkpoint is left alone. The batch of step
s depends only on (seed, s), so an interrupted run sees the same data as an
uninterrupted one.
"""

import argparse
import json
import math
import os
import sys
import time

import numpy as np
import torch
import torch.distributed as dist
import torch.multiprocessing as mp
import torch.nn.functional as F

import bpe
from model import Config, Llama, load_checkpoint

DOMAINS = ("code", "prose", "config", "math")
# Streams a --mix may also draw from: chat conversations (chat_data.py), for the chat model.
MIX_DOMAINS = DOMAINS + ("chat",)


def set_threads():
    n = int(os.environ.get("ZOO_THREADS", "0")) or os.cpu_count() or 1
    torch.set_num_threads(n)
    return n


def cmd_tokenize(args):
    tok = bpe.Tokenizer.load(args.tokenizer)
    os.makedirs(args.out, exist_ok=True)
    stats = {}
    for domain in DOMAINS:
        for split in ("train", "heldout"):
            ids, n_bytes = [], 0
            for doc in bpe.read_jsonl(os.path.join(args.corpus, f"{domain}.{split}.jsonl")):
                ids.append(tok.bos)
                ids.extend(tok.encode(doc["text"]))
                ids.append(tok.eos)
                n_bytes += len(doc["text"].encode())
            arr = np.asarray(ids, dtype=np.uint16)
            np.save(os.path.join(args.out, f"{domain}.{split}.npy"), arr)
            stats[f"{domain}.{split}"] = {"tokens": len(arr), "bytes": n_bytes, "bytes_per_token": n_bytes / len(arr)}
            print(f"{domain}.{split}: {len(arr)} tokens, {n_bytes / len(arr):.2f} bytes/token", flush=True)
    with open(os.path.join(args.out, "stats.json"), "w") as f:
        json.dump(stats, f, indent=1)


def load_split(data_dir, split, domains=DOMAINS):
    return {d: torch.from_numpy(np.load(os.path.join(data_dir, f"{d}.{split}.npy")).astype(np.int64)) for d in domains}


def parse_mix(text):
    mix = {}
    for part in text.split(","):
        name, weight = part.split("=")
        assert name in MIX_DOMAINS, f"unknown domain {name}"
        mix[name] = float(weight)
    return mix


def batch_for_step(data, mix, seed, step, batch, seq):
    """Windows of seq+1 tokens at random offsets, domains drawn by the mix weights."""
    rng = np.random.default_rng([seed, step])
    names = sorted(mix)
    p = np.array([mix[n] for n in names])
    p = p / p.sum()
    rows = []
    for d in rng.choice(len(names), size=batch, p=p):
        stream = data[names[d]]
        start = int(rng.integers(0, len(stream) - seq - 1))
        rows.append(stream[start:start + seq + 1])
    x = torch.stack(rows)
    return x[:, :-1], x[:, 1:]


def lr_at(step, total, peak, warmup, final_frac):
    if step < warmup:
        return peak * (step + 1) / warmup
    progress = min(1.0, (step - warmup) / max(1, total - warmup))
    return peak * (final_frac + (1 - final_frac) * 0.5 * (1 + math.cos(math.pi * progress)))


def save(path, model, opt, step, elapsed, args, done, history, recent_losses):
    tmp = path + ".tmp"
    phase = {"mix": args.mix, "tokens": step * args.batch * args.seq, "steps": step, "seconds": round(elapsed),
             "lr": args.lr, "teacher": os.path.basename(args.teacher) if args.teacher else None,
             "kd_weight": args.kd_weight if args.teacher else 0.0,
             "last_loss": float(np.mean(recent_losses)) if recent_losses else None}
    torch.save({"config": model.c.__dict__, "model": model.state_dict(), "opt": opt.state_dict(), "step": step,
                "elapsed": elapsed, "args": vars(args), "done": done, "history": history + [phase],
                "recent_losses": list(recent_losses)}, tmp)
    os.replace(tmp, path)


def distill_loss(logits, teacher_logits, targets, kd_weight):
    """(1 - w) * cross-entropy on the data + w * KL(teacher || student) per token."""
    v = logits.shape[-1]
    logp = F.log_softmax(logits.reshape(-1, v), dim=-1)
    ce = F.nll_loss(logp, targets.reshape(-1))
    if teacher_logits is None:
        return ce, ce
    logq = F.log_softmax(teacher_logits.reshape(-1, v), dim=-1)
    kl = (logq.exp() * (logq - logp)).sum(-1).mean()
    return (1 - kd_weight) * ce + kd_weight * kl, ce


def all_reduce_mean(tensors, world):
    """Averages tensors over the data-parallel processes (one flat all-reduce)."""
    flat = torch.cat([t.reshape(-1) for t in tensors])
    dist.all_reduce(flat)
    flat /= world
    offset = 0
    for t in tensors:
        t.copy_(flat[offset:offset + t.numel()].view_as(t))
        offset += t.numel()


def resolve_device(name):
    if name == "auto":
        return "cuda" if torch.cuda.is_available() else "cpu"
    if name.startswith("cuda") and not torch.cuda.is_available():
        sys.exit(f"--device {name}: this PyTorch sees no CUDA device")
    return name


def load_gguf(path, device):
    from reference import load_gguf_model
    return load_gguf_model(path)[0].to(device)


def cmd_train(args):
    args.device = resolve_device(args.device)
    if args.device != "cpu" and args.procs > 1:
        print(f"training on {args.device}: one process (--procs {args.procs} is for CPU cores)", flush=True)
        args.procs = 1
    if args.procs > 1:
        port = 29500 + os.getpid() % 2000
        mp.spawn(train_worker, args=(args, port), nprocs=args.procs, join=True)
    else:
        train_worker(0, args, None)


def train_worker(rank, args, port):
    """One data-parallel process: rows rank, rank + procs, ... of every batch."""
    world = args.procs
    if world > 1:
        dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}", rank=rank, world_size=world)
    log = print if rank == 0 else (lambda *a, **k: None)
    threads = set_threads()
    torch.manual_seed(args.seed)
    mix = parse_mix(args.mix)
    data = load_split(args.data, "train", sorted(mix))
    tokens_per_step = args.batch * args.seq
    total_steps = max(1, args.tokens // tokens_per_step)
    state, history = None, []
    if os.path.exists(args.out):
        model, state = load_checkpoint(args.out, args.device)
        if state.get("done"):
            log(f"{args.out}: already trained ({state['step']} steps), skipping")
            return
        history = state["history"][:-1]
        log(f"{args.out}: resuming at step {state['step']} of {total_steps}")
    elif args.init:
        if args.init.endswith(".gguf"):  # an exported model (the chat model starts from target.gguf)
            model, history = load_gguf(args.init, args.device), []
        else:
            model, init_state = load_checkpoint(args.init, args.device)
            history = init_state.get("history", [])
        log(f"fine-tuning {args.init} on {args.mix}")
    else:
        model = Llama(Config(**json.loads(args.shape))).to(args.device)
    teacher = None
    if args.teacher:
        if args.teacher.endswith(".gguf"):  # an exported model (e.g. the committed target.gguf)
            teacher = load_gguf(args.teacher, args.device)
        else:
            teacher, _ = load_checkpoint(args.teacher, args.device)
        teacher.eval()
        assert teacher.c.n_vocab == model.c.n_vocab
        log(f"distilling from {args.teacher} (weight {args.kd_weight})")
    decay = [p for n, p in model.named_parameters() if p.dim() == 2]
    no_decay = [p for n, p in model.named_parameters() if p.dim() < 2]
    opt = torch.optim.AdamW([{"params": decay, "weight_decay": args.weight_decay},
                             {"params": no_decay, "weight_decay": 0.0}], lr=args.lr, betas=(0.9, 0.95))
    step, elapsed, recent = 0, 0.0, []
    if state is not None:
        opt.load_state_dict(state["opt"])
        step, elapsed, recent = state["step"], state["elapsed"], state.get("recent_losses", [])
    log(f"model: {model.n_params() / 1e6:.3f}M parameters, {json.dumps(model.c.__dict__)}; "
        f"{total_steps} steps of {tokens_per_step} tokens; "
        + (f"{world} x {threads} threads" if args.device == "cpu" else f"on {args.device}"), flush=True)
    model.train()
    t_last_save = time.time()
    t_log, tokens_log, loss_log = time.time(), 0, []
    while step < total_steps:
        t0 = time.time()
        lr = lr_at(step, total_steps, args.lr, args.warmup, args.final_lr_frac)
        for g in opt.param_groups:
            g["lr"] = lr
        x, y = batch_for_step(data, mix, args.seed, step, args.batch, args.seq)
        x, y = x[rank::world].to(args.device), y[rank::world].to(args.device)
        teacher_logits = None
        if teacher is not None:
            with torch.no_grad():
                teacher_logits = teacher(x)
        loss, ce = distill_loss(model(x), teacher_logits, y, args.kd_weight)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        ce = ce.detach()
        if world > 1:
            all_reduce_mean([p.grad for p in model.parameters()] + [ce], world)
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        step += 1
        elapsed += time.time() - t0
        tokens_log += tokens_per_step
        loss_log.append(ce.item())
        recent = (recent + [ce.item()])[-20:]
        if step % args.log_every == 0 or step == total_steps:
            now = time.time()
            log(f"step {step}/{total_steps} loss {np.mean(loss_log):.4f} lr {lr:.2e} "
                f"{tokens_log / (now - t_log):.0f} tok/s elapsed {elapsed:.0f}s", flush=True)
            t_log, tokens_log, loss_log = now, 0, []
        if rank == 0 and time.time() - t_last_save > args.save_every and step < total_steps:
            save(args.out, model, opt, step, elapsed, args, False, history, recent)
            t_last_save = time.time()
    if rank == 0:
        save(args.out, model, opt, step, elapsed, args, True, history, recent)
    if world > 1:
        dist.barrier()
        dist.destroy_process_group()
    log(f"done: {step} steps, {step * tokens_per_step} tokens, {elapsed:.0f}s of training "
        f"(last 20 steps: data loss {np.mean(recent):.4f})", flush=True)


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = ap.add_subparsers(dest="cmd", required=True)
    t = sub.add_parser("tokenize")
    t.add_argument("--corpus", required=True)
    t.add_argument("--tokenizer", required=True)
    t.add_argument("--out", required=True)
    r = sub.add_parser("train")
    r.add_argument("--data", required=True)
    r.add_argument("--out", required=True)
    r.add_argument("--shape", help="JSON of model.Config fields (new model)")
    r.add_argument("--init", help="checkpoint to fine-tune")
    r.add_argument("--mix", default="code=1,prose=1,config=1,math=1")
    r.add_argument("--tokens", type=int, required=True)
    r.add_argument("--batch", type=int, default=16)
    r.add_argument("--seq", type=int, default=256)
    r.add_argument("--lr", type=float, default=3e-3)
    r.add_argument("--warmup", type=int, default=50)
    r.add_argument("--final-lr-frac", type=float, default=0.1)
    r.add_argument("--weight-decay", type=float, default=0.1)
    r.add_argument("--seed", type=int, default=1)
    r.add_argument("--procs", type=int, default=1, help="data-parallel processes (each with ZOO_THREADS threads)")
    r.add_argument("--device", default="auto", help="cpu, cuda[:N], or auto: CUDA when PyTorch sees a GPU (default)")
    r.add_argument("--teacher", help="checkpoint or GGUF file whose distributions the model learns (distillation)")
    r.add_argument("--kd-weight", type=float, default=0.7, help="weight of the distillation term")
    r.add_argument("--log-every", type=int, default=10)
    r.add_argument("--save-every", type=float, default=120.0)
    args = ap.parse_args()
    if args.cmd == "tokenize":
        cmd_tokenize(args)
    else:
        assert args.shape or args.init or os.path.exists(args.out), "--shape or --init is required"
        cmd_train(args)


if __name__ == "__main__":
    sys.exit(main())
