"""Cross-checks the zoo against the engine binary (parspec):

1. tokenization: `parspec tokenize --ids` of held-out documents of every domain
   equals the Python tokenizer's ids (BOS included);
2. greedy generation: `parspec generate --temp 0` continues prompts with the
   same tokens as the PyTorch reference forward of the same GGUF file (the
   first divergence is reported; tiny float differences can flip a near-tie);
3. where a llama.cpp build is available (--llama-tokenize, or $LLAMA_CPP_DIR with
   build/bin/llama-tokenize or bin/llama-tokenize under it): llama.cpp's
   `llama-tokenize --ids` of the same documents equals them too, i.e. the file's
   `tokenizer.ggml.pre` names, for llama.cpp, the pattern the zoo was trained with.

  check_engine.py --parspec build/parspec --model models/target.gguf --corpus out/zoo/corpus
"""

import argparse
import json
import os
import subprocess
import sys
import tempfile

import torch

import bpe
from evaluate import bench_prompts
from reference import greedy, load_gguf_model
from train import DOMAINS


def engine_tokenize(parspec, model, text):
    with tempfile.NamedTemporaryFile("w", suffix=".txt", delete=False, encoding="utf-8") as f:
        f.write(text)
        path = f.name
    try:
        out = subprocess.run([parspec, "tokenize", "-m", model, "-f", path, "--ids"], check=True,
                             capture_output=True, text=True).stdout
    finally:
        os.unlink(path)
    return json.loads(out.strip().splitlines()[-1])


def find_llama_tokenize(explicit):
    if explicit:
        return explicit
    root = os.environ.get("LLAMA_CPP_DIR")
    if not root:
        return None
    for rel in ("build/bin/llama-tokenize", "bin/llama-tokenize", "llama-tokenize"):
        path = os.path.join(root, rel)
        if os.access(path, os.X_OK):
            return path
    return None


def llama_tokenize(binary, model, text):
    with tempfile.NamedTemporaryFile("w", suffix=".txt", delete=False, encoding="utf-8") as f:
        f.write(text)
        path = f.name
    try:
        # --no-escape: the text as it is (llama-tokenize would turn a backslash-n into a newline)
        out = subprocess.run([binary, "-m", model, "-f", path, "--ids", "--no-escape", "--log-disable"],
                             check=True, capture_output=True, text=True).stdout
    finally:
        os.unlink(path)
    return json.loads(out.strip().splitlines()[-1])


def first_difference(a, b):
    """Index of the first differing token (the shorter length when one is a prefix of the other)."""
    return next((k for k, (x, y) in enumerate(zip(a, b)) if x != y), min(len(a), len(b)))


def engine_generate(parspec, model, prompt, n):
    out = subprocess.run([parspec, "generate", "-m", model, "-p", prompt, "-n", str(n), "--temp", "0", "--json", "-t", "1"],
                         check=True, capture_output=True, text=True).stdout
    return json.loads(out)["tokens"]


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--parspec", required=True)
    ap.add_argument("--model", required=True)
    ap.add_argument("--corpus", required=True, help="directory with <domain>.heldout.jsonl")
    ap.add_argument("--docs", type=int, default=8, help="held-out documents per domain")
    ap.add_argument("--chars", type=int, default=3000, help="characters of each document")
    ap.add_argument("--prompts-dir", default="bench/prompts")
    ap.add_argument("--n-gen", type=int, default=48)
    ap.add_argument("--llama-tokenize", help="llama.cpp's llama-tokenize binary (default: from $LLAMA_CPP_DIR)")
    ap.add_argument("--skip-generate", action="store_true", help="check tokenization only")
    args = ap.parse_args()
    llama = find_llama_tokenize(args.llama_tokenize)
    print("llama.cpp tokenizer:", llama or "not available (set LLAMA_CPP_DIR)")
    torch.set_num_threads(1)
    model, tok, _ = load_gguf_model(args.model)
    failures = 0
    for domain in DOMAINS:
        docs = bpe.read_jsonl(os.path.join(args.corpus, f"{domain}.heldout.jsonl"))
        picked = docs[::max(1, len(docs) // args.docs)][:args.docs]
        n_tok = n_same = n_llama_same = 0
        for doc in picked:
            text = doc["text"][:args.chars]
            ours = tok.encode(text, add_bos=True)
            if llama:
                theirs = llama_tokenize(llama, args.model, text)
                if ours == theirs:
                    n_llama_same += 1
                else:
                    failures += 1
                    i = first_difference(ours, theirs)
                    print(f"  {domain}: llama.cpp's tokenization differs at token {i}: python {ours[i:i + 5]} "
                          f"llama.cpp {theirs[i:i + 5]} near {tok.decode(ours[max(0, i - 3):i + 3])!r}")
            theirs = engine_tokenize(args.parspec, args.model, text)
            n_tok += len(ours)
            if ours == theirs:
                n_same += 1
            else:
                failures += 1
                i = first_difference(ours, theirs)
                print(f"  {domain}: tokenization differs at token {i}: python {ours[i:i + 5]} engine {theirs[i:i + 5]}"
                      f" near {tok.decode(ours[max(0, i - 3):i + 3])!r}")
        print(f"tokenize {domain}: {n_same}/{len(picked)} documents identical ({n_tok} tokens)"
              + (f"; llama.cpp: {n_llama_same}/{len(picked)} identical" if llama else ""))
    for domain, prompts in ({} if args.skip_generate else bench_prompts(args.prompts_dir)).items():
        for p in prompts[:4]:
            ours = greedy(model, tok.encode(p, add_bos=True), args.n_gen, stop=tok.eos)
            theirs = engine_generate(args.parspec, args.model, p, args.n_gen)
            status = "identical" if ours == theirs else f"first difference at token {first_difference(ours, theirs)}"
            print(f"generate {domain}: {len(ours)} tokens, {status}: {tok.decode(ours)[:60]!r}")
    print("tokenization mismatches:", failures)
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
