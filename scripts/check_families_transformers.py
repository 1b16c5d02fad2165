#!/usr/bin/env python3
"""Checks parspec's qwen3 and gemma3 forward passes against Hugging Face transformers.

The llama.cpp snapshot the other checks use (scripts/check_families_llama_cpp.sh) does not know
these families, so the reference here is transformers' own implementation:

 1. a small model of each family is built from transformers' config class with random
    "hidden-style" weights (seeded; scaled so next-token distributions are peaked, so greedy
    tokens are meaningful);
 2. it is exported to GGUF (this file's own minimal writer; tensor names, keys and the Gemma
    norm convention (w + 1) as llama.cpp's converter writes them, byte-level vocabulary as
    `parspec make-model` writes it);
 3. transformers' float64 logits on the first chunk of tests/data/families_text.txt are compared
    with parspec's (`parspec perplexity --logits-out`): the maximum absolute difference must be
    at most TOL * max(1, max |logit|) (TOL = 1e-3; parspec computes in float32), the argmax must
    agree at every position, and greedy generation (argmax of transformers' forwards, parspec generate
    --temp 0) must give the same tokens.

Needs PyTorch and transformers (checked with transformers 5.x API names, falling back to 4.x
ones), and a built parspec (--parspec, default build/parspec). No network: nothing is downloaded.
  python3 scripts/check_families_transformers.py [--parspec build/parspec] [--keep DIR]
Prints one line per family and exits 1 when a check fails.
"""
import argparse
import json
import os
import sys
import tempfile

import numpy as np
import torch

from transformers_gguf import (GGUF_F32, GGUF_STRING, GGUF_U32, N_VOCAB, byte_level_vocab,
                              greedy_tokens, run, write_gguf)

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
TEXT = os.path.join(ROOT, "tests", "data", "families_text.txt")
PROMPT = "Speculative decoding lets a small model"
CTX = 64
N_PREDICT = 24
TOL = 1e-3

# --- transformers configs ---------------------------------------------------------------------

def rope_theta(config, layer_type):
    """The RoPE base a layer type uses, from transformers 5's rope_parameters or 4.x's fields."""
    params = getattr(config, "rope_parameters", None)
    if isinstance(params, dict):
        entry = params.get(layer_type, params)
        if isinstance(entry, dict) and "rope_theta" in entry:
            kind = entry.get("rope_type", "default")
            if kind != "default":
                sys.exit(f"{layer_type}: rope_type {kind} is not what this check exports")
            return float(entry["rope_theta"])
    if layer_type == "sliding_attention" and hasattr(config, "rope_local_base_freq"):
        return float(config.rope_local_base_freq)
    return float(config.rope_theta)


def common_shape():
    return dict(vocab_size=N_VOCAB, hidden_size=64, intermediate_size=128, num_attention_heads=4,
                num_key_value_heads=2, head_dim=32, max_position_embeddings=2048,
                rms_norm_eps=1e-6, bos_token_id=256, eos_token_id=257, pad_token_id=None)


def qwen3_config():
    from transformers import Qwen3Config
    return Qwen3Config(num_hidden_layers=2, rope_theta=1000000.0, tie_word_embeddings=False,
                       attention_bias=False, use_sliding_window=False, **common_shape())


GEMMA3_WINDOW = 16


def gemma3_config():
    from transformers import Gemma3TextConfig
    layers = 6  # five sliding layers, then a global one
    layer_types = ["full_attention" if (i + 1) % 6 == 0 else "sliding_attention"
                   for i in range(layers)]
    return Gemma3TextConfig(num_hidden_layers=layers, sliding_window=GEMMA3_WINDOW,
                            layer_types=layer_types, query_pre_attn_scalar=32,
                            rope_theta=1000000.0, rope_local_base_freq=10000.0,
                            final_logit_softcapping=None, attn_logit_softcapping=None,
                            hidden_activation="gelu_pytorch_tanh", tie_word_embeddings=True,
                            **common_shape())


def build_model(family):
    from transformers import AutoModelForCausalLM
    config = qwen3_config() if family == "qwen3" else gemma3_config()
    try:
        model = AutoModelForCausalLM.from_config(config, attn_implementation="eager")
    except TypeError:
        config._attn_implementation = "eager"
        model = AutoModelForCausalLM.from_config(config)
    return config, model


def randomize(model, family, seed):
    """Hidden-style weights: linear layers N(0, 1/fan_in), peaked output logits, norms near
    their identity (Gemma stores (1 + w) norms: w near 0; post-norms near 3, as parspec's
    random Gemma models, so that blocks rather than the tied input embedding drive the output)."""
    g = torch.Generator().manual_seed(seed)
    hidden = model.config.hidden_size
    spread = 3.0
    gemma = family == "gemma3"
    with torch.no_grad():
        for name, p in model.named_parameters():
            shape = p.shape
            if name.endswith("embed_tokens.weight"):
                std = spread / hidden ** 0.5 if gemma else 1.0
                p.copy_(torch.randn(shape, generator=g) * std)
            elif name.endswith("lm_head.weight"):
                p.copy_(torch.randn(shape, generator=g) * spread / hidden ** 0.5)
            elif p.dim() == 2:
                p.copy_(torch.randn(shape, generator=g) / shape[1] ** 0.5)
            elif p.dim() == 1:
                post = "post_attention_layernorm" in name or "post_feedforward_layernorm" in name
                mean = (2.0 if post else 0.0) if gemma else 1.0
                p.copy_(mean + 0.1 * torch.randn(shape, generator=g))
            else:
                sys.exit(f"unexpected parameter {name} {tuple(shape)}")


# --- export -----------------------------------------------------------------------------------

def gguf_tensors(model, family):
    gemma = family == "gemma3"
    layer_names = {
        "self_attn.q_proj.weight": "attn_q.weight",
        "self_attn.k_proj.weight": "attn_k.weight",
        "self_attn.v_proj.weight": "attn_v.weight",
        "self_attn.o_proj.weight": "attn_output.weight",
        "self_attn.q_norm.weight": "attn_q_norm.weight",
        "self_attn.k_norm.weight": "attn_k_norm.weight",
        "mlp.gate_proj.weight": "ffn_gate.weight",
        "mlp.up_proj.weight": "ffn_up.weight",
        "mlp.down_proj.weight": "ffn_down.weight",
        "input_layernorm.weight": "attn_norm.weight",
    }
    if gemma:
        layer_names.update({
            "post_attention_layernorm.weight": "post_attention_norm.weight",
            "pre_feedforward_layernorm.weight": "ffn_norm.weight",
            "post_feedforward_layernorm.weight": "post_ffw_norm.weight",
        })
    else:
        layer_names["post_attention_layernorm.weight"] = "ffn_norm.weight"
    tensors = []
    for name, p in model.state_dict().items():
        a = p.detach().to(torch.float64).cpu().numpy()
        if gemma and p.dim() == 1:
            a = a + 1.0  # llama.cpp's converter stores Gemma's (1 + w) norm weights as w + 1
        if name.endswith("embed_tokens.weight"):
            tensors.append(("token_embd.weight", a))
        elif name.endswith("lm_head.weight"):
            if not model.config.tie_word_embeddings:
                tensors.append(("output.weight", a))
        elif name.endswith("norm.weight") and ".layers." not in name:
            tensors.append(("output_norm.weight", a))
        elif ".layers." in name:
            rest = name.split(".layers.", 1)[1]
            layer, suffix = rest.split(".", 1)
            if suffix not in layer_names:
                sys.exit(f"no GGUF name for {name}")
            tensors.append((f"blk.{layer}.{layer_names[suffix]}", a))
        elif not name.endswith("rotary_emb.inv_freq"):
            sys.exit(f"no GGUF name for {name}")
    return tensors


def gguf_metadata(config, family):
    a = family
    meta = [
        ("general.architecture", GGUF_STRING, a),
        ("general.name", GGUF_STRING, f"transformers-random-{a}"),
        (f"{a}.context_length", GGUF_U32, config.max_position_embeddings),
        (f"{a}.embedding_length", GGUF_U32, config.hidden_size),
        (f"{a}.block_count", GGUF_U32, config.num_hidden_layers),
        (f"{a}.feed_forward_length", GGUF_U32, config.intermediate_size),
        (f"{a}.attention.head_count", GGUF_U32, config.num_attention_heads),
        (f"{a}.attention.head_count_kv", GGUF_U32, config.num_key_value_heads),
        (f"{a}.attention.key_length", GGUF_U32, config.head_dim),
        (f"{a}.attention.value_length", GGUF_U32, config.head_dim),
        (f"{a}.attention.layer_norm_rms_epsilon", GGUF_F32, config.rms_norm_eps),
        (f"{a}.rope.freq_base", GGUF_F32, rope_theta(config, "full_attention")),
    ]
    if family == "gemma3":
        local = rope_theta(config, "sliding_attention")
        if local != 10000.0:
            sys.exit(f"gemma3: local RoPE base {local}; parspec (as llama.cpp) uses 10000")
        if config.query_pre_attn_scalar != config.head_dim:
            sys.exit("gemma3: parspec scales queries by 1/sqrt(head_dim) outside the 27B shape")
        meta.append((f"{a}.attention.sliding_window", GGUF_U32, config.sliding_window))
    return meta + byte_level_vocab()


# --- comparison -------------------------------------------------------------------------------

def check(family, seed, parspec, work):
    config, model = build_model(family)
    randomize(model, family, seed)
    model = model.to(torch.float64).eval()
    path = os.path.join(work, f"{family}.gguf")
    write_gguf(path, gguf_metadata(config, family), gguf_tensors(model, family))

    text = open(TEXT, "rb").read()
    ids = [256] + list(text[:CTX - 1])  # parspec's chunk 0: BOS, then the text's bytes
    with torch.no_grad():
        ref = model(torch.tensor([ids])).logits[0].numpy()
    logits_path = os.path.join(work, f"{family}.logits")
    run([parspec, "perplexity", "-m", path, "-f", TEXT, "-c", str(CTX), "--chunks", "1",
         "-t", "2", "--logits-out", logits_path])
    ours = np.fromfile(logits_path, dtype=np.float32).reshape(CTX, N_VOCAB)
    diff = float(np.max(np.abs(ours - ref)))
    bound = TOL * max(1.0, float(np.max(np.abs(ref))))
    argmax_same = int(np.sum(ours.argmax(axis=1) == ref.argmax(axis=1)))

    greedy_ref = greedy_tokens(model, [256] + list(PROMPT.encode()), N_PREDICT)
    greedy_ours = json.loads(run([parspec, "generate", "-m", path, "-p", PROMPT, "-n",
                                  str(N_PREDICT), "--temp", "0", "--ignore-eos", "-t", "1",
                                  "--json", "-c", "256"]))["tokens"]
    ok = diff <= bound and argmax_same == CTX and greedy_ours == greedy_ref
    print(f"{family}: max |logit difference| {diff:.3g} (bound {bound:.3g}, max |logit| "
          f"{np.max(np.abs(ref)):.3g}) over {CTX} positions; argmax equal at {argmax_same}/{CTX}; "
          f"greedy {'equal' if greedy_ours == greedy_ref else 'DIFFERENT'} ({N_PREDICT} tokens): "
          f"{'OK' if ok else 'MISMATCH'}")
    if greedy_ours != greedy_ref:
        print(f"  transformers {greedy_ref}\n  parspec      {greedy_ours}")
    return ok


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--parspec", default=os.path.join(ROOT, "build", "parspec"))
    parser.add_argument("--keep", help="write the GGUF files and logits here (default: a temp dir)")
    args = parser.parse_args()
    import transformers
    print(f"transformers {transformers.__version__}, torch {torch.__version__}")
    work = args.keep or tempfile.mkdtemp()
    os.makedirs(work, exist_ok=True)
    results = [check(family, seed, args.parspec, work)
               for family, seed in (("qwen3", 1), ("gemma3", 2))]
    sys.exit(0 if all(results) else 1)


if __name__ == "__main__":
    main()
