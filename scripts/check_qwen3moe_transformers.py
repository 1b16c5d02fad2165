#!/usr/bin/env python3
"""Checks parspec's qwen3moe forward pass against Hugging Face transformers' Qwen3-MoE.

llama.cpp's snapshot (c392e5094) predates qwen3moe, so the reference is transformers:

 1. a small Qwen3-MoE (8 experts, top-2, renormalised top-k weights as Qwen3's
    norm_topk_prob) is built from transformers' config class with seeded random weights,
    scaled so next-token distributions are peaked (greedy tokens far from ties);
 2. it is exported to GGUF with this file's own writer: keys and tensor names as llama.cpp's
    converter writes them (ffn_gate_inp, ffn_{gate,up,down}_exps stacked [.., .., n_expert],
    attn_{q,k}_norm), the byte-level vocabulary `parspec make-model` writes;
 3. on BOS + the first CTX - 1 bytes of bench/prompts/prose.jsonl's prompts, transformers'
    float64 perplexity of the second half (llama-perplexity's scoring, which `parspec
    perplexity` follows) must be parspec's within 0.1%, and greedy generation (transformers'
    argmax of float64 forwards, parspec generate --temp 0) must give the same tokens.

Needs PyTorch and transformers (4.x or 5.x module names), numpy, and a built parspec.
No network: nothing is downloaded.
  python3 scripts/check_qwen3moe_transformers.py [--parspec build/parspec] [--keep DIR]
Prints one line and exits 1 when a check fails.
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
PROMPTS = os.path.join(ROOT, "bench", "prompts", "prose.jsonl")
PROMPT = "Speculative decoding lets a small model"
N_EXPERT, N_USED = 8, 2
CTX = 64
N_PREDICT = 24
PPL_TOL = 1e-3

# --- the model --------------------------------------------------------------------------------

def build_model(seed):
    from transformers import AutoModelForCausalLM, Qwen3MoeConfig
    config = Qwen3MoeConfig(
        # hidden_size != 2 * moe_intermediate_size: a fused gate_up_proj's two layouts
        # (out × in, in × out) then differ in shape.
        vocab_size=N_VOCAB, hidden_size=64, intermediate_size=128, moe_intermediate_size=96,
        num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2, head_dim=32,
        num_experts=N_EXPERT, num_experts_per_tok=N_USED, norm_topk_prob=True,
        decoder_sparse_step=1, mlp_only_layers=[], max_position_embeddings=2048,
        rms_norm_eps=1e-6, rope_theta=1000000.0, tie_word_embeddings=False,
        attention_bias=False, use_sliding_window=False, output_router_logits=False,
        bos_token_id=256, eos_token_id=257, pad_token_id=None)
    # The eager (looped) experts: the grouped-matmul backend takes no float64.
    config._attn_implementation = "eager"
    config._experts_implementation = "eager"
    try:
        model = AutoModelForCausalLM.from_config(config, attn_implementation="eager",
                                                 experts_implementation="eager")
    except (TypeError, ValueError):
        model = AutoModelForCausalLM.from_config(config)
    if hasattr(model, "set_experts_implementation"):
        model.set_experts_implementation("eager")
    g = torch.Generator().manual_seed(seed)
    hidden = config.hidden_size
    with torch.no_grad():
        for name, p in model.named_parameters():
            if name.endswith("embed_tokens.weight"):
                p.copy_(torch.randn(p.shape, generator=g))
            elif name.endswith("lm_head.weight"):
                p.copy_(torch.randn(p.shape, generator=g) * 3.0 / hidden ** 0.5)
            elif p.dim() == 1:  # RMSNorm weights near their identity
                p.copy_(1.0 + 0.1 * torch.randn(p.shape, generator=g))
            elif p.dim() in (2, 3):  # linear layers and stacked experts: N(0, 1/fan_in)
                p.copy_(torch.randn(p.shape, generator=g) / p.shape[-1] ** 0.5)
            else:
                sys.exit(f"unexpected parameter {name} {tuple(p.shape)}")
    return config, model.to(torch.float64).eval()


def expert_stacks(state, prefix, config):
    """gate, up (n_expert, ff, hidden) and down (n_expert, hidden, ff) of one layer, from
    transformers 4.x's per-expert modules or 5.x's fused gate_up_proj / down_proj."""
    ff, hidden = config.moe_intermediate_size, config.hidden_size
    if prefix + "mlp.experts.0.gate_proj.weight" in state:
        stack = lambda part: np.stack([state[f"{prefix}mlp.experts.{e}.{part}.weight"]
                                       for e in range(N_EXPERT)])
        return stack("gate_proj"), stack("up_proj"), stack("down_proj")
    gate_up, down = state[prefix + "mlp.experts.gate_up_proj"], state[prefix + "mlp.experts.down_proj"]
    if gate_up.shape == (N_EXPERT, hidden, 2 * ff) != (N_EXPERT, 2 * ff, hidden):  # x @ W
        gate_up = gate_up.transpose(0, 2, 1)
    if down.shape == (N_EXPERT, ff, hidden) != (N_EXPERT, hidden, ff):
        down = down.transpose(0, 2, 1)
    if gate_up.shape != (N_EXPERT, 2 * ff, hidden) or down.shape != (N_EXPERT, hidden, ff):
        sys.exit(f"unexpected expert shapes {gate_up.shape} {down.shape}")
    return gate_up[:, :ff, :], gate_up[:, ff:, :], down


def gguf_tensors(model, config):
    state = {k: v.detach().to(torch.float64).cpu().numpy() for k, v in model.state_dict().items()}
    tensors = [("token_embd.weight", state["model.embed_tokens.weight"]),
               ("output_norm.weight", state["model.norm.weight"]),
               ("output.weight", state["lm_head.weight"])]
    names = {"self_attn.q_proj.weight": "attn_q.weight", "self_attn.k_proj.weight": "attn_k.weight",
             "self_attn.v_proj.weight": "attn_v.weight", "self_attn.o_proj.weight": "attn_output.weight",
             "self_attn.q_norm.weight": "attn_q_norm.weight",
             "self_attn.k_norm.weight": "attn_k_norm.weight",
             "input_layernorm.weight": "attn_norm.weight",
             "post_attention_layernorm.weight": "ffn_norm.weight",
             "mlp.gate.weight": "ffn_gate_inp.weight"}
    for l in range(config.num_hidden_layers):
        p = f"model.layers.{l}."
        for hf, ours in names.items():
            tensors.append((f"blk.{l}.{ours}", state[p + hf]))
        gate, up, down = expert_stacks(state, p, config)
        tensors += [(f"blk.{l}.ffn_gate_exps.weight", gate), (f"blk.{l}.ffn_up_exps.weight", up),
                    (f"blk.{l}.ffn_down_exps.weight", down)]
    used = {k for k in state if not k.endswith("rotary_emb.inv_freq")}
    return tensors, used


def gguf_metadata(config):
    a = "qwen3moe"
    return [
        ("general.architecture", GGUF_STRING, a),
        ("general.name", GGUF_STRING, "transformers-random-qwen3moe"),
        (f"{a}.context_length", GGUF_U32, config.max_position_embeddings),
        (f"{a}.embedding_length", GGUF_U32, config.hidden_size),
        (f"{a}.block_count", GGUF_U32, config.num_hidden_layers),
        (f"{a}.feed_forward_length", GGUF_U32, config.intermediate_size),
        (f"{a}.expert_feed_forward_length", GGUF_U32, config.moe_intermediate_size),
        (f"{a}.expert_count", GGUF_U32, N_EXPERT),
        (f"{a}.expert_used_count", GGUF_U32, N_USED),
        (f"{a}.attention.head_count", GGUF_U32, config.num_attention_heads),
        (f"{a}.attention.head_count_kv", GGUF_U32, config.num_key_value_heads),
        (f"{a}.attention.key_length", GGUF_U32, config.head_dim),
        (f"{a}.attention.value_length", GGUF_U32, config.head_dim),
        (f"{a}.attention.layer_norm_rms_epsilon", GGUF_F32, config.rms_norm_eps),
        (f"{a}.rope.freq_base", GGUF_F32, 1000000.0),
    ] + byte_level_vocab()


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--parspec", default=os.path.join(ROOT, "build", "parspec"))
    parser.add_argument("--keep", help="write the GGUF file and text here (default: a temp dir)")
    args = parser.parse_args()
    import transformers
    print(f"transformers {transformers.__version__}, torch {torch.__version__}")
    work = args.keep or tempfile.mkdtemp()
    os.makedirs(work, exist_ok=True)

    config, model = build_model(seed=3)
    tensors, _ = gguf_tensors(model, config)
    path = os.path.join(work, "qwen3moe.gguf")
    write_gguf(path, gguf_metadata(config), tensors)

    text = "\n".join(json.loads(l)["prompt"] for l in open(PROMPTS) if l.strip())
    text_path = os.path.join(work, "text.txt")
    with open(text_path, "w") as f:
        f.write(text)
    ids = [256] + list(text.encode()[:CTX - 1])  # parspec's and llama.cpp's chunk 0
    with torch.no_grad():
        logits = model(torch.tensor([ids])).logits[0]
    logp = torch.log_softmax(logits, dim=-1)
    first = CTX // 2  # the second half of the chunk is scored
    nll = -sum(float(logp[i, ids[i + 1]]) for i in range(first, CTX - 1))
    ref_ppl = float(np.exp(nll / (CTX - 1 - first)))
    out = run([args.parspec, "perplexity", "-m", path, "-f", text_path, "-c", str(CTX),
               "--chunks", "1", "-t", "2"])
    ours_ppl = float([l for l in out.splitlines() if l.startswith("PPL = ")][-1].split()[-1])

    greedy_ref = greedy_tokens(model, [256] + list(PROMPT.encode()), N_PREDICT)
    greedy_ours = json.loads(run([args.parspec, "generate", "-m", path, "-p", PROMPT, "-n",
                                  str(N_PREDICT), "--temp", "0", "--ignore-eos", "-t", "1",
                                  "--json", "-c", "256"]))["tokens"]
    rel = abs(ours_ppl - ref_ppl) / ref_ppl
    ok = rel <= PPL_TOL and greedy_ours == greedy_ref
    print(f"qwen3moe: perplexity transformers {ref_ppl:.4f} parspec {ours_ppl:.4f} "
          f"({100 * rel:.4f}%, bound {100 * PPL_TOL:.1f}%); greedy "
          f"{'equal' if greedy_ours == greedy_ref else 'DIFFERENT'} ({N_PREDICT} tokens): "
          f"{'OK' if ok else 'MISMATCH'}")
    if greedy_ours != greedy_ref:
        print(f"  transformers {greedy_ref}\n  parspec      {greedy_ours}")
    sys.exit(0 if ok else 1)


if __name__ == "__main__":
    main()
