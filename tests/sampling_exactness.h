#pragma once
// Sampled output against a reference strategy: histograms of the first tokens
// over many seeded runs, compared by a two-sample chi-square test.
#include <gtest/gtest.h>

#include <functional>
#include <map>
#include <string>
#include <vector>

#include "decode/strategy.h"
#include "stats_helpers.h"
#include "strategy_variants.h"

namespace parspec::testing_support {

// Histograms of the tokens at positions 0..2 over `runs` seeds.
inline std::vector<std::map<int32_t, int64_t>> sample_histograms(const StrategyConfig& config,
                                                                 int runs,
                                                                 const SamplingParams& params) {
  auto strategy = make_strategy(config);
  std::vector<std::map<int32_t, int64_t>> hist(3);
  GenerationRequest req;
  req.prompt = {256, 84, 104};
  req.n_predict = 3;
  req.sampling = params;
  for (int r = 0; r < runs; ++r) {
    req.sampling.seed = 1000003ull * r + 17;
    const auto tokens = strategy->generate(req).tokens;
    for (size_t i = 0; i < tokens.size() && i < 3; ++i) ++hist[i][tokens[i]];
  }
  return hist;
}

// Whether every position's histograms may come from one distribution; `why` says where not.
inline bool same_distribution(const std::vector<std::map<int32_t, int64_t>>& a,
                              const std::vector<std::map<int32_t, int64_t>>& b, std::string* why) {
  for (size_t pos = 0; pos < a.size(); ++pos) {
    const auto r = chi_square_two_sample(a[pos], b[pos]);
    if (r.rejects()) {
      *why = "position " + std::to_string(pos) + ": chi-square " + std::to_string(r.statistic) +
             " with " + std::to_string(r.df) + " df";
      return false;
    }
  }
  return true;
}

// Every registered strategy's histograms over `runs` seeds against those of
// `reference` on the same models; `place` puts each strategy's sides where
// the reference's run (nothing: the CPU). Returns the reference's histograms.
inline std::vector<std::map<int32_t, int64_t>> expect_every_strategy_keeps_the_distribution(
    const StrategyConfig& reference, int runs, const SamplingParams& params,
    const std::function<void(StrategyConfig&)>& place = {}) {
  const auto expected = sample_histograms(reference, runs, params);
  for (StrategyConfig c : strategy_variants()) {
    c.target = reference.target;
    c.draft = reference.draft;
    c.target_worker = reference.target_worker;
    c.ctx_size = reference.ctx_size;
    if (place) place(c);
    std::string why;
    EXPECT_TRUE(same_distribution(sample_histograms(c, runs, params), expected, &why))
        << describe(c) << ": " << why;
  }
  return expected;
}

}  // namespace parspec::testing_support
