#pragma once
// The benchmark harness's bookkeeping, kept free of models and clocks so it can
// be tested on hand-made numbers: prompt-set loading, aggregation of per-run
// statistics per strategy and prompt set, and the report writers (terminal
// table, JSON, Markdown, SVG bar chart). Metric names and definitions follow
// bench/README.md.
#include <cstdint>
#include <nlohmann/json.hpp>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "decode/registry.h"
#include "decode/strategy.h"

namespace parspec {

// A named list of prompts read from a JSON Lines file.
struct PromptSet {
  std::string name;  // the file's stem: code, math, prose, chat, or a user file's stem
  std::string path;
  std::vector<std::string> prompts;
  // Prompts are user turns to wrap in the model's chat template: sets named "chat".
  bool chat = false;
};

// One JSON object per non-blank line with a non-empty string "prompt" (other
// keys are ignored). Throws Error naming `source` and the 1-based line number
// for a line that is not JSON, not an object, or lacks the prompt, and for a
// text without any prompt.
std::vector<std::string> parse_prompt_lines(std::string_view text, const std::string& source);

// `spec` is a set name (read from <prompts_dir>/<spec>.jsonl) or a path to a
// .jsonl file. Throws Error for a missing file (naming what was looked for)
// or bad content.
PromptSet load_prompt_set(const std::string& spec, const std::string& prompts_dir);

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
  int64_t n_prompt = 0;
  int64_t n_gen = 0;
  double t_prompt_ms = 0;
  double t_gen_ms = 0;
  int64_t drafted = 0;
  int64_t accepted = 0;
  int64_t verify_steps = 0;
  int64_t target_forwards = 0;
  int64_t draft_forwards = 0;
  double t_draft_ms_total = 0;
  double t_verify_ms_total = 0;
  std::vector<int64_t> position_proposed, position_accepted;
  int checked = 0;     // runs compared with ar
  int mismatches = 0;  // of those, runs whose output differed
  double speedup = 0;  // tok_per_s / ar's tok_per_s on the same set; 0 without an ar row

  double tok_per_s() const { return t_gen_ms > 0 ? n_gen * 1000.0 / t_gen_ms : 0; }
  double prompt_tok_per_s() const { return t_prompt_ms > 0 ? n_prompt * 1000.0 / t_prompt_ms : 0; }
  double tau() const { return verify_steps > 0 ? static_cast<double>(n_gen) / verify_steps : 0; }
  double alpha() const { return drafted > 0 ? static_cast<double>(accepted) / drafted : 0; }
  double t_draft_ms() const { return verify_steps > 0 ? t_draft_ms_total / verify_steps : 0; }
  double t_verify_ms() const { return verify_steps > 0 ? t_verify_ms_total / verify_steps : 0; }
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

struct MachineInfo {
  std::string cpu_model;
  int cores = 0;             // cores this process may run on
  int64_t memory_bytes = 0;  // MemTotal
  int threads = 0;           // target threads used
  int threads_draft = 0;     // draft threads used
};

// "model name" of the first processor in /proc/cpuinfo text ("" if absent).
std::string parse_cpu_model(std::string_view cpuinfo);
// MemTotal of /proc/meminfo text in bytes (0 if absent).
int64_t parse_mem_total(std::string_view meminfo);
// This machine (threads left at 0 for the caller to fill).
MachineInfo read_machine_info();

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
