"""Chat conversations for the zoo's chat model (target-chat.gguf), from the zoo corpus.

  chat_data.py --corpus DIR --tokenizer tokenizer.json --out TOKENS_DIR

writes chat.train.npy / chat.heldout.npy (token streams in the layout of
`train.py tokenize`: BOS, one rendered conversation, EOS, ...) and chat.*.jsonl
(the conversations as messages, for reading) into TOKENS_DIR. Each split is built
only from the same split of the corpus, so held-out conversations come from
held-out documents and problems. Turns are of three kinds:

  - a word problem of the math domain, answered with its worked solution;
  - a direct arithmetic question in one of several phrasings ("What is 12 plus 30?"),
    answered "12 + 30 = 42. The answer is 42.";
  - "Continue this code/text/configuration file:" with a piece of a code, prose or
    config document, answered with the lines that follow it there.

A conversation has 1-3 such exchanges, sometimes after a system message, and is
rendered in ChatML (CHAT_TEMPLATE, written into the GGUF file by export.py
--chat). The zoo's vocabulary has no <|im_start|>/<|im_end|> tokens (the chat
model keeps the target's vocabulary, so that the zoo drafters still draft for
it), so the markers are ordinary text: the model learns to write <|im_end|>
after its answer, and the engine stops there (an end-of-turn stop string).
Everything is drawn from a seeded random.Random, so a rerun gives the same streams.
"""

import argparse
import json
import os
import random
import re
import sys

import numpy as np

import bpe

# ChatML as Qwen2's template writes it, without a default system message (the
# zoo's context is 256 tokens). parspec recognises the family from the markers.
CHAT_TEMPLATE = (
    "{% for message in messages %}"
    "{{ '<|im_start|>' + message['role'] + '\\n' + message['content'] + '<|im_end|>' + '\\n' }}"
    "{% endfor %}"
    "{% if add_generation_prompt %}{{ '<|im_start|>assistant\\n' }}{% endif %}"
)

SYSTEMS = ["You are a helpful assistant.", "You are a careful math tutor.", "Answer briefly."]
KIND_WEIGHTS = {"word_problem": 0.4, "arithmetic": 0.25, "continue": 0.35}
CONTINUE_WHAT = {"code": "this Python code", "prose": "this text", "config": "this configuration file"}
MAX_TOKENS = 250  # a conversation fits the 256-token context with BOS


def render(messages, add_generation_prompt=False):
    """CHAT_TEMPLATE's text (parspec's ChatTemplate renders the same)."""
    out = "".join(f"<|im_start|>{m['role']}\n{m['content']}<|im_end|>\n" for m in messages)
    return out + ("<|im_start|>assistant\n" if add_generation_prompt else "")


def read_docs(corpus, domain, split):
    return [d["text"] for d in bpe.read_jsonl(os.path.join(corpus, f"{domain}.{split}.jsonl"))]


def word_problems(math_docs):
    pairs = []
    for doc in math_docs:
        pairs += re.findall(r"Q: (.*)\nA: (.*)\n", doc)
    return pairs


def arithmetic(r):
    a, b = r.randint(0, 99), r.randint(0, 99)
    op = r.choice("+-*")
    if op == "-" and b > a:
        a, b = b, a
    if op == "*":
        a, b = r.randint(2, 20), r.randint(2, 12)
    c = {"+": a + b, "-": a - b, "*": a * b}[op]
    word = {"+": "plus", "-": "minus", "*": "times"}[op]
    question = r.choice([
        f"What is {a} {word} {b}?", f"What is {a} {op} {b}?", f"How much is {a} {op} {b}?",
        f"Compute {a} {op} {b}.", f"Please calculate {a} {word} {b}.", f"{a} {op} {b} = ?",
    ])
    return question, f"{a} {op} {b} = {c}. The answer is {c}."


def continuation(r, domain, docs):
    """A piece of a document (cut at line starts) and the lines after it."""
    for _ in range(20):
        doc = docs[r.randrange(len(docs))]
        starts = [0] + [m.end() for m in re.finditer("\n", doc)]
        if len(starts) < 6:
            continue
        i = r.randrange(len(starts) - 4)
        head_end = next((s for s in starts[i + 1:] if s - starts[i] >= 120), None)
        if head_end is None or head_end - starts[i] > 320:
            continue
        tail_end = next((s for s in starts if s > head_end and s - head_end >= 60), None)
        if tail_end is None or tail_end - head_end > 220:
            continue
        head, tail = doc[starts[i]:head_end].rstrip("\n"), doc[head_end:tail_end].rstrip("\n")
        if head.strip() and tail.strip():
            return f"Continue {CONTINUE_WHAT[domain]}:\n{head}", tail
    return None


def conversations(corpus, split, seed, count, tok):
    r = random.Random(seed)
    problems = word_problems(read_docs(corpus, "math", split))
    docs = {d: read_docs(corpus, d, split) for d in CONTINUE_WHAT}
    kinds, weights = zip(*KIND_WEIGHTS.items())
    out = []
    while len(out) < count:
        messages = [{"role": "system", "content": r.choice(SYSTEMS)}] if r.random() < 0.3 else []
        for _ in range(r.choice((1, 1, 2, 3))):
            kind = r.choices(kinds, weights)[0]
            if kind == "word_problem":
                turn = r.choice(problems)
            elif kind == "arithmetic":
                turn = arithmetic(r)
            else:
                domain = r.choice(sorted(docs))
                turn = continuation(r, domain, docs[domain])
            if turn is None:
                continue
            candidate = messages + [{"role": "user", "content": turn[0]},
                                    {"role": "assistant", "content": turn[1]}]
            if len(tok.encode(render(candidate))) + 2 > MAX_TOKENS:
                break
            messages = candidate
        if any(m["role"] == "assistant" for m in messages):
            out.append(messages)
    return out


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--corpus", required=True)
    ap.add_argument("--tokenizer", required=True)
    ap.add_argument("--out", required=True)
    ap.add_argument("--train", type=int, default=8000, help="training conversations")
    ap.add_argument("--heldout", type=int, default=400, help="held-out conversations")
    ap.add_argument("--seed", type=int, default=7)
    args = ap.parse_args()
    tok = bpe.Tokenizer.load(args.tokenizer)
    os.makedirs(args.out, exist_ok=True)
    for split, count, seed in (("train", args.train, args.seed), ("heldout", args.heldout, args.seed + 1)):
        convs = conversations(args.corpus, split, seed, count, tok)
        ids = []
        with open(os.path.join(args.out, f"chat.{split}.jsonl"), "w") as f:
            for messages in convs:
                f.write(json.dumps({"messages": messages}, ensure_ascii=False) + "\n")
                ids += [tok.bos] + tok.encode(render(messages)) + [tok.eos]
        np.save(os.path.join(args.out, f"chat.{split}.npy"), np.asarray(ids, dtype=np.uint16))
        print(f"chat.{split}: {len(convs)} conversations, {len(ids)} tokens", flush=True)


if __name__ == "__main__":
    sys.exit(main())
