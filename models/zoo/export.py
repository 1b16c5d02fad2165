"""Writes a trained checkpoint as a GGUF `llama` model with the zoo's tokenizer.

Matrices are F16 (or Q8_0 with --type q8_0), norms F32. The output head is
tied to token_embd.weight, so no output.weight is written. The model's RoPE
already rotates adjacent pairs (llama's GGUF convention), so Q and K rows are
stored as trained, without the permutation Hugging Face checkpoints need.
"""

import argparse
import sys

import torch

import bpe
import gguf_writer as gw
from model import gguf_tensor_names, load_checkpoint


def export(ckpt_path, tokenizer_path, out_path, name, ttype, chat_template=None):
    model, _ = load_checkpoint(ckpt_path)
    c = model.c
    tok = bpe.Tokenizer.load(tokenizer_path)
    assert tok.n_vocab == c.n_vocab, "tokenizer and model disagree on the vocabulary size"
    w = gw.GgufWriter()
    w.add_string("general.architecture", "llama")
    w.add_string("general.name", name)
    w.add_u32("general.file_type", {gw.F16: 1, gw.Q8_0: 7}[ttype])
    w.add_u32("general.quantization_version", 2)
    w.add_u32("general.alignment", gw.ALIGNMENT)
    w.add_u32("llama.context_length", c.n_ctx)
    w.add_u32("llama.embedding_length", c.n_embd)
    w.add_u32("llama.block_count", c.n_layer)
    w.add_u32("llama.feed_forward_length", c.n_ff)
    w.add_u32("llama.attention.head_count", c.n_head)
    w.add_u32("llama.attention.head_count_kv", c.n_head_kv)
    w.add_f32("llama.attention.layer_norm_rms_epsilon", c.rms_eps)
    w.add_f32("llama.rope.freq_base", c.rope_base)
    w.add_u32("llama.rope.dimension_count", c.head_dim)
    w.add_u32("llama.vocab_size", c.n_vocab)
    tok.add_to_gguf(w)
    if chat_template:
        w.add_string("tokenizer.chat_template", chat_template)

    sd = {k: v.detach().float().numpy() for k, v in model.state_dict().items()}
    for gguf_name, key in gguf_tensor_names(c.n_layer).items():
        arr = sd[key]
        w.add_tensor(gguf_name, arr, gw.F32 if arr.ndim == 1 else ttype)  # norms stay F32
    w.write(out_path)


def main():
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--ckpt", required=True)
    ap.add_argument("--tokenizer", required=True)
    ap.add_argument("--out", required=True)
    ap.add_argument("--name", required=True)
    ap.add_argument("--type", choices=("f16", "q8_0"), default="f16")
    ap.add_argument("--chat", action="store_true",
                    help="write the chat model's ChatML template (chat_data.CHAT_TEMPLATE) as tokenizer.chat_template")
    args = ap.parse_args()
    torch.set_num_threads(1)
    chat_template = None
    if args.chat:
        from chat_data import CHAT_TEMPLATE as chat_template
    export(args.ckpt, args.tokenizer, args.out, args.name, {"f16": gw.F16, "q8_0": gw.Q8_0}[args.type],
           chat_template)
    print(f"wrote {args.out}")


if __name__ == "__main__":
    sys.exit(main())
