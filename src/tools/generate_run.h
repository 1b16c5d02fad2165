#pragma once
// What `generate` and `simulate` share: generate's flags, the model and
// prompt they load, and the run that streams the text (or prints JSON) and
// the speed.
#include <cstdint>
#include <functional>
#include <memory>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

#include "decode/strategy.h"
#include "model/model.h"
#include "sample/sampler.h"
#include "tokenizer/tokenizer.h"
#include "tools/args.h"
#include "tools/strategy_options.h"

namespace parspec {

// Every flag of `generate`, with its default.
struct GenerateArgs {
  std::string model_path, prompt, prompt_file, chat_template, strategy_name, system_prompt;
  StrategyOptions strategy_options;
  int n_predict = 128, n_threads = default_thread_count(), n_ctx = 4096;
  SamplingParams sampling;
  std::optional<uint64_t> seed;  // none: a random seed
  bool json = false, chat = false, ignore_eos = false, escape = true, no_escape = false;
  bool conversation = false;
  std::vector<std::string> stop_strings;
};

void add_generate_options(ArgParser& args, GenerateArgs& a);

// Once the flags are parsed: the model, its tokenizer, the context and the prompt's tokens.
struct PreparedRun {
  std::shared_ptr<const Model> model;
  std::unique_ptr<Tokenizer> tokenizer;
  int n_ctx = 0, n_predict = 0;
  std::string prompt;
  std::vector<int32_t> prompt_tokens;
};
// Checks the prompt and sampling flags, loads the model and tokenizes the
// prompt (sets a.sampling.seed).
PreparedRun prepare_run(GenerateArgs& a, const ArgParser& args);

// Runs the strategy on the prompt, streaming the text (or printing JSON at the
// end). `simulated` (simulate): the cluster's report for --json; the times are
// then the cluster's.
void generate_and_print(Strategy& strategy, const GenerateArgs& a, const std::string& prompt,
                        std::vector<int32_t> prompt_tokens, int n_predict,
                        const Tokenizer& tokenizer,
                        const std::function<nlohmann::json()>& simulated = {});

}  // namespace parspec
