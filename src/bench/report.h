#pragma once
// The benchmark report and its writers: terminal table, JSON, Markdown, SVG
// bar chart. Metric names and definitions follow bench/README.md.
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "bench/environment.h"
#include "bench/results.h"

namespace parspec {

struct BenchReport {
  MachineInfo machine;
  nlohmann::ordered_json config = nlohmann::ordered_json::object();
  std::vector<BenchResult> results;
  std::vector<Mismatch> mismatches;
  bool exactness_checked = false;  // greedy runs were compared with ar
};

// Fixed-width table for the terminal, then per-position acceptance per strategy.
std::string report_table(const BenchReport& report);
// {"machine": {...}, "config": {...}, "results": [{...}, ...], "mismatches": [...]}
nlohmann::ordered_json report_json(const BenchReport& report);
// A GitHub-flavoured Markdown table, one row per result.
std::string report_markdown(const BenchReport& report);
// Grouped bar chart of speedup: one group per prompt set, one bar per strategy.
std::string report_svg(const BenchReport& report);

}  // namespace parspec
