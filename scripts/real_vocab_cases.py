#!/usr/bin/env python3
"""Writes tests/data/real_vocab_cases.json: hard strings for the real-vocabulary
tokenizer tests, one group per class of characters where the tokenizer depends
on Unicode data: letters and digits added in Unicode 15.0/15.1 (which PCRE2
10.42's Unicode 14 tables do not know), whitespace as llama.cpp defines it
(U+180E is not), marks, symbols and punctuation added since Unicode 14, and
special-token text such as <unk>. Deterministic: no randomness."""
import json
import os

LETTERS_ADDED = [(0x1123F, 0x11240), (0x11F02, 0x11F02), (0x11F04, 0x11F10), (0x11F12, 0x11F33),
                 (0x1342F, 0x1342F), (0x13441, 0x13446), (0x1B132, 0x1B132), (0x1B155, 0x1B155),
                 (0x1DF25, 0x1DF2A), (0x1E030, 0x1E06D), (0x1E4D0, 0x1E4EB), (0x2B739, 0x2B739),
                 (0x2EBF0, 0x2EE5D), (0x31350, 0x323AF)]
DIGITS_ADDED = [(0x11F50, 0x11F59), (0x1D2C0, 0x1D2D3), (0x1E4F0, 0x1E4F9)]
# Added in 15.0/15.1 but neither letter nor digit: marks (Mn/Mc), symbols (So:
# emoji, Kaktovik is No... listed above as digits where llama.cpp says N),
# punctuation (Po), format (Cf), and ideographic description characters.
OTHERS_ADDED = [0x0CF3, 0x0ECE, 0x10EFD, 0x10EFE, 0x10EFF, 0x11241, 0x11F00, 0x11F01, 0x11F03,
                0x11F34, 0x11F3E, 0x11F43, 0x11F4F, 0x13440, 0x13439, 0x1343F, 0x1E08F,
                0x1F6DC, 0x1F774, 0x1F7D9, 0x1FA75, 0x1FA87, 0x1FAAD, 0x1FABB, 0x1FAF8, 0x2FFC,
                0x2FFF, 0x31EF]
WHITESPACE_LLAMA = [0x09, 0x0A, 0x0B, 0x0C, 0x0D, 0x20, 0x85, 0xA0, 0x1680] + \
    list(range(0x2000, 0x200B)) + [0x2028, 0x2029, 0x202F, 0x205F, 0x3000]
NOT_WHITESPACE = [0x180E, 0x200B, 0x200C, 0x200D, 0x2060, 0xFEFF, 0x1C, 0x1F]


def picks(ranges, n_per_range=3):
    out = []
    for a, b in ranges:
        out += sorted({a, (a + b) // 2, b})[:n_per_range]
    return out


def contexts(c):
    return [f"a{c}b", f" {c}{c}{c}", f"{c}x1", f"1{c}2", f"x {c} 12345", f"{c}'s {c}", f"!{c}?",
            f"\n{c}\n", f"{c}{c} {c}"]


cases = []
for cp in picks(LETTERS_ADDED):
    cases += contexts(chr(cp))
for cp in picks(DIGITS_ADDED):
    cases += contexts(chr(cp)) + [chr(cp) * 5, "12" + chr(cp) * 4 + "345"]
for cp in OTHERS_ADDED:
    cases += [f"a{chr(cp)}b", f" {chr(cp)}{chr(cp)}", f"x{chr(cp)} y"]
for cp in WHITESPACE_LLAMA + NOT_WHITESPACE:
    c = chr(cp)
    cases += [f"a{c}b", f"a {c}b", f"a{c} b", f"{c}{c}x", f"x{c}{c}", f"x {c}", f"  {c}  y",
              f"{c}\n", f"1{c}2", f"!{c}!"]
# Special-token text: parsed as a token with special parsing on, for every kind
# the vocabularies have (control, unknown), next to text and spaces.
cases += ["<unk>", "a<unk>b", " <unk> ", "<s>x", "x</s>", "<s><unk></s>", "<|begin_of_text|>hi",
          "hi<|eot_id|>", "<|im_start|>user\nhi<|im_end|>", "<|endoftext|>", "<|im_start", "<unk",
          # Qwen 3's added tokens that are not marked special: <|...|> ones are control
          # (converter rule), the others user-defined (always split out).
          "<|fim_prefix|>x<|fim_suffix|>y<|fim_middle|>", "a<tool_call>b</tool_call>",
          "<think>hmm</think> ok", "<|box_start|>", "x<|vision_pad|>"]
# Plain text for reference.
cases += ["Hello world, 123 4567", "  leading spaces", "tabs\tand\nnewlines\r\n",
          "naïve café — “quotes”", "日本語のテキスト", "한국어 텍스트", "emoji 🙂👍🏽",
          "I'll've it's", "x = f(y) + 12345678"]

seen, unique = set(), []
for s in cases:
    if s not in seen:
        seen.add(s)
        unique.append(s)
root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
path = os.path.join(root, "tests", "data", "real_vocab_cases.json")
with open(path, "w", encoding="utf-8") as f:
    json.dump({"cases": unique}, f, ensure_ascii=True, indent=0)
    f.write("\n")
print(f"{len(unique)} cases -> {path}")
