#include "tools/llama_flags.h"

#include <cstring>

#include "tools/args.h"

namespace parspec {

namespace {

struct Counterpart {
  const char* command;  // "*": every command with this flag
  const char* flag;     // one of the parspec flag's names
  const char* text;
};

constexpr const char* kSame = "same as llama.cpp";

// Checked in order; the first entry whose command and flag match wins.
const Counterpart kCounterparts[] = {
    {"*", "-m", kSame},
    {"*", "-p", kSame},
    {"generate", "-f", "same as llama.cpp ('-' reads stdin, which llama.cpp does not)"},
    {"perplexity", "-f", "same as llama.cpp ('-' reads stdin)"},
    {"tokenize", "-f",
     "same as llama-tokenize ('-' reads stdin, like its --stdin); the file is taken as it is, "
     "llama-tokenize also processes escapes in it"},
    {"serve", "-n", "like llama-server's -n: max_tokens of a request that gives none (chat)"},
    {"serve", "-c",
     "different on purpose: the most tokens of one request; llama-server divides -c among its "
     "slots"},
    {"serve", "-b", "like llama-server's -b: the most tokens of one (batched) forward"},
    {"serve", "-np", "same as llama-server's -np (slots: requests decoded together)"},
    {"serve", "--host", "same as llama-server"},
    {"serve", "--port", "same as llama-server (0 = any free port, printed)"},
    {"serve", "--api-key", "same as llama-server"},
    {"serve", "-a", "same as llama-server's --alias"},
    {"serve", "--request-timeout",
     "llama-server's -to/--timeout bounds each read and write (600 s); this is one deadline "
     "for a whole request"},
    {"generate", "-n", kSame},
    {"bench", "-n",
     "same meaning as llama.cpp's -n; -1 is not accepted (a benchmark needs a "
     "bounded length)"},
    {"generate", "-c",
     "same as llama.cpp (0 = the model's training context); the default is 4096, not the "
     "training context"},
    {"bench", "-c", "same as llama.cpp's -c"},
    {"perplexity", "-c", "same as llama-perplexity's -c (tokens per chunk); default 512 as there"},
    {"bench-forward", "-t", "same as llama-bench's -t (a list of thread counts)"},
    {"bench-forward", "-b",
     "like llama-bench's -b/-p, sizes to measure; here the tokens of one verification forward"},
    {"bench-forward", "-r", "same as llama-bench's -r (repetitions)"},
    {"bench-forward", "-m", "same as llama-bench's -m"},
    {"*", "-t", "same as llama.cpp; the default is every core this process may use"},
    {"bench", "--temp",
     "different on purpose: default 0 (greedy), so outputs are checked against ar"},
    {"*", "--temp", "same as llama.cpp; the default is 0.8 as in llama.cpp"},
    {"*", "--top-k", kSame},
    {"*", "--top-p", kSame},
    {"*", "--min-p", kSame},
    {"generate", "--seed", kSame},
    {"bench", "--seed", "different on purpose: the k-th prompt run uses seed + k"},
    {"*", "-e", kSame},
    {"*", "--no-escape", kSame},
    {"generate", "-r", "same as llama.cpp: generation stops once the text ends with the string"},
    {"*", "--chat",
     "parspec only: one user turn in the model's chat template, then generation as usual"},
    {"generate", "-cnv",
     "same as llama-cli's -cnv (-i there is the older interactive mode): one user turn per line "
     "of stdin, /exit or end of input ends it"},
    {"generate", "-sys", "same as llama-cli's -sys (also applies to --chat)"},
    {"*", "--chat-template", "same flag; only the built-in names llama3 and chatml"},
    {"*", "--ignore-eos", kSame},
    {"*", "--json", "parspec only"},
    {"*", "--strategy", "parspec only (llama-speculative is sd; llama-lookahead another tool)"},
    {"*", "-md", "same as llama-speculative"},
    {"*", "-td", "same as llama-speculative; 0 = share the target's threads"},
    {"*", "--draft-max", "same as llama-speculative (--draft, --draft-n there too)"},
    {"*", "--draft-min", kSame},
    {"*", "--draft-p-min", "same flag; default 0 (llama.cpp: 0.8 for llama-speculative)"},
    {"*", "--allow-draft-mismatch",
     "parspec only: llama.cpp has no override for its vocabulary check"},
    {"generate", "-ngl", "same meaning where a GPU is used (all layers or none)"},
    {"bench", "-ngl", "same meaning where a GPU is used (all layers or none)"},
    {"*", "-ngl", "accepted and ignored (this command runs on the CPU)"},
    {"generate", "-ngld", "same meaning where a GPU is used (all layers or none)"},
    {"bench", "-ngld", "same meaning where a GPU is used (all layers or none)"},
    {"*", "-ngld", "accepted and ignored (this command runs on the CPU)"},
    {"*", "-dev", "same flag; devices cpu (none), cuda, cudaN (llama.cpp: CUDA0, ...)"},
    {"*", "-fa", "accepted and ignored"},
    {"*", "-sm", "accepted and ignored"},
    {"*", "-mg", "accepted and ignored"},
    {"*", "-ts", "accepted and ignored"},
    {"*", "-nkvo", "accepted and ignored"},
    {"*", "--mlock", "accepted and ignored (models are read into memory at load)"},
    {"*", "--no-mmap", "accepted and ignored (models are read into memory already)"},
    {"*", "-b", "accepted and ignored (batches are sized by the strategy)"},
    {"*", "-ub", "accepted and ignored (batches are sized by the strategy)"},
    {"perplexity", "--chunks", kSame},
    {"tokenize", "--ids", kSame},
    {"tokenize", "--no-bos", kSame},
    {"tokenize", "--no-parse-special", kSame},
    {"tokenize", "--show-count", kSame},
    {"quantize", "IN.gguf OUT.gguf TYPE",
     "same order as llama-quantize; types by name only (f32, f16, bf16, q8_0, q4_0, q4_k, q6_k)"},
};

struct Unsupported {
  const char* flags;
  const char* tool;
  const char* why;
};

const Unsupported kUnsupported[] = {
    {"`-if`, `--in-prefix`, `--in-suffix`, `--multiline-input`", "llama-cli",
     "the conversation mode (-cnv) reads one line per turn and has no prefixes"},
    {"`--repeat-penalty`, `--presence-penalty`, `--frequency-penalty`", "llama-cli",
     "penalties change the distribution the draft is verified against; not implemented"},
    {"`--grammar`, `--json-schema`", "llama-cli", "constrained sampling is not implemented"},
    {"`--lora`, `--control-vector`", "llama-cli", "adapters are not implemented"},
    {"`--rope-scaling`, `--rope-freq-base`", "llama-cli",
     "RoPE settings are read from the GGUF file only"},
    {"`-cd`, `--ctx-size-draft`", "llama-speculative", "the draft shares the target's -c"},
    {"`--draft-p-split`", "llama-speculative", "trees are built by --tree-* instead"},
    {"`-ctk`, `-ctv`", "llama-cli", "the KV cache is always F32"},
    {"`--kl-divergence`, `--hellaswag`, `--winogrande`", "llama-perplexity",
     "only perplexity is implemented"},
    {"`--imatrix`, `--allow-requantize`, `--pure`", "llama-quantize",
     "no importance matrix; every 2-D weight gets the one type asked for"},
};

}  // namespace

void add_ignored_gpu_flags(ArgParser& args, bool batch_size, bool layers) {
  const char* cpu = layers ? "this command runs on the CPU"
                           : "parspec has no such setting (one GPU, its own attention kernels, the "
                             "KV cache beside the model)";
  if (layers) {
    args.ignored("-ngl,--gpu-layers,--n-gpu-layers", "N", cpu);
    args.ignored("-ngld,--gpu-layers-draft,--n-gpu-layers-draft", "N", cpu);
  }
  args.ignored("-fa,--flash-attn", "", cpu);
  args.ignored("-sm,--split-mode", "MODE", cpu);
  args.ignored("-mg,--main-gpu", "INDEX", cpu);
  args.ignored("-ts,--tensor-split", "LIST", cpu);
  args.ignored("-nkvo,--no-kv-offload", "", cpu);
  args.ignored("--mlock", "", "models are read into memory (huge pages from 64 MiB) at load");
  args.ignored("--no-mmap", "", "models are read into memory already (PARSPEC_MMAP=1 maps them)");
  if (batch_size)
    args.ignored("-b,--batch-size", "N", "batches are sized by the decoding strategy");
  args.ignored("-ub,--ubatch-size", "N", "batches are sized by the decoding strategy");
}

std::string llama_cpp_counterpart(const std::string& command,
                                  const std::vector<std::string>& names) {
  for (const Counterpart& c : kCounterparts) {
    if (std::strcmp(c.command, "*") != 0 && command != c.command) continue;
    for (const std::string& n : names)
      if (n == c.flag) return c.text;
  }
  return "parspec only";
}

std::string llama_cpp_unsupported_markdown() {
  std::string out;
  for (const Unsupported& u : kUnsupported)
    out += std::string("| ") + u.flags + " | " + u.tool + " | " + u.why + " |\n";
  return out;
}

}  // namespace parspec
