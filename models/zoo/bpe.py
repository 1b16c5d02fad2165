"""Byte-level BPE in the form of GPT-2 / Llama 3 GGUF vocabularies.

Text is cut into words by the `gpt-2` pre-tokenizer regex, each
word's UTF-8 bytes are written with GPT-2's byte-to-unicode mapping, and
merges are applied lowest rank first (all occurrences of the best pair, left
to right) -- the algorithm parspec's C++ tokenizer implements for
tokenizer.ggml.model = "gpt2". Vocabulary layout: ids 0-255 the single bytes
(in byte order), then one token per merge result, then <|bos|> and <|eos|>
(control tokens).
"""

import argparse
import heapq
import json
import os
import sys
from collections import Counter

import regex

# `tokenizer.ggml.pre` = "gpt-2": llama.cpp's name for exactly this pattern
# (its "default" is a different list of patterns).
PRE_TOKENIZER = "gpt-2"
PATTERN = regex.compile(r"""'s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+""")
BOS, EOS = "<|bos|>", "<|eos|>"
TYPE_NORMAL, TYPE_CONTROL = 1, 3


def bytes_to_unicode():
    """GPT-2's reversible map from bytes to printable unicode characters."""
    keep = list(range(ord("!"), ord("~") + 1)) + list(range(ord("¡"), ord("¬") + 1)) + list(range(ord("®"), ord("ÿ") + 1))
    mapping, extra = {}, 0
    for b in range(256):
        if b in keep:
            mapping[b] = chr(b)
        else:
            mapping[b] = chr(256 + extra)
            extra += 1
    return mapping


BYTE_TO_CHAR = bytes_to_unicode()
CHAR_TO_BYTE = {c: b for b, c in BYTE_TO_CHAR.items()}


def map_word(word):
    return "".join(BYTE_TO_CHAR[b] for b in word.encode("utf-8"))


def pretokenize(text):
    return PATTERN.findall(text)


def merge_pair(seq, a, b, merged):
    """seq with every (a, b), left to right, replaced by `merged`."""
    out, i = [], 0
    while i < len(seq):
        if i + 1 < len(seq) and seq[i] == a and seq[i + 1] == b:
            out.append(merged)
            i += 2
        else:
            out.append(seq[i])
            i += 1
    return out


class Tokenizer:
    def __init__(self, tokens, merges):
        self.tokens = tokens  # stored (mapped) text per id
        self.merges = merges  # [(left, right)] in rank order
        self.id_of = {t: i for i, t in enumerate(tokens)}
        self.rank = {pair: r for r, pair in enumerate(merges)}
        self.bos = self.id_of[BOS]
        self.eos = self.id_of[EOS]
        self.cache = {}

    @property
    def n_vocab(self):
        return len(self.tokens)

    def token_types(self):
        return [TYPE_CONTROL if t in (BOS, EOS) else TYPE_NORMAL for t in self.tokens]

    def _encode_word(self, mapped):
        ids = self.cache.get(mapped)
        if ids is not None:
            return ids
        parts = list(mapped)
        while len(parts) > 1:
            best, best_rank = None, None
            for pair in zip(parts, parts[1:]):
                r = self.rank.get(pair)
                if r is not None and (best_rank is None or r < best_rank):
                    best, best_rank = pair, r
            if best is None:
                break
            parts = merge_pair(parts, best[0], best[1], best[0] + best[1])
        ids = [self.id_of[p] for p in parts]
        self.cache[mapped] = ids
        return ids

    def encode(self, text, add_bos=False):
        out = [self.bos] if add_bos else []
        for word in pretokenize(text):
            out.extend(self._encode_word(map_word(word)))
        return out

    def decode(self, ids):
        data = bytearray()
        for i in ids:
            t = self.tokens[i]
            if t in (BOS, EOS):
                data.extend(t.encode())
            else:
                data.extend(CHAR_TO_BYTE[c] for c in t)
        return data.decode("utf-8", errors="replace")

    def save(self, path):
        with open(path, "w") as f:
            json.dump({"pre": PRE_TOKENIZER, "tokens": self.tokens, "merges": [f"{a} {b}" for a, b in self.merges]}, f)

    @staticmethod
    def load(path):
        with open(path) as f:
            d = json.load(f)
        return Tokenizer(d["tokens"], [tuple(m.split(" ", 1)) for m in d["merges"]])

    def add_to_gguf(self, w):
        from gguf_writer import T_STRING, T_I32

        w.add_string("tokenizer.ggml.model", "gpt2")
        w.add_string("tokenizer.ggml.pre", PRE_TOKENIZER)
        w.add_array("tokenizer.ggml.tokens", T_STRING, self.tokens)
        w.add_array("tokenizer.ggml.token_type", T_I32, self.token_types())
        w.add_array("tokenizer.ggml.merges", T_STRING, [f"{a} {b}" for a, b in self.merges])
        w.add_u32("tokenizer.ggml.bos_token_id", self.bos)
        w.add_u32("tokenizer.ggml.eos_token_id", self.eos)
        w.add_bool("tokenizer.ggml.add_bos_token", True)
        w.add_bool("tokenizer.ggml.add_eos_token", False)


def train(word_counts, n_vocab, log=print):
    """word_counts: {mapped word: integer weight}. Returns a Tokenizer with n_vocab tokens."""
    tokens = [BYTE_TO_CHAR[b] for b in range(256)]
    id_of = {t: i for i, t in enumerate(tokens)}
    words = sorted(word_counts)
    weights = [word_counts[w] for w in words]
    symbols = [[id_of[c] for c in w] for w in words]
    pair_count = Counter()
    where = {}
    for wi, syms in enumerate(symbols):
        for pair in zip(syms, syms[1:]):
            pair_count[pair] += weights[wi]
            where.setdefault(pair, set()).add(wi)
    heap = [(-c, p) for p, c in pair_count.items()]
    heapq.heapify(heap)
    merges = []
    n_target = n_vocab - 2  # room for <|bos|>, <|eos|>
    while len(tokens) < n_target and heap:
        negc, pair = heapq.heappop(heap)
        if pair_count.get(pair, 0) != -negc or negc == 0:
            continue
        a, b = pair
        text = tokens[a] + tokens[b]
        new_id = id_of.get(text)
        if new_id is None:
            new_id = len(tokens)
            tokens.append(text)
            id_of[text] = new_id
        merges.append((tokens[a], tokens[b]))
        touched = set()
        for wi in sorted(where.pop(pair, ())):
            syms, wt = symbols[wi], weights[wi]
            for p in zip(syms, syms[1:]):
                pair_count[p] -= wt
                touched.add(p)
            symbols[wi] = merged = merge_pair(syms, a, b, new_id)
            for p in zip(merged, merged[1:]):
                pair_count[p] += wt
                touched.add(p)
                where.setdefault(p, set()).add(wi)
        for p in touched:
            c = pair_count[p]
            if c <= 0:
                pair_count.pop(p, None)
            elif p != pair:
                heapq.heappush(heap, (-c, p))
        pair_count.pop(pair, None)
        if len(merges) % 500 == 0:
            log(f"  {len(merges)} merges, vocab {len(tokens)}")
    tokens += [BOS, EOS]
    return Tokenizer(tokens, merges)


def read_jsonl(path):
    with open(path) as f:
        return [json.loads(line) for line in f]


def main():
    ap = argparse.ArgumentParser(description="train the zoo's byte-level BPE vocabulary")
    ap.add_argument("--corpus", required=True, help="directory with <domain>.train.jsonl")
    ap.add_argument("--domains", default="code,prose,config,math")
    ap.add_argument("--n-vocab", type=int, default=2048)
    ap.add_argument("--out", required=True)
    args = ap.parse_args()
    domains = args.domains.split(",")
    per_domain = {}
    for d in domains:
        counts = Counter()
        for doc in read_jsonl(os.path.join(args.corpus, f"{d}.train.jsonl")):
            counts.update(pretokenize(doc["text"]))
        per_domain[d] = counts
    # Each domain weighs about as much as the largest: integer multipliers keep it exact.
    sizes = {d: sum(len(w.encode()) * c for w, c in counts.items()) for d, counts in per_domain.items()}
    biggest = max(sizes.values())
    total = Counter()
    for d, counts in per_domain.items():
        mult = max(1, round(biggest / sizes[d]))
        print(f"{d}: {sizes[d] / 1e6:.2f} MB of words, weight x{mult}")
        for w, c in counts.items():
            total[map_word(w)] += c * mult
    print(f"{len(total)} distinct words")
    tok = train(total, args.n_vocab)
    tok.save(args.out)
    print(f"vocabulary of {tok.n_vocab} tokens, {len(tok.merges)} merges -> {args.out}")


if __name__ == "__main__":
    sys.exit(main())
