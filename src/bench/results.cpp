// Summing benchmark runs per strategy and prompt set.
#include "bench/results.h"

#include <algorithm>
#include <map>

#include "decode/registry.h"

namespace parspec {

std::vector<double> BenchResult::position_acceptance() const {
  const PositionAcceptance& positions = total.per_position;
  std::vector<double> rates(positions.proposed.size(), 0.0);
  for (size_t i = 0; i < rates.size(); ++i) {
    const int64_t hits = i < positions.accepted.size() ? positions.accepted[i] : 0;
    if (positions.proposed[i] > 0) rates[i] = static_cast<double>(hits) / positions.proposed[i];
  }
  return rates;
}

namespace {

void add_run(BenchResult& r, const BenchRun& run) {
  ++r.runs;
  r.total += run.stats;
  if (run.checked) {
    ++r.checked;
    if (!run.matches_ar) ++r.mismatches;
  }
}

}  // namespace

std::vector<BenchResult> aggregate_runs(std::span<const BenchRun> runs,
                                        std::span<const std::string> strategies,
                                        std::span<const std::string> sets) {
  std::vector<std::string> groups(sets.begin(), sets.end());
  if (sets.size() > 1) groups.emplace_back(kAllSets);
  std::map<std::pair<std::string, std::string>, BenchResult> by_key;
  for (const BenchRun& run : runs) {
    if (std::find(strategies.begin(), strategies.end(), run.strategy) == strategies.end()) continue;
    if (std::find(sets.begin(), sets.end(), run.prompt_set) == sets.end()) continue;
    add_run(by_key[{run.strategy, run.prompt_set}], run);
    if (sets.size() > 1) add_run(by_key[{run.strategy, std::string(kAllSets)}], run);
  }
  std::vector<BenchResult> results;
  for (const std::string& group : groups) {
    const auto ar = by_key.find({reference_strategy_name(), group});
    const double ar_speed = ar == by_key.end() ? 0.0 : ar->second.tok_per_s();
    for (const std::string& strategy : strategies) {
      const auto it = by_key.find({strategy, group});
      if (it == by_key.end()) continue;
      BenchResult r = it->second;
      r.strategy = strategy;
      r.prompt_set = group;
      r.speedup = ar_speed > 0 ? r.tok_per_s() / ar_speed : 0.0;
      results.push_back(std::move(r));
    }
  }
  return results;
}

std::optional<size_t> first_difference(std::span<const int32_t> output,
                                       std::span<const int32_t> reference) {
  const size_t n = std::min(output.size(), reference.size());
  for (size_t i = 0; i < n; ++i)
    if (output[i] != reference[i]) return i;
  if (output.size() != reference.size()) return n;
  return std::nullopt;
}

}  // namespace parspec
