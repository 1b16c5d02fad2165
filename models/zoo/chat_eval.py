"""Measures the zoo's chat model against the target it was fine-tuned from.

  chat_eval.py --base models/target.gguf --chat models/target-chat.gguf --tokens DIR --out eval-chat.json

1. Held-out loss (nats per token) of both models on the held-out chat conversations
   (chat.heldout.npy of chat_data.py) and on the four domains' held-out streams: what
   the fine-tune learned and what it forgot.
2. Held-out chat turns answered greedily (PyTorch, from the GGUF weights): the first
   user turn of every held-out conversation whose question is a word problem or an
   arithmetic question, rendered with CHAT_TEMPLATE and the assistant header. Counts
   how many answers end their turn (write <|im_end|>) within N_GEN tokens and how
   many state the right number ("The answer is N." as the reference answer does).
"""

import argparse
import json
import os
import re
import sys
import time

import torch

from chat_data import render
from evaluate import heldout_loss
from reference import greedy_batch, load_gguf_model
from train import DOMAINS, load_split, set_threads

N_GEN = 96
END_OF_TURN = "<|im_end|>"
ANSWER = re.compile(r"The answer is ([^\s<]+?)\.?(?:<|$|\s)")


def answer_of(text):
    m = ANSWER.search(text)
    return m.group(1) if m else None


def question_turns(path, limit):
    """(messages up to the first assistant turn, reference answer) of held-out math questions."""
    turns = []
    with open(path) as f:
        for line in f:
            msgs = json.loads(line)["messages"]
            first = next(i for i, m in enumerate(msgs) if m["role"] == "user")
            reply = msgs[first + 1]["content"]
            if answer_of(reply) is not None:
                turns.append((msgs[:first + 1], reply))
            if len(turns) == limit:
                break
    return turns


@torch.no_grad()
def answer_turns(model, tok, turns):
    prompts = [[tok.bos] + tok.encode(render(msgs, add_generation_prompt=True)) for msgs, _ in turns]
    outs = []
    for i in range(0, len(prompts), 16):
        outs += greedy_batch(model, prompts[i:i + 16], N_GEN)
    ended = correct = 0
    samples = []
    for (msgs, ref), out in zip(turns, outs):
        text = tok.decode(out)
        end = text.find(END_OF_TURN)
        ended += end >= 0
        reply = text[:end] if end >= 0 else text
        correct += answer_of(reply) == answer_of(ref)
        if len(samples) < 4:
            samples.append({"user": msgs[-1]["content"], "reply": reply, "ended": end >= 0, "reference": ref})
    return {"turns": len(turns), "ended_turn": ended, "right_answer": correct, "samples": samples}


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--base", required=True, help="the target the chat model was fine-tuned from")
    ap.add_argument("--chat", required=True, help="the chat model")
    ap.add_argument("--tokens", required=True, help="directory with <domain>.heldout.npy and chat.heldout.*")
    ap.add_argument("--turns", type=int, default=200, help="held-out questions to answer")
    ap.add_argument("--loss-tokens", type=int, default=12288)
    ap.add_argument("--out", required=True)
    args = ap.parse_args()
    set_threads()
    torch.set_flush_denormal(True)
    t0 = time.time()
    streams = load_split(args.tokens, "heldout", DOMAINS + ("chat",))
    turns = question_turns(os.path.join(args.tokens, "chat.heldout.jsonl"), args.turns)
    result = {"loss": {}, "answers": {}, "n_gen": N_GEN}
    for name, path in (("base", args.base), ("chat", args.chat)):
        model, tok, _ = load_gguf_model(path)
        result["loss"][name] = {d: heldout_loss(model, s, 256, args.loss_tokens) for d, s in streams.items()}
        print(name, "held-out loss", json.dumps({d: round(v, 4) for d, v in result["loss"][name].items()}), flush=True)
        result["answers"][name] = answer_turns(model, tok, turns)
        a = result["answers"][name]
        print(f"{name}: {a['ended_turn']}/{a['turns']} turns ended, {a['right_answer']} right answers", flush=True)
    result["seconds"] = time.time() - t0
    with open(args.out, "w") as f:
        json.dump(result, f, indent=1, ensure_ascii=False)
    print(f"chat evaluation took {result['seconds']:.0f}s -> {args.out}")


if __name__ == "__main__":
    sys.exit(main())
