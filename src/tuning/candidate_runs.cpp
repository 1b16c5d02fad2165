// Running candidates for real: the calibration prompts and greedy runs of
// candidates interleaved prompt by prompt.
#include <algorithm>
#include <numeric>

#include "core/error.h"
#include "decode/registry.h"
#include "tokenizer/tokenizer.h"
#include "tuning/cost_model.h"

namespace parspec {

GenerationRequest greedy_request(std::span<const int32_t> prompt, int n_predict) {
  GenerationRequest request;
  request.prompt.assign(prompt.begin(), prompt.end());
  request.n_predict = n_predict;
  request.sampling.temp = 0;
  return request;
}

std::vector<std::vector<int32_t>> calibration_prompts(const Model& target) {
  // The last two prompts of each bundled set (bench/prompts/*.jsonl):
  // benchmarks that take the first prompts of each set do not tune on what
  // they measure. Two per set: acceptance varies by prompt more than timing
  // does, so the check (decide_check) needs about ten prompts to resolve
  // differences of 5–10%, and the acceptance rates gain a sample twice as large.
  static const char* const kTexts[] = {
      "def gcd(a, b):\n    \"\"\"Return the greatest common divisor of a and b.\"\"\"\n    while "
      "b:\n",
      "Q: Olivia reads 25 pages on Saturday and twice as many on Sunday. How many pages does she "
      "read over the weekend?\nA:",
      "Whenever you pass the program on to someone else, that person also receives",
      "[Unit]\nDescription=Load the default model into the page cache\nDefaultDependencies=no\n"
      "Conflicts=shutdown.target\nBefore=sysinit.target shutdown.target\n\n[Service]\n"
      "Type=oneshot\nRemainAfterExit=yes\n",
      "Where does Debian keep the documentation of installed packages?",
      "    for i, line in enumerate(lines):\n        if not line.strip():\n            continue\n",
      "Q: A tank holds 250 litres of water. 95 litres are used in the morning and 60 litres in the "
      "evening. How much water is left?\nA:",
      "The examples directory contains several small programs that show how to",
      "# /etc/default/parspec\n# Options passed to the inference server by its service unit.\n\n",
      "What is an exception and how do I catch one?",
  };
  std::vector<std::vector<int32_t>> prompts;
  try {
    const auto tokenizer = Tokenizer::from_gguf(target.gguf());
    for (const char* text : kTexts) {
      std::vector<int32_t> tokens = tokenizer->encode(text, true, false);
      if (!tokens.empty()) prompts.push_back(std::move(tokens));
    }
  } catch (const Error&) {
    prompts.clear();  // no usable tokenizer (e.g. a random test model)
  }
  if (prompts.empty()) {
    const int n_vocab = target.config().n_vocab;
    for (int p = 0; p < 10; ++p) {
      std::vector<int32_t> tokens;
      for (int i = 0; i < 12; ++i) tokens.push_back((p * 131 + i * 17 + 3) % n_vocab);
      prompts.push_back(std::move(tokens));
    }
  }
  return prompts;
}

double CandidateRuns::tok_per_s(size_t k) const {
  const double n = std::accumulate(tokens[k].begin(), tokens[k].end(), 0.0);
  const double t = std::accumulate(ms[k].begin(), ms[k].end(), 0.0);
  return t > 0 ? n * 1000.0 / t : 0;
}

std::vector<double> measure_candidates(const StrategyConfig& base,
                                       const std::vector<Candidate>& candidates,
                                       const std::vector<std::vector<int32_t>>& prompts,
                                       int n_predict) {
  const CandidateRuns runs = run_candidates(base, candidates, prompts, n_predict);
  std::vector<double> out;
  for (size_t k = 0; k < candidates.size(); ++k) out.push_back(runs.tok_per_s(k));
  return out;
}

CandidateRuns run_candidates(const StrategyConfig& base, const std::vector<Candidate>& candidates,
                             const std::vector<std::vector<int32_t>>& prompts, int n_predict) {
  StrategyConfig config = base;
  int longest = 0;
  for (const auto& p : prompts) longest = std::max(longest, static_cast<int>(p.size()));
  config.ctx_size = longest + n_predict + kCandidateSpecRoom;
  std::vector<std::unique_ptr<Strategy>> strategies;
  for (const Candidate& c : candidates)
    strategies.push_back(make_strategy(config_for_candidate(config, c)));
  CandidateRuns runs;
  runs.ms.assign(candidates.size(), std::vector<double>(prompts.size(), 0));
  runs.tokens = runs.ms;
  for (size_t p = 0; p < prompts.size(); ++p) {
    for (size_t i = 0; i < strategies.size(); ++i) {
      const size_t k = (i + p) % strategies.size();  // rotated: no one always runs first
      const GenerationRequest request = greedy_request(prompts[p], n_predict);
      const GenerationStats st = strategies[k]->generate(request).stats;
      runs.tokens[k][p] = st.n_gen;
      runs.ms[k][p] = st.t_gen_ms;
    }
  }
  return runs;
}

}  // namespace parspec
