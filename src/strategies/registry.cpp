#include "decode/registry.h"

#include <algorithm>

#include "core/error.h"

namespace parspec {

// The rows, one per strategy file (src/strategies/NAME.cpp or NAME/).
StrategyInfo ar_strategy();
StrategyInfo sd_strategy();
StrategyInfo tree_strategy();
StrategyInfo dyntree_strategy();
StrategyInfo pearl_strategy();
StrategyInfo easyspec_strategy();
StrategyInfo auto_strategy();
StrategyInfo ppd_strategy();
StrategyInfo pp_strategy();
StrategyInfo stpp_strategy();
StrategyInfo pipedec_strategy();
StrategyInfo cosine_strategy();
StrategyInfo specinfer_strategy();

const std::vector<StrategyInfo>& strategy_registry() {
  // One row per strategy file; the order is the order benchmarks list them.
  static const std::vector<StrategyInfo> registry = {
      ar_strategy(),     sd_strategy(),       tree_strategy(),    dyntree_strategy(),
      pearl_strategy(),  easyspec_strategy(), auto_strategy(),    ppd_strategy(),
      pp_strategy(),     stpp_strategy(),     pipedec_strategy(), specinfer_strategy(),
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

bool StrategyInfo::has_role(StrategyRole role) const {
  return std::find(roles.begin(), roles.end(), role) != roles.end();
}

const StrategyInfo& strategy_for(StrategyRole role) {
  for (const StrategyInfo& info : strategy_registry())
    if (info.has_role(role)) return info;
  fail("no registered strategy has role ", static_cast<int>(role));
}

const std::string& reference_strategy_name() {
  return strategy_for(StrategyRole::reference).name;
}

std::string strategy_names_where(const std::function<bool(const StrategyInfo&)>& pick) {
  std::vector<std::string> names;
  for (const StrategyInfo& info : strategy_registry())
    if (pick(info)) names.push_back(info.name);
  std::string out;
  for (size_t i = 0; i < names.size(); ++i)
    out += (i == 0 ? "" : i + 1 == names.size() ? " and " : ", ") + names[i];
  return out;
}

std::unique_ptr<Strategy> make_strategy(const StrategyConfig& config) {
  check(config.target != nullptr && config.target_worker != nullptr,
        "make_strategy: a target model and a worker are required");
  return strategy_info(config.name).make(config);
}

namespace {

// The letters of NAME:<letter><value>... and the options they set.
constexpr std::pair<char, const char*> kShapeLetters[] = {
    {'d', "tree_depth"}, {'c', "tree_branch"}, {'w', "tree_width"}};

bool has_option(const StrategyInfo& info, const std::string& json_key) {
  return std::any_of(info.options.begin(), info.options.end(),
                     [&](const StrategyOption& o) { return o.json_key == json_key; });
}

// What variants the strategies take, for error messages.
std::string variant_help() {
  std::string numbers, letters;
  for (const StrategyInfo& i : strategy_registry()) {
    if (!i.variant_key.empty()) numbers += (numbers.empty() ? "" : ", ") + i.name;
    std::string own;
    for (const auto& [letter, key] : kShapeLetters)
      if (has_option(i, key))
        own += (own.empty() ? "" : ", ") + std::string(1, letter) + ": " + key;
    if (!own.empty()) letters += (letters.empty() ? "" : "; ") + i.name + " (" + own + ")";
  }
  return "NAME:G with G >= 1 is for " + numbers + "; NAME:<letter><value>... for " + letters;
}

// A positive integer of at most 3 digits at s[pos...]; advances pos; 0 if none.
int read_count(const std::string& s, size_t& pos) {
  const size_t start = pos;
  while (pos < s.size() && pos - start < 4 && s[pos] >= '0' && s[pos] <= '9') ++pos;
  if (pos == start || pos - start > 3) return 0;
  return std::stoi(s.substr(start, pos - start));
}

}  // namespace

StrategySpec parse_strategy_spec(const std::string& entry) {
  const size_t colon = entry.find(':');
  StrategySpec spec;
  spec.name = entry.substr(0, colon);
  const StrategyInfo& info = strategy_info(spec.name);
  if (colon == std::string::npos) return spec;
  const std::string value = entry.substr(colon + 1);
  const auto bad = [&] { fail("invalid strategy '", entry, "' (", variant_help(), ")"); };
  size_t pos = 0;
  if (!value.empty() && value[0] >= '0' && value[0] <= '9') {
    const int g = read_count(value, pos);
    if (g < 1 || pos != value.size() || info.variant_key.empty()) bad();
    spec.settings.push_back({info.variant_key, g});
    return spec;
  }
  if (value.empty()) bad();
  while (pos < value.size()) {
    const char letter = value[pos++];
    const char* key = nullptr;
    for (const auto& [l, k] : kShapeLetters)
      if (l == letter && has_option(info, k)) key = k;
    const int v = read_count(value, pos);
    if (key == nullptr || v < 1) bad();
    for (const auto& setting : spec.settings)
      if (setting.first == key) bad();  // a letter given twice
    spec.settings.push_back({key, v});
  }
  return spec;
}

void apply_strategy_spec(const StrategySpec& spec, StrategyConfig& config) {
  config.name = spec.name;
  const StrategyInfo& info = strategy_info(spec.name);
  for (const auto& [key, value] : spec.settings)
    for (const StrategyOption& option : info.options)
      if (option.json_key == key) option.set(config, value);
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
