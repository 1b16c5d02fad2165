#pragma once
// The strategy registry: every strategy's file describes itself (name, whether
// it needs a draft model, its options with their flags, defaults and JSON
// keys, what the tools, the server, the MPI runtime and the cost model need
// to know of it, its factory) in a StrategyInfo, and the table in
// strategies/registry.cpp lists them. Nothing outside src/strategies names a
// strategy: it asks the registry; docs/development.md has the checklist for adding one.
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "decode/strategy.h"

namespace parspec {

struct StrategyOption {
  std::string flag;        // "--tree-depth"
  std::string json_key;    // "tree_depth": the key in bench's JSON and in StrategyConfig::options
  std::string value_name;  // "D"; empty for a flag without value (a bool)
  std::string help;        // what it does, without naming the strategy
  // Reads and writes the value in a config; a default StrategyConfig holds the default.
  std::function<OptionValue(const StrategyConfig&)> get;
  std::function<void(StrategyConfig&, const OptionValue&)> set;
};

// An option kept in a typed field of StrategyConfig.
StrategyOption option_field(std::string flag, std::string json_key, std::string value_name,
                            std::string help, int StrategyConfig::*field);
StrategyOption option_field(std::string flag, std::string json_key, std::string value_name,
                            std::string help, float StrategyConfig::*field);
StrategyOption option_flag(std::string flag, std::string json_key, std::string help,
                           bool StrategyConfig::*field);
// A flag that turns a StrategyConfig bool off (--no-...).
StrategyOption negated_flag(std::string flag, std::string json_key, std::string help,
                            bool StrategyConfig::*field);
// An option kept in StrategyConfig::options under its JSON key, for strategies
// that bring their own (read it back with option_value()).
StrategyOption option_entry(std::string flag, std::string json_key, std::string value_name,
                            std::string help, OptionValue default_value);
// The value of an option_entry() in `config`, its default when unset.
template <typename T>
T option_value(const StrategyConfig& config, const StrategyOption& option) {
  return std::get<T>(option.get(config));
}

// The places where the tools pick a strategy nobody named; each role belongs
// to exactly one strategy.
enum class StrategyRole {
  reference,                  // the output every strategy must reproduce; speedups are against it
  generate_plain,             // `generate` without a draft model
  generate_drafted,           // `generate` with a draft model
  generate_pipeline_plain,    // `generate` under mpirun without a draft model
  generate_pipeline_drafted,  // `generate` under mpirun with a draft model
  serve_plain,                // `serve` without a draft model
  serve_drafted,              // `serve` with a draft model
};

// What the cost model (tuning/cost_family.h) predicts and runs for a family
// of candidates; defined by the tuning layer, set by the strategy's file.
struct CostFamily;

struct StrategyInfo {
  std::string name;
  std::string summary;  // one line: what it is
  bool needs_draft = true;
  std::vector<StrategyOption> options;
  // The option bench's NAME:G variants set to G (empty: no variants).
  std::string variant_key;
  // Under mpirun the other ranks run this strategy's drafter (easyspec's
  // slots, StrategyConfig::make_group_executor) instead of a target pipeline;
  // every strategy of such a run keeps its target on rank 0.
  bool drafts_on_ranks = false;
  // Where the tools pick it when no strategy is named (most strategies: nowhere).
  std::vector<StrategyRole> roles{};
  // `parspec serve` runs it: every forward goes through the sides, so the
  // server can batch them across requests.
  bool served = false;
  // Drafts with a pool of drafters (--drafters) as well as with one draft model.
  bool takes_drafter_pool = false;
  // Under `serve`, steps are granted by the server's request scheduler
  // (StrategyConfig::schedule_step; the --sched-* flags).
  bool uses_request_scheduler = false;
  // Why it cannot run under mpirun at all (it measures on a target in this
  // process); empty: it can.
  std::string mpirun_refusal{};
  // Why `parspec simulate` cannot run it (it works on threads of its own or
  // times this machine, which a simulated cluster's virtual clock does not
  // follow); empty: it can.
  std::string simulation_refusal{};
  // The forms (NAME, NAME:G, a tree shape such as NAME:d3c2) `simulate --plan`
  // tries on a pipeline of `stages` target stages; empty: none.
  std::function<std::vector<std::string>(int stages)> plan_shapes{};
  // Its family in the cost model (`auto`, `parspec tune`); null: not tuned.
  std::shared_ptr<const CostFamily> cost{};
  std::function<std::unique_ptr<Strategy>(const StrategyConfig&)> make;

  bool has_role(StrategyRole role) const;
};

// Every strategy, in the order benchmarks list them.
const std::vector<StrategyInfo>& strategy_registry();
// Throws Error naming the known strategies for an unknown name.
const StrategyInfo& strategy_info(const std::string& name);
// The strategy that has `role`.
const StrategyInfo& strategy_for(StrategyRole role);
// The name of strategy_for(StrategyRole::reference).
const std::string& reference_strategy_name();
// "a, b and c": the names of the strategies `pick` selects, in registry order.
std::string strategy_names_where(const std::function<bool(const StrategyInfo&)>& pick);
// "ar, sd, ..." for messages and help texts.
std::string strategy_list();

// A strategy as bench's --strategies and `parspec tune` write it: NAME,
// NAME:G (G >= 1 sets the strategy's variant_key option: "sd:3") or
// NAME:<letter><value>... for a tree shape (d: tree_depth, c: tree_branch, w:
// tree_width, each where the strategy has that option: "dyntree:d3c2w4"), the
// form `parspec tune` names tree shapes in.
struct StrategySpec {
  std::string name;
  std::vector<std::pair<std::string, int>> settings;  // option JSON key, value
};
// Throws Error for an unknown name, a variant the strategy does not take or a
// malformed value.
StrategySpec parse_strategy_spec(const std::string& entry);
// `config` with the name and the settings of `spec`.
void apply_strategy_spec(const StrategySpec& spec, StrategyConfig& config);

}  // namespace parspec
