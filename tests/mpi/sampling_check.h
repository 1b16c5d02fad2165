#pragma once
// The sampled-exactness check shared by the MPI check programs: per-position
// token histograms of seeded generations, compared position by position with
// the two-sample chi-square of stats_helpers.h.
#include <cstdio>
#include <map>
#include <string>
#include <vector>

#include "decode/strategy.h"
#include "stats_helpers.h"

namespace parspec::testing_support {

using PositionHistograms = std::vector<std::map<int32_t, int64_t>>;

// Histograms of the first three generated tokens of `runs` generations of
// `prompt`, seeded 1000003·r + 17.
inline PositionHistograms sampled_histograms(Strategy& strategy, int runs,
                                             const SamplingParams& params,
                                             const std::vector<int32_t>& prompt) {
  PositionHistograms hist(3);
  GenerationRequest req;
  req.prompt = prompt;
  req.n_predict = 3;
  req.sampling = params;
  for (int r = 0; r < runs; ++r) {
    req.sampling.seed = 1000003ull * r + 17;
    const auto tokens = strategy.generate(req).tokens;
    for (size_t i = 0; i < tokens.size() && i < 3; ++i) ++hist[i][tokens[i]];
  }
  return hist;
}

// Prints each position's chi-square on stderr and returns how many reject.
inline int chi_square_rejections(const PositionHistograms& got, const PositionHistograms& reference,
                                 const std::string& label) {
  int rejected = 0;
  for (size_t pos = 0; pos < got.size(); ++pos) {
    const ChiSquare r = chi_square_two_sample(got[pos], reference[pos]);
    std::fprintf(stderr, "sampling %s position %zu: chi-square %.1f, %d df%s\n", label.c_str(), pos,
                 r.statistic, r.df, r.rejects() ? ": REJECTED" : "");
    rejected += r.rejects() ? 1 : 0;
  }
  return rejected;
}

}  // namespace parspec::testing_support
