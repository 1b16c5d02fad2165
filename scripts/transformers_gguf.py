"""What the transformers checks (scripts/check_*_transformers.py) share: a GGUF writer for
random models made in PyTorch (metadata and F32 tensors), the byte-level vocabulary `parspec
make-model` writes, a command runner, and greedy decoding by argmax of full forwards."""
import struct
import subprocess
import sys

import numpy as np
import torch

N_VOCAB = 512  # byte tokens, BOS, EOS and fillers

# --- GGUF (version 3) writer: metadata and F32 tensors ----------------------------------------
GGUF_U32, GGUF_I32, GGUF_F32, GGUF_BOOL, GGUF_STRING, GGUF_ARRAY = 4, 5, 6, 7, 8, 9
ALIGN = 32


def gguf_string(s):
    b = s.encode("utf-8")
    return struct.pack("<Q", len(b)) + b


def gguf_value(kind, v):
    if kind == GGUF_U32:
        return struct.pack("<I", v)
    if kind == GGUF_I32:
        return struct.pack("<i", v)
    if kind == GGUF_F32:
        return struct.pack("<f", v)
    if kind == GGUF_BOOL:
        return struct.pack("<B", 1 if v else 0)
    if kind == GGUF_STRING:
        return gguf_string(v)
    raise ValueError(kind)


def write_gguf(path, metadata, tensors):
    """metadata: [(key, kind, value)] (kind GGUF_ARRAY: value = (element kind, list));
    tensors: [(name, numpy float32 array in torch's (out, in) layout)]."""
    out = bytearray(b"GGUF" + struct.pack("<IQQ", 3, len(tensors), len(metadata)))
    for key, kind, value in metadata:
        out += gguf_string(key) + struct.pack("<I", kind)
        if kind == GGUF_ARRAY:
            elem, items = value
            out += struct.pack("<IQ", elem, len(items))
            for item in items:
                out += gguf_value(elem, item)
        else:
            out += gguf_value(kind, value)
    offset = 0
    blobs = []
    for name, array in tensors:
        a = np.ascontiguousarray(array, dtype=np.float32)
        dims = list(reversed(a.shape))  # GGUF lists the fastest-varying dimension first
        out += gguf_string(name) + struct.pack("<I", len(dims))
        out += b"".join(struct.pack("<Q", d) for d in dims)
        out += struct.pack("<IQ", 0, offset)  # type F32
        blobs.append(a.tobytes())
        offset += (len(blobs[-1]) + ALIGN - 1) // ALIGN * ALIGN
    out += b"\0" * (-len(out) % ALIGN)
    for blob in blobs:
        out += blob + b"\0" * (-len(blob) % ALIGN)
    with open(path, "wb") as f:
        f.write(out)


def byte_level_vocab():
    """The vocabulary `parspec make-model` writes: GPT-2's 256 byte tokens, BOS, EOS, fillers."""
    def printable(b):
        return ord("!") <= b <= ord("~") or 0xA1 <= b <= 0xAC or 0xAE <= b <= 0xFF
    tokens, extra = [], 256
    for b in range(256):
        if printable(b):
            tokens.append(chr(b))
        else:
            tokens.append(chr(extra))
            extra += 1
    types = [1] * 256 + [3, 3] + [5] * (N_VOCAB - 258)
    tokens += ["<s>", "</s>"] + [f"<unused_{i}>" for i in range(N_VOCAB - 258)]
    return [
        ("tokenizer.ggml.model", GGUF_STRING, "gpt2"),
        ("tokenizer.ggml.pre", GGUF_STRING, "default"),
        ("tokenizer.ggml.tokens", GGUF_ARRAY, (GGUF_STRING, tokens)),
        ("tokenizer.ggml.token_type", GGUF_ARRAY, (GGUF_I32, types)),
        ("tokenizer.ggml.merges", GGUF_ARRAY, (GGUF_STRING, [])),
        ("tokenizer.ggml.bos_token_id", GGUF_U32, 256),
        ("tokenizer.ggml.eos_token_id", GGUF_U32, 257),
        ("tokenizer.ggml.add_bos_token", GGUF_BOOL, True),
        ("tokenizer.ggml.add_eos_token", GGUF_BOOL, False),
    ]


def run(cmd):
    r = subprocess.run(cmd, capture_output=True, text=True)
    if r.returncode != 0:
        sys.exit(f"{' '.join(cmd)} failed:\n{r.stderr}")
    return r.stdout


def greedy_tokens(model, prompt, n):
    """n tokens by argmax of full float64 forwards, with no logits processor: transformers'
    generate() would keep the configured EOS out while min_new_tokens is pending, where
    parspec generate --ignore-eos does not."""
    ids = list(prompt)
    with torch.no_grad():
        for _ in range(n):
            ids.append(int(model(torch.tensor([ids])).logits[0, -1].argmax()))
    return ids[len(prompt):]
