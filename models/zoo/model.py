"""Llama-architecture decoder in PyTorch, numerically the model parspec runs.

RMSNorm (x * rsqrt(mean(x^2) + eps) * w), rotary embeddings over ADJACENT pairs
(x[2i], x[2i+1]) with theta_i = pos * base^(-2i/head_dim) -- the convention of
GGUF `llama` files, so Q/K need no permutation at export --, grouped-query
attention with scale 1/sqrt(head_dim), SwiGLU feed-forward down(silu(gate x) *
up x), and an output head tied to the token embedding (GGUF: no output.weight).
"""

import dataclasses
import math

import torch
import torch.nn as nn
import torch.nn.functional as F


@dataclasses.dataclass
class Config:
    n_vocab: int
    n_embd: int
    n_layer: int
    n_head: int
    n_head_kv: int
    n_ff: int
    n_ctx: int = 512
    rms_eps: float = 1e-5
    rope_base: float = 10000.0

    @property
    def head_dim(self):
        return self.n_embd // self.n_head


class RMSNorm(nn.Module):
    def __init__(self, dim, eps):
        super().__init__()
        self.eps = eps
        self.weight = nn.Parameter(torch.ones(dim))

    def forward(self, x):
        return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + self.eps) * self.weight


def rope_tables(head_dim, n_pos, base, device=None):
    """cos/sin of shape (n_pos, head_dim/2): angle pos * base^(-2i/head_dim)."""
    inv_freq = base ** (-torch.arange(0, head_dim, 2, dtype=torch.float64, device=device) / head_dim)
    angles = torch.arange(n_pos, dtype=torch.float64, device=device)[:, None] * inv_freq[None, :]
    return angles.cos().float(), angles.sin().float()


def apply_rope(x, cos, sin):
    """x: (B, H, T, D); rotates the adjacent pairs (x[2i], x[2i+1])."""
    x_pairs = x.unflatten(-1, (-1, 2))
    x0, x1 = x_pairs[..., 0], x_pairs[..., 1]
    out0 = x0 * cos - x1 * sin
    out1 = x0 * sin + x1 * cos
    return torch.stack((out0, out1), dim=-1).flatten(-2)


class Attention(nn.Module):
    def __init__(self, c: Config):
        super().__init__()
        self.c = c
        hd = c.head_dim
        self.wq = nn.Linear(c.n_embd, c.n_head * hd, bias=False)
        self.wk = nn.Linear(c.n_embd, c.n_head_kv * hd, bias=False)
        self.wv = nn.Linear(c.n_embd, c.n_head_kv * hd, bias=False)
        self.wo = nn.Linear(c.n_head * hd, c.n_embd, bias=False)

    def forward(self, x, cos, sin, mask, cache=None):
        B, T, _ = x.shape
        c = self.c
        hd = c.head_dim
        q = self.wq(x).view(B, T, c.n_head, hd).transpose(1, 2)
        k = self.wk(x).view(B, T, c.n_head_kv, hd).transpose(1, 2)
        v = self.wv(x).view(B, T, c.n_head_kv, hd).transpose(1, 2)
        q = apply_rope(q, cos, sin)
        k = apply_rope(k, cos, sin)
        if cache is not None:  # keys/values of earlier positions (incremental decoding)
            if "k" in cache:
                k = torch.cat((cache["k"], k), dim=2)
                v = torch.cat((cache["v"], v), dim=2)
            cache["k"], cache["v"] = k, v
        rep = c.n_head // c.n_head_kv
        if rep > 1:
            k = k.repeat_interleave(rep, dim=1)
            v = v.repeat_interleave(rep, dim=1)
        scores = (q @ k.transpose(-1, -2)) * (1.0 / math.sqrt(hd)) + mask
        out = torch.softmax(scores, dim=-1) @ v
        return self.wo(out.transpose(1, 2).reshape(B, T, c.n_head * hd))


class FeedForward(nn.Module):
    def __init__(self, c: Config):
        super().__init__()
        self.w_gate = nn.Linear(c.n_embd, c.n_ff, bias=False)
        self.w_up = nn.Linear(c.n_embd, c.n_ff, bias=False)
        self.w_down = nn.Linear(c.n_ff, c.n_embd, bias=False)

    def forward(self, x):
        return self.w_down(F.silu(self.w_gate(x)) * self.w_up(x))


class Block(nn.Module):
    def __init__(self, c: Config):
        super().__init__()
        self.attn_norm = RMSNorm(c.n_embd, c.rms_eps)
        self.attn = Attention(c)
        self.ffn_norm = RMSNorm(c.n_embd, c.rms_eps)
        self.ffn = FeedForward(c)

    def forward(self, x, cos, sin, mask, cache=None):
        x = x + self.attn(self.attn_norm(x), cos, sin, mask, cache)
        return x + self.ffn(self.ffn_norm(x))


class Llama(nn.Module):
    def __init__(self, c: Config):
        super().__init__()
        self.c = c
        self.tok_embd = nn.Embedding(c.n_vocab, c.n_embd)
        self.blocks = nn.ModuleList(Block(c) for _ in range(c.n_layer))
        self.out_norm = RMSNorm(c.n_embd, c.rms_eps)
        cos, sin = rope_tables(c.head_dim, c.n_ctx, c.rope_base)
        self.register_buffer("rope_cos", cos, persistent=False)
        self.register_buffer("rope_sin", sin, persistent=False)
        self.reset_parameters()

    def reset_parameters(self):
        std = 0.02
        for name, p in self.named_parameters():
            if p.dim() == 2:
                scale = std
                if name.endswith("wo.weight") or name.endswith("w_down.weight"):
                    scale = std / math.sqrt(2 * self.c.n_layer)
                nn.init.normal_(p, mean=0.0, std=scale)

    def n_params(self):
        return sum(p.numel() for p in self.parameters())

    def forward(self, ids, cache=None, key_pad=None):
        """ids: (B, T) int64 -> logits (B, T, n_vocab).

        cache: None, or a list that new_cache() made; the ids then continue the
        positions already in it (incremental decoding).
        key_pad: optional bool (B, n_pos) marking padding positions no query may
        attend to (left-padded batches; RoPE is relative, so a row's constant
        position shift does not change its result)."""
        T = ids.shape[1]
        pos0 = cache[0].get("n", 0) if cache is not None else 0
        n_pos = pos0 + T
        if n_pos > self.rope_cos.shape[0]:
            cos, sin = rope_tables(self.c.head_dim, n_pos, self.c.rope_base, ids.device)
        else:
            cos, sin = self.rope_cos[:n_pos], self.rope_sin[:n_pos]
        cos, sin = cos[pos0:], sin[pos0:]
        mask = torch.full((T, n_pos), float("-inf"), device=ids.device).triu(pos0 + 1)
        if key_pad is not None:
            # finite, so that all-padding rows stay finite (their outputs are never used)
            mask = mask + torch.where(key_pad, -1e9, 0.0)[:, None, None, :]
        x = self.tok_embd(ids)
        for i, block in enumerate(self.blocks):
            x = block(x, cos, sin, mask, cache[i] if cache is not None else None)
        if cache is not None:
            cache[0]["n"] = n_pos
        return self.out_norm(x) @ self.tok_embd.weight.t()

    def new_cache(self):
        return [{} for _ in self.blocks]


def gguf_tensor_names(n_layer):
    """{GGUF tensor name: state_dict key}, in the order export writes them (tied head: no output.weight)."""
    block = {
        "attn_norm": "attn_norm.weight", "attn_q": "attn.wq.weight", "attn_k": "attn.wk.weight",
        "attn_v": "attn.wv.weight", "attn_output": "attn.wo.weight", "ffn_norm": "ffn_norm.weight",
        "ffn_gate": "ffn.w_gate.weight", "ffn_up": "ffn.w_up.weight", "ffn_down": "ffn.w_down.weight",
    }
    names = {"token_embd.weight": "tok_embd.weight", "output_norm.weight": "out_norm.weight"}
    for i in range(n_layer):
        names.update({f"blk.{i}.{g}.weight": f"blocks.{i}.{t}" for g, t in block.items()})
    return names


def load_checkpoint(path, device="cpu"):
    state = torch.load(path, map_location=device)
    model = Llama(Config(**state["config"])).to(device)
    model.load_state_dict(state["model"])
    return model, state
