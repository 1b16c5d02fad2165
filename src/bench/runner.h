#pragma once
// The benchmark's runs: strategies made from `--strategies` entries, prompt
// sets tokenized, and every prompt run by every strategy, interleaved so
// that a noisy machine slows them all alike, with greedy outputs checked
// against ar's. Nothing here prints: the caller gets events and results.
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "bench/prompt_sets.h"
#include "bench/results.h"
#include "decode/strategy.h"
#include "tokenizer/tokenizer.h"

namespace parspec {

// An entry of --strategies is NAME, NAME:G, G setting the option the
// strategy names for variants (sd: γ, pearl: the window), so that several
// values are compared in one run (sd:2,sd:3,...), or NAME:<letter><value>...
// (a tree shape: "dyntree:d3c2w4"; see parse_strategy_spec). Returns {NAME, G
// or 0}; throws Error for an unknown name or a bad variant.
std::pair<std::string, int> parse_strategy_entry(const std::string& entry);

struct TokenizedSet {
  PromptSet set;
  std::vector<std::vector<int32_t>> prompts;
};

// Tokenizes every prompt (sets named "chat" through the model's chat template,
// `chat_template` naming another; without a usable template the raw text is
// used and a line in *notes says so). Throws Error for a prompt without tokens
// or one that leaves no room for n_predict tokens in n_ctx. Returns the name
// of the template used ("" if none).
std::string tokenize_sets(std::vector<TokenizedSet>& sets, const Tokenizer& tokenizer,
                          const GgufFile& gguf, const std::string& chat_template, int n_predict,
                          int n_ctx, std::vector<std::string>* notes);

struct BenchPlan {
  std::vector<std::string> labels;                    // as given: "sd:2"
  std::vector<std::unique_ptr<Strategy>> strategies;  // one per label
  size_t reference = 0;                               // index of ar
  int n_predict = 128;
  int repeat = 1;
  int warmup = 0;     // tokens of the untimed warm-up on the first prompt
  uint64_t seed = 0;  // the k-th prompt run uses seed + k
  SamplingParams sampling;
  std::function<bool(int32_t)> is_stop;  // may be empty
  bool check_exact = false;              // compare outputs with the reference's
};

struct BenchEvents {
  // Before a run: prompt runs done + 1, the set, the pass, the strategy's label.
  std::function<void(int, const std::string&, int, const std::string&)> on_run;
  std::function<void(const std::string&, const GenerationStats&)> on_result;
  std::function<void(const Mismatch&)> on_mismatch;
  // Before an error from a strategy is thrown on.
  std::function<void()> on_error;
};

struct BenchOutcome {
  std::vector<BenchRun> runs;
  std::vector<Mismatch> mismatches;
};

BenchOutcome run_bench(BenchPlan& plan, const std::vector<TokenizedSet>& sets,
                       const BenchEvents& events);

}  // namespace parspec
