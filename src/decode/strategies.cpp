#include "decode/strategies.h"

#include "core/error.h"

namespace parspec {

const std::vector<StrategyInfo>& strategy_registry() {
  // One row per strategy file; the order is the order benchmarks list them.
  static const std::vector<StrategyInfo> registry = {
      autoregressive_strategy(), chain_sd_strategy(), static_tree_strategy(),
      dynamic_tree_strategy(),   pearl_strategy(),    easyspec_strategy(),
      auto_strategy(),           ppd_strategy(),      pipeline_pp_strategy(),
      pipeline_stpp_strategy(),  pipedec_strategy(),  specinfer_strategy(),
      cosine_strategy(),
  };
  return registry;
}

const std::vector<std::string>& strategy_names() {
  static const std::vector<std::string> names = [] {
    std::vector<std::string> out;
    for (const StrategyInfo& info : strategy_registry()) out.push_back(info.name);
    return out;
  }();
  return names;
}

std::string strategy_list() {
  std::string known;
  for (const auto& n : strategy_names()) known += (known.empty() ? "" : ", ") + n;
  return known;
}

const StrategyInfo& strategy_info(const std::string& name) {
  for (const StrategyInfo& info : strategy_registry())
    if (info.name == name) return info;
  fail("unknown strategy '", name, "' (known: ", strategy_list(), ")");
}

std::unique_ptr<Strategy> make_strategy(const StrategyConfig& config) {
  check(config.target != nullptr && config.target_worker != nullptr,
        "make_strategy: a target model and a worker are required");
  return strategy_info(config.name).make(config);
}

namespace {

template <typename T>
StrategyOption typed_field(std::string flag, std::string json_key, std::string value_name,
                           std::string help, T StrategyConfig::*field) {
  StrategyOption o{
      std::move(flag), std::move(json_key), std::move(value_name), std::move(help), nullptr,
      nullptr};
  o.get = [field](const StrategyConfig& c) { return OptionValue(c.*field); };
  o.set = [field](StrategyConfig& c, const OptionValue& v) { c.*field = std::get<T>(v); };
  return o;
}

}  // namespace

StrategyOption option_field(std::string flag, std::string json_key, std::string value_name,
                            std::string help, int StrategyConfig::*field) {
  return typed_field(std::move(flag), std::move(json_key), std::move(value_name), std::move(help),
                     field);
}

StrategyOption option_field(std::string flag, std::string json_key, std::string value_name,
                            std::string help, float StrategyConfig::*field) {
  return typed_field(std::move(flag), std::move(json_key), std::move(value_name), std::move(help),
                     field);
}

StrategyOption option_flag(std::string flag, std::string json_key, std::string help,
                           bool StrategyConfig::*field) {
  return typed_field(std::move(flag), std::move(json_key), "", std::move(help), field);
}

StrategyOption negated_flag(std::string flag, std::string json_key, std::string help,
                            bool StrategyConfig::*field) {
  StrategyOption o{std::move(flag), std::move(json_key), "", std::move(help), nullptr, nullptr};
  o.get = [field](const StrategyConfig& c) { return OptionValue(!(c.*field)); };
  o.set = [field](StrategyConfig& c, const OptionValue& v) { c.*field = !std::get<bool>(v); };
  return o;
}

StrategyOption option_entry(std::string flag, std::string json_key, std::string value_name,
                            std::string help, OptionValue default_value) {
  StrategyOption o{std::move(flag), json_key, std::move(value_name),
                   std::move(help), nullptr,  nullptr};
  o.get = [json_key, default_value](const StrategyConfig& c) {
    const auto found = c.options.find(json_key);
    return found == c.options.end() ? default_value : found->second;
  };
  o.set = [json_key](StrategyConfig& c, const OptionValue& v) { c.options[json_key] = v; };
  return o;
}

}  // namespace parspec
