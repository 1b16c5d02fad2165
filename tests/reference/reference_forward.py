#!/usr/bin/python3
"""Independent float64 NumPy reference forward pass for llama, qwen2, qwen3, gemma2, gemma3 and
phi3 GGUF models.

Shares no code with the C++ engine: its own GGUF v3 parser and dequantizers,
and the forward pass written from the architecture's definition. See README.md.

  reference_forward.py MODEL.gguf --tokens 1,2,3 --out logits.bin
      float32 logits, n_tokens x n_vocab, row-major, little-endian
  reference_forward.py MODEL.gguf --dequant blk.0.attn_q.weight --out w.bin
      the tensor's values as little-endian float32, in file order
  reference_forward.py --selftest
"""

import argparse
import io
import struct
import sys

import numpy as np

GGUF_MAGIC = 0x46554747  # b"GGUF" as a little-endian u32

# Metadata value type ids -> struct format of the scalar types.
SCALAR_FORMATS = {0: "<B", 1: "<b", 2: "<H", 3: "<h", 4: "<I", 5: "<i", 6: "<f", 7: "<?",
                  10: "<Q", 11: "<q", 12: "<d"}
NUMPY_SCALARS = {0: "<u1", 1: "<i1", 2: "<u2", 3: "<i2", 4: "<u4", 5: "<i4", 6: "<f4",
                 10: "<u8", 11: "<i8", 12: "<f8"}
TYPE_STRING, TYPE_ARRAY = 8, 9

# Tensor type id -> (name, elements per block, bytes per block).
TENSOR_TYPES = {
    0: ("F32", 1, 4),
    1: ("F16", 1, 2),
    2: ("Q4_0", 32, 18),
    8: ("Q8_0", 32, 34),
    12: ("Q4_K", 256, 144),
    14: ("Q6_K", 256, 210),
    30: ("BF16", 1, 2),
}


# --------------------------------------------------------------------------- GGUF parsing

class GgufError(Exception):
    pass


class _Cursor:
    def __init__(self, data):
        self.data = data
        self.pos = 0

    def take(self, n):
        if n < 0 or self.pos + n > len(self.data):
            raise GgufError(f"truncated file: need {n} bytes at offset {self.pos}")
        chunk = self.data[self.pos:self.pos + n]
        self.pos += n
        return chunk

    def unpack(self, fmt):
        return struct.unpack(fmt, self.take(struct.calcsize(fmt)))[0]

    def string(self):
        return bytes(self.take(self.unpack("<Q"))).decode("utf-8")

    def value(self, vtype):
        if vtype == TYPE_STRING:
            return self.string()
        if vtype == TYPE_ARRAY:
            elem_type = self.unpack("<I")
            count = self.unpack("<Q")
            if elem_type in NUMPY_SCALARS:
                size = np.dtype(NUMPY_SCALARS[elem_type]).itemsize
                return np.frombuffer(self.take(count * size), dtype=NUMPY_SCALARS[elem_type]).tolist()
            return [self.value(elem_type) for _ in range(count)]
        if vtype in SCALAR_FORMATS:
            return self.unpack(SCALAR_FORMATS[vtype])
        raise GgufError(f"unknown metadata value type {vtype}")


class TensorInfo:
    def __init__(self, name, dims, type_id, offset):
        if type_id not in TENSOR_TYPES:
            raise GgufError(f"tensor {name}: unsupported type id {type_id}")
        self.name, self.dims, self.type_id, self.offset = name, dims, type_id, offset
        self.n_elements = int(np.prod(dims)) if dims else 1
        _, block_elems, block_bytes = TENSOR_TYPES[type_id]
        if dims[0] % block_elems:
            raise GgufError(f"tensor {name}: row of {dims[0]} is not a multiple of {block_elems}")
        self.n_bytes = self.n_elements // block_elems * block_bytes
        # numpy shape: the contiguous dimension (dims[0]) last.
        self.shape = tuple(reversed(dims))


class GgufFile:
    """Metadata dict, tensor infos and raw tensor bytes of a GGUF v3 file."""

    def __init__(self, data):
        cur = _Cursor(memoryview(data))
        if cur.unpack("<I") != GGUF_MAGIC:
            raise GgufError("bad magic (not a GGUF file)")
        self.version = cur.unpack("<I")
        if self.version != 3:
            raise GgufError(f"unsupported GGUF version {self.version}")
        n_tensors = cur.unpack("<Q")
        n_kv = cur.unpack("<Q")
        self.metadata = {}
        for _ in range(n_kv):
            key = cur.string()
            self.metadata[key] = cur.value(cur.unpack("<I"))
        self.tensors = {}
        for _ in range(n_tensors):
            name = cur.string()
            n_dims = cur.unpack("<I")
            dims = [cur.unpack("<Q") for _ in range(n_dims)]
            type_id = cur.unpack("<I")
            offset = cur.unpack("<Q")
            self.tensors[name] = TensorInfo(name, dims, type_id, offset)
        alignment = self.metadata.get("general.alignment", 32)
        self.data_start = (cur.pos + alignment - 1) // alignment * alignment
        self.raw = data
        for info in self.tensors.values():
            end = self.data_start + info.offset + info.n_bytes
            if info.offset % alignment or end > len(data):
                raise GgufError(f"tensor {info.name}: misaligned or out of the file")

    @staticmethod
    def open(path):
        return GgufFile(np.memmap(path, dtype=np.uint8, mode="r"))

    def tensor_bytes(self, name, first_row=0, n_rows=None):
        """Raw bytes of rows [first_row, first_row + n_rows) of a tensor seen as
        rows of dims[0] values."""
        info = self.tensors[name]
        _, block_elems, block_bytes = TENSOR_TYPES[info.type_id]
        row_size = info.dims[0] // block_elems * block_bytes
        total_rows = info.n_elements // info.dims[0]
        n_rows = total_rows - first_row if n_rows is None else n_rows
        start = self.data_start + info.offset + first_row * row_size
        return np.asarray(self.raw[start:start + n_rows * row_size], dtype=np.uint8)

    def tensor(self, name):
        """Dequantized float64 array of the tensor's numpy shape."""
        info = self.tensors[name]
        return dequantize(info.type_id, self.tensor_bytes(name)).reshape(info.shape)

    def rows(self, name, ids):
        """Dequantized float64 rows (along the last dims) of a 2-D tensor."""
        info = self.tensors[name]
        return np.stack([dequantize(info.type_id, self.tensor_bytes(name, int(i), 1))
                         for i in ids]).reshape(len(ids), info.dims[0])


# --------------------------------------------------------------------------- dequantization

def _f16(raw_u8_pairs):
    return np.ascontiguousarray(raw_u8_pairs).view("<f2").astype(np.float64)


def dequantize(type_id, raw):
    """Flat float64 values of raw tensor bytes (uint8 array) of a tensor type."""
    raw = np.ascontiguousarray(raw, dtype=np.uint8)
    name, block_elems, block_bytes = TENSOR_TYPES[type_id]
    if raw.size % block_bytes:
        raise GgufError(f"{name}: {raw.size} bytes is not a whole number of blocks")
    if name == "F32":
        return raw.view("<f4").astype(np.float64)
    if name == "F16":
        return raw.view("<f2").astype(np.float64)
    if name == "BF16":
        return (raw.view("<u2").astype(np.uint32) << 16).view("<f4").astype(np.float64)
    blocks = raw.reshape(-1, block_bytes)
    if name == "Q8_0":
        d = _f16(blocks[:, 0:2])
        qs = blocks[:, 2:34].view(np.int8).astype(np.float64)
        return (d * qs).reshape(-1)
    if name == "Q4_0":
        d = _f16(blocks[:, 0:2])
        qs = blocks[:, 2:18].astype(np.int32)
        q = np.concatenate([(qs & 15) - 8, (qs >> 4) - 8], axis=1)  # value j, then j + 16
        return (d * q).reshape(-1)
    if name == "Q4_K":
        return _dequantize_q4_k(blocks)
    if name == "Q6_K":
        return _dequantize_q6_k(blocks)
    raise GgufError(f"no dequantizer for {name}")


def _q4_k_scales_mins(s):
    """8 (scale, min) 6-bit pairs from the 12 packed bytes, for every block: (nb, 8) each."""
    s = s.astype(np.int32)
    sc = np.empty((s.shape[0], 8), dtype=np.int32)
    mn = np.empty_like(sc)
    sc[:, :4] = s[:, 0:4] & 63
    mn[:, :4] = s[:, 4:8] & 63
    sc[:, 4:] = (s[:, 8:12] & 15) | ((s[:, 0:4] >> 6) << 4)
    mn[:, 4:] = (s[:, 8:12] >> 4) | ((s[:, 4:8] >> 6) << 4)
    return sc, mn


def _dequantize_q4_k(blocks):
    nb = blocks.shape[0]
    d = _f16(blocks[:, 0:2])
    dmin = _f16(blocks[:, 2:4])
    sc, mn = _q4_k_scales_mins(blocks[:, 4:16])
    qs = blocks[:, 16:144].astype(np.int32).reshape(nb, 4, 32)
    # Each 32-byte group holds two sub-blocks: low nibbles first, then high nibbles.
    q = np.stack([qs & 15, qs >> 4], axis=2).reshape(nb, 8, 32)
    y = d[:, :, None] * sc[:, :, None] * q - dmin[:, :, None] * mn[:, :, None]
    return y.reshape(-1)


def _dequantize_q6_k(blocks):
    nb = blocks.shape[0]
    ql = blocks[:, 0:128].astype(np.int32)
    qh = blocks[:, 128:192].astype(np.int32)
    scales = blocks[:, 192:208].view(np.int8).astype(np.float64)
    d = _f16(blocks[:, 208:210])
    halves = []
    for n in range(2):
        lo = ql[:, 64 * n:64 * n + 64]
        hi = qh[:, 32 * n:32 * n + 32]
        quarters = [
            (lo[:, :32] & 15) | (((hi >> 0) & 3) << 4),
            (lo[:, 32:] & 15) | (((hi >> 2) & 3) << 4),
            (lo[:, :32] >> 4) | (((hi >> 4) & 3) << 4),
            (lo[:, 32:] >> 4) | (((hi >> 6) & 3) << 4),
        ]
        q = np.stack(quarters, axis=1).reshape(nb, 4, 2, 16) - 32
        # Quarter g, value l uses scale 8n + l//16 + 2g.
        sc = scales[:, 8 * n:8 * n + 8].reshape(nb, 4, 2)
        halves.append((sc[:, :, :, None] * q).reshape(nb, 128))
    return (d * np.concatenate(halves, axis=1)).reshape(-1)


# --------------------------------------------------------------------------- model

class Config:
    def __init__(self, meta, tensor_dims):
        arch = meta["general.architecture"]
        if arch not in ("llama", "qwen2", "qwen3", "gemma2", "gemma3", "phi3"):
            raise GgufError(f"unsupported architecture {arch}")
        self.arch = arch

        def key(name, default=None):
            full = f"{arch}.{name}"
            if full not in meta and default is None:
                raise GgufError(f"missing metadata key {full}")
            return meta.get(full, default)

        self.n_embd = int(key("embedding_length"))
        self.n_layer = int(key("block_count"))
        self.n_head = int(key("attention.head_count"))
        self.n_head_kv = int(key("attention.head_count_kv", self.n_head))
        self.n_ff = int(key("feed_forward_length"))
        self.eps = float(key("attention.layer_norm_rms_epsilon"))
        self.rope_base = float(key("rope.freq_base", 10000.0))
        self.head_dim = int(key("attention.key_length", self.n_embd // self.n_head))
        self.rope_dims = int(key("rope.dimension_count", self.head_dim))
        self.neox = arch != "llama"
        gemma = arch in ("gemma2", "gemma3")
        # Gemma: inputs scaled by sqrt(width), GELU (tanh form), norms after each block too.
        self.embed_scale = np.sqrt(self.n_embd) if gemma else 1.0
        self.gelu = gemma
        self.post_norms = gemma
        self.qk_norm = arch in ("qwen3", "gemma3")
        if gemma:  # Google's query_pre_attn_scalar: width / heads for the 27B shapes
            big = self.n_layer == (46 if arch == "gemma2" else 62)
            self.query_scale = 1.0 / np.sqrt(self.n_embd // self.n_head if big else self.head_dim)
        else:
            self.query_scale = 1.0 / np.sqrt(self.head_dim)
        self.attn_cap = float(key("attn_logit_softcapping", 50.0)) if arch == "gemma2" else 0.0
        self.final_cap = float(key("final_logit_softcapping", 30.0 if arch == "gemma2" else 0.0)) \
            if gemma else 0.0
        default_window = {"gemma2": 4096, "phi3": 0, "llama": 0}.get(arch, 0)
        self.window = int(key("attention.sliding_window", default_window)) \
            if arch in ("llama", "gemma2", "gemma3", "phi3") else 0
        # Which layers slide: gemma2 the even ones, gemma3 five of six, the others all.
        if arch == "gemma2":
            self.sliding = [l % 2 == 0 for l in range(self.n_layer)]
        elif arch == "gemma3":
            self.sliding = [(l + 1) % 6 != 0 for l in range(self.n_layer)]
        else:
            self.sliding = [True] * self.n_layer
        # Gemma 3's sliding layers rotate with base 10000 and no scaling.
        self.local_rope_base = 10000.0 if arch == "gemma3" else None
        self.rope_original_context = int(key("rope.scaling.original_context_length", 0))
        self.rope_attn_factor = float(key("rope.scaling.attn_factor", 1.0))
        scaling = key("rope.scaling.type", "none")
        if scaling == "linear":
            self.position_scale = 1.0 / float(key("rope.scaling.factor"))
        elif scaling == "none":
            self.position_scale = 1.0
        else:
            raise GgufError(f"unsupported rope scaling {scaling}")
        self.n_vocab = tensor_dims["token_embd.weight"][1]
        if self.n_head % self.n_head_kv:
            raise GgufError("head_count is not a multiple of head_count_kv")


def rms_norm(x, w, eps):
    return x / np.sqrt(np.mean(x * x, axis=-1, keepdims=True) + eps) * w


def rope(x, positions, base, rope_dims, neox, freq_divisors=None, position_scale=1.0):
    """Rotates the first rope_dims values of each head. x: (T, n_heads, head_dim)."""
    x = np.array(x, dtype=np.float64)
    half = rope_dims // 2
    inv_freq = base ** (-2.0 * np.arange(half) / rope_dims)
    if freq_divisors is not None:
        inv_freq = inv_freq / freq_divisors
    theta = (np.asarray(positions, dtype=np.float64) * position_scale)[:, None] * inv_freq
    cos, sin = np.cos(theta)[:, None, :], np.sin(theta)[:, None, :]
    if neox:
        a, b = x[..., 0:half].copy(), x[..., half:rope_dims].copy()
        x[..., 0:half] = a * cos - b * sin
        x[..., half:rope_dims] = a * sin + b * cos
    else:
        a, b = x[..., 0:rope_dims:2].copy(), x[..., 1:rope_dims:2].copy()
        x[..., 0:rope_dims:2] = a * cos - b * sin
        x[..., 1:rope_dims:2] = a * sin + b * cos
    return x


def causal_attention(q, k, v, n_head_kv, scale=None, window=0, cap=0.0):
    """q: (T, n_head, hd); k, v: (T, n_head_kv, hd). Returns (T, n_head * hd).
    window > 0: position i sees j with i - window < j <= i; cap > 0: scores soft-capped."""
    n_tokens, n_head, head_dim = q.shape
    group = n_head // n_head_kv
    kv_of_head = np.arange(n_head) // group
    k_h = k[:, kv_of_head, :].transpose(1, 0, 2)  # (n_head, T, hd)
    v_h = v[:, kv_of_head, :].transpose(1, 0, 2)
    if scale is None:
        scale = 1.0 / np.sqrt(head_dim)
    scores = q.transpose(1, 0, 2) @ k_h.transpose(0, 2, 1) * scale
    if cap > 0:
        scores = cap * np.tanh(scores / cap)
    future = np.triu(np.ones((n_tokens, n_tokens), dtype=bool), k=1)
    if window > 0:
        future |= np.tril(np.ones((n_tokens, n_tokens), dtype=bool), k=-window)
    scores = np.where(future, -np.inf, scores)
    scores -= scores.max(axis=-1, keepdims=True)
    probs = np.exp(scores)
    probs /= probs.sum(axis=-1, keepdims=True)
    out = probs @ v_h  # (n_head, T, hd)
    return out.transpose(1, 0, 2).reshape(n_tokens, n_head * head_dim)


def silu(x):
    return x / (1.0 + np.exp(-x))


def gelu_tanh(x):
    return 0.5 * x * (1.0 + np.tanh(np.sqrt(2.0 / np.pi) * (x + 0.044715 * x ** 3)))


def forward(cfg, get, get_rows, has, tokens, context=None):
    """Logits (T, n_vocab) in float64 for tokens at positions 0..T-1.

    get(name) -> float64 array (numpy shape, rows = output features),
    get_rows(name, ids) -> selected rows, has(name) -> bool."""
    tokens = np.asarray(tokens, dtype=np.int64)
    if tokens.size == 0 or tokens.min() < 0 or tokens.max() >= cfg.n_vocab:
        raise ValueError(f"tokens must be non-empty and in [0, {cfg.n_vocab})")
    n_tokens = tokens.size
    positions = np.arange(n_tokens)
    divisors = get("rope_freqs.weight") if has("rope_freqs.weight") else None
    if has("rope_factors_short.weight"):  # Phi-3 LongRoPE: long factors beyond the original context
        long = (context or n_tokens) > cfg.rope_original_context
        divisors = get("rope_factors_long.weight" if long else "rope_factors_short.weight")
    hd = cfg.head_dim

    def linear(x, name):
        y = x @ get(name + ".weight").T
        if has(name + ".bias"):
            y = y + get(name + ".bias")
        return y

    x = get_rows("token_embd.weight", tokens) * cfg.embed_scale
    q_dim, kv_dim = cfg.n_head * hd, cfg.n_head_kv * hd
    for layer in range(cfg.n_layer):
        p = f"blk.{layer}."
        sliding = cfg.window > 0 and cfg.sliding[layer]
        h = rms_norm(x, get(p + "attn_norm.weight"), cfg.eps)
        if has(p + "attn_qkv.weight"):  # Phi-3: rows q, k, v
            qkv = linear(h, p + "attn_qkv")
            q, k, v = qkv[:, :q_dim], qkv[:, q_dim:q_dim + kv_dim], qkv[:, q_dim + kv_dim:]
        else:
            q, k, v = linear(h, p + "attn_q"), linear(h, p + "attn_k"), linear(h, p + "attn_v")
        q = q.reshape(n_tokens, cfg.n_head, hd)
        k = k.reshape(n_tokens, cfg.n_head_kv, hd)
        v = v.reshape(n_tokens, cfg.n_head_kv, hd)
        if cfg.qk_norm:
            q = rms_norm(q, get(p + "attn_q_norm.weight"), cfg.eps)
            k = rms_norm(k, get(p + "attn_k_norm.weight"), cfg.eps)
        local = sliding and cfg.local_rope_base is not None
        base = cfg.local_rope_base if local else cfg.rope_base
        scale = 1.0 if local else cfg.position_scale
        q = rope(q, positions, base, cfg.rope_dims, cfg.neox, divisors, scale)
        k = rope(k, positions, base, cfg.rope_dims, cfg.neox, divisors, scale)
        if cfg.rope_attn_factor != 1.0:  # LongRoPE scales the rotated dimensions
            q[..., :cfg.rope_dims] *= cfg.rope_attn_factor
            k[..., :cfg.rope_dims] *= cfg.rope_attn_factor
        att = causal_attention(q, k, v, cfg.n_head_kv, cfg.query_scale,
                               cfg.window if sliding else 0, cfg.attn_cap)
        o = linear(att, p + "attn_output")
        if cfg.post_norms:
            o = rms_norm(o, get(p + "post_attention_norm.weight"), cfg.eps)
        x = x + o
        h = rms_norm(x, get(p + "ffn_norm.weight"), cfg.eps)
        if has(p + "ffn_gate.weight"):
            gate, up = linear(h, p + "ffn_gate"), linear(h, p + "ffn_up")
        else:  # Phi-3: one ffn_up of gate rows then up rows
            fused = linear(h, p + "ffn_up")
            gate, up = fused[:, :cfg.n_ff], fused[:, cfg.n_ff:]
        o = linear((gelu_tanh(gate) if cfg.gelu else silu(gate)) * up, p + "ffn_down")
        if cfg.post_norms:
            o = rms_norm(o, get(p + "post_ffw_norm.weight"), cfg.eps)
        x = x + o
    x = rms_norm(x, get("output_norm.weight"), cfg.eps)
    out_name = "output.weight" if has("output.weight") else "token_embd.weight"
    logits = x @ get(out_name).T
    if cfg.final_cap > 0:
        logits = cfg.final_cap * np.tanh(logits / cfg.final_cap)
    return logits


def forward_gguf(gguf, tokens, context=None):
    cfg = Config(gguf.metadata, {n: t.dims for n, t in gguf.tensors.items()})
    return forward(cfg, gguf.tensor, gguf.rows, lambda n: n in gguf.tensors, tokens, context)


# --------------------------------------------------------------------------- self-test

def _write_gguf(metadata, tensors):
    """Minimal GGUF v3 writer for the self-test. metadata: {key: (type_id, value)};
    tensors: {name: (dims, type_id, raw bytes)}."""
    out = io.BytesIO()

    def string(s):
        b = s.encode("utf-8")
        out.write(struct.pack("<Q", len(b)) + b)

    def value(vtype, v):
        if vtype == TYPE_STRING:
            string(v)
        elif vtype == TYPE_ARRAY:
            elem_type, items = v
            out.write(struct.pack("<IQ", elem_type, len(items)))
            for item in items:
                value(elem_type, item)
        else:
            out.write(struct.pack(SCALAR_FORMATS[vtype], v))

    out.write(struct.pack("<IIQQ", GGUF_MAGIC, 3, len(tensors), len(metadata)))
    for key, (vtype, v) in metadata.items():
        string(key)
        out.write(struct.pack("<I", vtype))
        value(vtype, v)
    offset = 0
    for name, (dims, type_id, raw) in tensors.items():
        string(name)
        out.write(struct.pack("<I", len(dims)) + struct.pack(f"<{len(dims)}Q", *dims))
        out.write(struct.pack("<IQ", type_id, offset))
        offset += (len(raw) + 31) // 32 * 32
    out.write(b"\0" * (-out.tell() % 32))
    for _, _, raw in tensors.values():
        out.write(raw + b"\0" * (-len(raw) % 32))
    return out.getvalue()


def _check(condition, what):
    if not condition:
        raise AssertionError(f"selftest failed: {what}")
    print(f"  ok  {what}")


def _scalar_q4_k(block):
    """Element-by-element Q4_K decoding straight from the format description."""
    d = float(np.frombuffer(block[0:2], "<f2")[0])
    dmin = float(np.frombuffer(block[2:4], "<f2")[0])
    s = [int(b) for b in block[4:16]]
    qs = block[16:144]
    out = []
    for j in range(8):
        if j < 4:
            sc, m = s[j] & 63, s[j + 4] & 63
        else:
            sc = (s[j + 4] & 15) | ((s[j - 4] >> 6) << 4)
            m = (s[j + 4] >> 4) | ((s[j] >> 6) << 4)
        group = qs[32 * (j // 2):32 * (j // 2) + 32]
        for byte in group:
            q = (byte & 15) if j % 2 == 0 else (byte >> 4)
            out.append(d * sc * q - dmin * m)
    return np.array(out)


def _scalar_q6_k(block):
    ql, qh = block[0:128], block[128:192]
    scales = np.frombuffer(block[192:208], np.int8)
    d = float(np.frombuffer(block[208:210], "<f2")[0])
    out = np.zeros(256)
    for half in range(2):
        for l in range(32):
            a, b, h = ql[64 * half + l], ql[64 * half + l + 32], qh[32 * half + l]
            values = [(a & 15) | ((h & 3) << 4), (b & 15) | (((h >> 2) & 3) << 4),
                      (a >> 4) | (((h >> 4) & 3) << 4), (b >> 4) | (((h >> 6) & 3) << 4)]
            for g, q in enumerate(values):
                out[128 * half + l + 32 * g] = d * scales[8 * half + l // 16 + 2 * g] * (int(q) - 32)
    return out


def _random_weights(rng, cfg, tied, with_bias):
    w = {"token_embd.weight": rng.standard_normal((cfg.n_vocab, cfg.n_embd))}
    kv_dim = cfg.n_head_kv * cfg.head_dim
    for layer in range(cfg.n_layer):
        p = f"blk.{layer}."
        w[p + "attn_norm.weight"] = 1 + 0.1 * rng.standard_normal(cfg.n_embd)
        w[p + "ffn_norm.weight"] = 1 + 0.1 * rng.standard_normal(cfg.n_embd)
        for name, n_out, n_in in [("attn_q", cfg.n_embd, cfg.n_embd), ("attn_k", kv_dim, cfg.n_embd),
                                  ("attn_v", kv_dim, cfg.n_embd),
                                  ("attn_output", cfg.n_embd, cfg.n_embd),
                                  ("ffn_gate", cfg.n_ff, cfg.n_embd), ("ffn_up", cfg.n_ff, cfg.n_embd),
                                  ("ffn_down", cfg.n_embd, cfg.n_ff)]:
            w[p + name + ".weight"] = rng.standard_normal((n_out, n_in)) / np.sqrt(n_in)
        if with_bias:
            for name, n in [("attn_q", cfg.n_embd), ("attn_k", kv_dim), ("attn_v", kv_dim)]:
                w[p + name + ".bias"] = 0.5 * rng.standard_normal(n)
    w["output_norm.weight"] = 1 + 0.1 * rng.standard_normal(cfg.n_embd)
    if not tied:
        w["output.weight"] = rng.standard_normal((cfg.n_vocab, cfg.n_embd)) / np.sqrt(cfg.n_embd)
    return w


def _forward_dict(cfg, w, tokens):
    return forward(cfg, w.__getitem__, lambda n, ids: w[n][np.asarray(ids)], w.__contains__, tokens)


def _tiny_config(arch, n_head_kv):
    meta = {"general.architecture": arch, f"{arch}.embedding_length": 32,
            f"{arch}.block_count": 2, f"{arch}.attention.head_count": 4,
            f"{arch}.attention.head_count_kv": n_head_kv, f"{arch}.feed_forward_length": 48,
            f"{arch}.attention.layer_norm_rms_epsilon": 1e-5}
    return Config(meta, {"token_embd.weight": [32, 50]})


def selftest():
    rng = np.random.default_rng(1234)

    print("GGUF parsing")
    q8 = np.concatenate([np.frombuffer(np.float16(0.5).tobytes(), np.uint8),
                         np.arange(-16, 16, dtype=np.int8).view(np.uint8)]).tobytes()
    f32 = np.arange(6, dtype="<f4")
    blob = _write_gguf(
        {"general.architecture": (TYPE_STRING, "llama"), "answer": (4, 42),
         "pi": (6, 3.5), "flag": (7, True),
         "names": (TYPE_ARRAY, (TYPE_STRING, ["a", "\u0120b"])),
         "ints": (TYPE_ARRAY, (5, [-1, 2, 3]))},
        {"m": ([3, 2], 0, f32.tobytes()), "q": ([32], 8, q8)})
    g = GgufFile(np.frombuffer(blob, np.uint8))
    _check(g.metadata["answer"] == 42 and g.metadata["pi"] == 3.5 and g.metadata["flag"] is True,
           "scalar metadata round-trips")
    _check(g.metadata["names"] == ["a", "\u0120b"] and g.metadata["ints"] == [-1, 2, 3],
           "array metadata round-trips")
    _check(g.tensor("m").shape == (2, 3) and np.array_equal(g.tensor("m")[1], [3, 4, 5]),
           "dims[0] is the contiguous dimension")
    _check(np.array_equal(g.tensor("q"), 0.5 * np.arange(-16, 16)), "Q8_0 block decodes d*q")
    _check(np.array_equal(g.rows("m", [1, 0]), [[3, 4, 5], [0, 1, 2]]), "row lookup")
    try:
        GgufFile(np.frombuffer(blob[:len(blob) - 40], np.uint8))
        _check(False, "truncated file is rejected")
    except GgufError:
        _check(True, "truncated file is rejected")

    print("dequantization")
    q4 = np.concatenate([np.frombuffer(np.float16(2.0).tobytes(), np.uint8),
                         np.array([(j % 16) | ((15 - j % 16) << 4) for j in range(16)], np.uint8)])
    expect = 2.0 * (np.concatenate([np.arange(16), 15 - np.arange(16)]) - 8)
    _check(np.array_equal(dequantize(2, q4), expect), "Q4_0: low nibbles first, then high")
    exact = np.array([1.5, -2.25, 2.0 ** 100], dtype="<f4")  # all representable in bf16
    bf = (exact.view("<u4") >> 16).astype("<u2")
    _check(np.array_equal(dequantize(30, bf.view(np.uint8)), exact), "BF16 is the upper half of an f32")
    k4 = rng.integers(0, 256, size=(3, 144), dtype=np.uint8)
    k6 = rng.integers(0, 256, size=(3, 210), dtype=np.uint8)
    # Random bytes everywhere but the f16 scales, which get finite moderate values.
    k4[:, 0:2] = np.frombuffer(np.float16([0.01, 0.02, 0.03]).tobytes(), np.uint8).reshape(3, 2)
    k4[:, 2:4] = np.frombuffer(np.float16([0.005, 0.001, 0.002]).tobytes(), np.uint8).reshape(3, 2)
    k6[:, 208:210] = np.frombuffer(np.float16([0.01, -0.02, 0.03]).tobytes(), np.uint8).reshape(3, 2)
    _check(np.allclose(dequantize(12, k4.reshape(-1)),
                       np.concatenate([_scalar_q4_k(b) for b in k4]), rtol=0, atol=1e-12),
           "Q4_K vectorized == element-by-element decoding")
    _check(np.allclose(dequantize(14, k6.reshape(-1)),
                       np.concatenate([_scalar_q6_k(b) for b in k6]), rtol=0, atol=1e-12),
           "Q6_K vectorized == element-by-element decoding")

    print("RoPE")
    x = rng.standard_normal((5, 3, 16))
    pos = np.array([0, 1, 7, 100, 5000])
    divisors = 1 + rng.random(8) * 7
    for neox in (False, True):
        style = "neox" if neox else "adjacent"
        r = rope(x, pos, 10000.0, 16, neox, divisors)
        _check(np.allclose(np.linalg.norm(r, axis=-1), np.linalg.norm(x, axis=-1)),
               f"{style}: rotation preserves norms")
        _check(np.allclose(r[0], x[0]), f"{style}: position 0 is the identity")
        qv, kv = rng.standard_normal(16), rng.standard_normal(16)
        dots = [np.dot(rope(qv[None, None], [m], 500.0, 16, neox)[0, 0],
                       rope(kv[None, None], [n], 500.0, 16, neox)[0, 0]) for m, n in [(3, 1), (12, 10)]]
        _check(np.isclose(dots[0], dots[1]), f"{style}: q.k depends only on the position offset")
        partial = rope(x, pos, 10000.0, 8, neox)
        _check(np.array_equal(partial[..., 8:], x[..., 8:]), f"{style}: dims past rope_dims untouched")
    one = np.zeros((1, 1, 4))
    one[0, 0, 0] = 1.0
    adj = rope(one, [1], 1.0, 4, False)[0, 0]
    neo = rope(one, [1], 1.0, 4, True)[0, 0]
    _check(np.allclose(adj, [np.cos(1), np.sin(1), 0, 0]), "adjacent style pairs x[0] with x[1]")
    _check(np.allclose(neo, [np.cos(1), 0, np.sin(1), 0]), "neox style pairs x[0] with x[d/2]")

    print("attention and forward")
    q = rng.standard_normal((1, 4, 8))
    k = rng.standard_normal((1, 2, 8))
    v = rng.standard_normal((1, 2, 8))
    out = causal_attention(q, k, v, 2).reshape(4, 8)
    _check(np.allclose(out, v[0][[0, 0, 1, 1]]), "one key: output is v of the head's kv group")
    for arch in ("llama", "qwen2"):
        cfg = _tiny_config(arch, 2)
        w = _random_weights(rng, cfg, tied=False, with_bias=arch == "qwen2")
        tokens = rng.integers(0, cfg.n_vocab, size=7)
        full = _forward_dict(cfg, w, tokens)
        _check(full.shape == (7, cfg.n_vocab) and np.isfinite(full).all(), f"{arch}: logits shape")
        changed = tokens.copy()
        changed[4:] = (changed[4:] + 1) % cfg.n_vocab
        alt = _forward_dict(cfg, w, changed)
        _check(np.allclose(full[:4], alt[:4], rtol=0, atol=1e-12) and
               not np.allclose(full[4], alt[4]), f"{arch}: causal (later tokens don't leak back)")
        _check(np.allclose(_forward_dict(cfg, w, tokens[:3]), full[:3]), f"{arch}: prefix == full")
        # The same model written as multi-head attention (K/V heads repeated) must agree.
        mha_cfg = _tiny_config(arch, 4)
        mha = dict(w)
        hd = cfg.head_dim
        for layer in range(cfg.n_layer):
            for name in ("attn_k", "attn_v"):
                for suffix in (".weight", ".bias"):
                    key = f"blk.{layer}.{name}{suffix}"
                    if key in w:
                        heads = w[key].reshape(cfg.n_head_kv, hd, -1)
                        mha[key] = np.repeat(heads, 2, axis=0).reshape(cfg.n_head * hd, -1).squeeze()
        _check(np.allclose(_forward_dict(mha_cfg, mha, tokens), full), f"{arch}: GQA == repeated MHA")
        tied = {n: t for n, t in w.items() if n != "output.weight"}
        untied = dict(tied, **{"output.weight": w["token_embd.weight"]})
        _check(np.allclose(_forward_dict(cfg, tied, tokens), _forward_dict(cfg, untied, tokens)),
               f"{arch}: tied output uses token_embd")
    print("OK")


# --------------------------------------------------------------------------- CLI

def main():
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("model", nargs="?", help="GGUF model file")
    parser.add_argument("--tokens", help="comma-separated token ids")
    parser.add_argument("--dequant", metavar="TENSOR", help="write this tensor's values instead")
    parser.add_argument("--out", help="output file (raw little-endian float32)")
    parser.add_argument("--context", type=int,
                        help="context size the model runs at (Phi-3 LongRoPE picks its factors by "
                             "it; default: the number of tokens)")
    parser.add_argument("--selftest", action="store_true", help="check this script's pieces")
    args = parser.parse_args()

    if args.selftest:
        selftest()
        return 0
    if not args.model or not args.out or (args.tokens is None) == (args.dequant is None):
        parser.error("need MODEL, --out, and exactly one of --tokens / --dequant")
    gguf = GgufFile.open(args.model)
    if args.dequant:
        if args.dequant not in gguf.tensors:
            parser.error(f"no tensor named {args.dequant}")
        values = gguf.tensor(args.dequant).reshape(-1)
    else:
        tokens = [int(t) for t in args.tokens.split(",") if t.strip()]
        values = forward_gguf(gguf, tokens, args.context)
        print(f"reference: {len(tokens)} tokens -> logits {values.shape}, argmax "
              f"{values.argmax(axis=-1).tolist()}", file=sys.stderr)
    values.astype("<f4").tofile(args.out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
