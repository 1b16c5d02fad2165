"""Python reference for the zoo's GGUF files: loads a GGUF (weights as stored,
F16/Q8_0 dequantized) into the trainer's PyTorch model and runs it. Used by the
evaluation, and as an independent check of the engine's numerics and tokenizer:

  reference.py -m models/target.gguf -p "def main():" -n 32          # greedy text + ids (JSON)
  reference.py -m models/target.gguf -p "some text" --tokenize       # token ids (JSON)
  reference.py -m models/target.gguf -p "x = 1" --logits 5           # top logits after the prompt
  reference.py -m models/target.gguf --prompts-file p.txt --dump out   # every position's logits

--dump reads one JSON string per line of the prompts file and writes out.ids (the
token ids of each prompt, BOS first, space-separated, a line per prompt) and
out.bin (float32 logits of every position of every prompt, in that order). The
engine's tests compare their own tokenization and forward pass with these.
"""

import argparse
import json
import sys

import numpy as np
import torch

import bpe
import gguf_writer as gw
from model import Config, Llama, gguf_tensor_names


def tokenizer_from_meta(meta):
    assert meta["tokenizer.ggml.model"] == "gpt2" and meta["tokenizer.ggml.pre"] == bpe.PRE_TOKENIZER
    return bpe.Tokenizer(meta["tokenizer.ggml.tokens"], [tuple(m.split(" ", 1)) for m in meta["tokenizer.ggml.merges"]])


def load_gguf_model(path):
    meta, tensors = gw.read_gguf(path)
    assert meta["general.architecture"] == "llama"
    p = "llama."
    c = Config(
        n_vocab=len(meta["tokenizer.ggml.tokens"]),
        n_embd=meta[p + "embedding_length"],
        n_layer=meta[p + "block_count"],
        n_head=meta[p + "attention.head_count"],
        n_head_kv=meta.get(p + "attention.head_count_kv", meta[p + "attention.head_count"]),
        n_ff=meta[p + "feed_forward_length"],
        n_ctx=meta[p + "context_length"],
        rms_eps=meta[p + "attention.layer_norm_rms_epsilon"],
        rope_base=meta.get(p + "rope.freq_base", 10000.0),
    )
    model = Llama(c)
    assert "output.weight" not in tensors, "the zoo's models tie the output head to the embedding"
    model.load_state_dict({key: torch.from_numpy(np.ascontiguousarray(tensors[name][2]))
                           for name, key in gguf_tensor_names(c.n_layer).items()})
    model.eval()
    return model, tokenizer_from_meta(meta), meta


def greedy(model, ids, n, stop=None):
    """Greedy continuation of ids (a list) by n tokens at most, stopping after `stop`."""
    return greedy_batch(model, [ids], n, stop)[0]  # no padding: the same numbers as an unbatched run


@torch.no_grad()
def greedy_batch(model, prompts, n, stop=None):
    """greedy() for many prompts at once (left-padded); returns one list per prompt."""
    width = max(len(p) for p in prompts)
    ids = torch.tensor([[0] * (width - len(p)) + p for p in prompts])
    pad = torch.tensor([[True] * (width - len(p)) + [False] * len(p) for p in prompts])
    cache = model.new_cache()
    logits = model(ids, cache, pad)[:, -1]
    outs = [[] for _ in prompts]
    live = [True] * len(prompts)
    for _ in range(n):
        nxt = logits.argmax(-1)
        for i, t in enumerate(nxt.tolist()):
            if live[i]:
                outs[i].append(t)
                live[i] = t != stop
        if not any(live):
            break
        pad = torch.cat((pad, torch.zeros(len(prompts), 1, dtype=torch.bool)), dim=1)
        logits = model(nxt[:, None], cache, pad)[:, -1]
    return outs


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("-m", "--model", required=True)
    ap.add_argument("-p", "--prompt")
    ap.add_argument("--prompts-file", help="for --dump: one JSON string per line")
    ap.add_argument("--dump", metavar="PREFIX", help="write PREFIX.ids and PREFIX.bin (see above)")
    ap.add_argument("-n", type=int, default=32)
    ap.add_argument("--tokenize", action="store_true")
    ap.add_argument("--logits", type=int, default=0, help="print the top-k logits after the prompt")
    args = ap.parse_args()
    torch.set_num_threads(1)
    model, tok, _ = load_gguf_model(args.model)
    if args.dump:
        if not args.prompts_file:
            ap.error("--dump needs --prompts-file")
        with open(args.prompts_file, encoding="utf-8") as f:
            prompts = [json.loads(line) for line in f if line.strip()]
        with open(args.dump + ".ids", "w") as ids_out, open(args.dump + ".bin", "wb") as bin_out, torch.no_grad():
            for text in prompts:
                ids = tok.encode(text, add_bos=True)
                ids_out.write(" ".join(map(str, ids)) + "\n")
                bin_out.write(model(torch.tensor([ids]))[0].to(torch.float32).numpy().tobytes())
        return
    if args.prompt is None:
        ap.error("give -p/--prompt (or --prompts-file with --dump)")
    ids = tok.encode(args.prompt, add_bos=True)
    if args.tokenize:
        print(json.dumps(ids))
        return
    if args.logits:
        with torch.no_grad():
            logits = model(torch.tensor([ids]))[0, -1]
        top = torch.topk(logits, args.logits)
        print(json.dumps([{"id": int(i), "text": tok.decode([int(i)]), "logit": float(v)} for v, i in zip(top.values, top.indices)]))
        return
    out = greedy(model, ids, args.n, stop=tok.eos)
    print(json.dumps({"prompt_ids": ids, "ids": out, "text": tok.decode([i for i in out if i != tok.eos])}, ensure_ascii=False))


if __name__ == "__main__":
    sys.exit(main())
