#pragma once
// The strategy registry: every strategy's file describes itself (name, whether
// it needs a draft model, its options with their flags, defaults and JSON
// keys, its factory) in a StrategyInfo, and the table in strategies/registry.cpp lists
// them. Tools (`generate`, `bench`) learn strategies and their flags only from
// here; docs/development.md has the checklist for adding one.
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

struct StrategyInfo {
  std::string name;
  std::string summary;  // one line: what it is
  bool needs_draft = true;
  std::vector<StrategyOption> options;
  // The option bench's NAME:G variants set to G (empty: no variants).
  std::string variant_key;
  // Under mpirun the other ranks run this strategy's drafter (easyspec's
  // lanes, StrategyConfig::make_group_executor) instead of a target pipeline;
  // every strategy of such a run keeps its target on rank 0.
  bool drafts_on_ranks = false;
  std::function<std::unique_ptr<Strategy>(const StrategyConfig&)> make;
};

// Every strategy, in the order benchmarks list them.
const std::vector<StrategyInfo>& strategy_registry();
// Throws Error naming the known strategies for an unknown name.
const StrategyInfo& strategy_info(const std::string& name);
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
