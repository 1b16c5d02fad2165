#pragma once
// A benchmark's runs summed per strategy and prompt set, and the exactness
// check against ar's outputs. Kept free of models and clocks so it can be
// tested on hand-made numbers. Metric names and definitions follow
// bench/README.md.
#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "decode/generation_stats.h"

namespace parspec {

// One generation: one strategy, one prompt, one repeat.
struct BenchRun {
  std::string strategy;
  std::string prompt_set;
  int prompt_index = 0;
  int repeat = 0;
  GenerationStats stats;
  bool checked = false;    // output compared with ar's on the same prompt (greedy runs)
  bool matches_ar = true;  // meaningful when checked
};

// Runs summed per strategy and prompt set; rates are ratios of the sums
// (total generated tokens / total generation time, and so on).
struct BenchResult {
  std::string strategy;
  std::string prompt_set;  // kAllSets for the row over every set
  int runs = 0;
  GenerationStats total;  // the runs' statistics summed (GenerationStats::operator+=)
  int checked = 0;        // runs compared with ar
  int mismatches = 0;     // of those, runs whose output differed
  double speedup = 0;     // tok_per_s / ar's tok_per_s on the same set; 0 without an ar row

  double tok_per_s() const { return total.tok_per_s(); }
  double prompt_tok_per_s() const { return total.prompt_tok_per_s(); }
  double tau() const { return total.tau(); }
  double alpha() const { return total.alpha(); }
  // Drafting and verification time per target verification step.
  double t_draft_ms() const {
    return total.verify_steps > 0 ? total.t_draft_ms / total.verify_steps : 0;
  }
  double t_verify_ms() const {
    return total.verify_steps > 0 ? total.t_verify_ms / total.verify_steps : 0;
  }
  // accepted / proposed at each draft position (0 where nothing was proposed).
  std::vector<double> position_acceptance() const;
};

inline constexpr std::string_view kAllSets = "all";

// One result per strategy and set, strategies in `strategies` order and sets
// in `sets` order, followed (when there are several sets) by one row per
// strategy over all of them. Pairs without runs are left out. Speedups are
// against the reference strategy's row (reference_strategy_name()) of the same set.
std::vector<BenchResult> aggregate_runs(std::span<const BenchRun> runs,
                                        std::span<const std::string> strategies,
                                        std::span<const std::string> sets);

// Index of the first token where `output` and `reference` differ (a length
// difference counts at the shorter length); nullopt when they are equal.
std::optional<size_t> first_difference(std::span<const int32_t> output,
                                       std::span<const int32_t> reference);

struct Mismatch {
  std::string strategy;
  std::string prompt_set;
  int prompt_index = 0;
  int repeat = 0;
  size_t position = 0;  // first differing generated token
};

}  // namespace parspec
