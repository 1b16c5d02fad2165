#include "decode/strategies.h"

#include "core/error.h"

namespace parspec {

void PositionAcceptance::add(size_t position, bool was_accepted) {
  if (proposed.size() <= position) {
    proposed.resize(position + 1, 0);
    accepted.resize(position + 1, 0);
  }
  ++proposed[position];
  if (was_accepted) ++accepted[position];
}

const std::vector<std::string>& strategy_names() {
  static const std::vector<std::string> names = {"ar", "sd", "tree", "dyntree", "pearl"};
  return names;
}

std::unique_ptr<Strategy> make_strategy(const StrategyConfig& config) {
  check(config.target != nullptr && config.target_worker != nullptr,
        "make_strategy: a target model and a worker are required");
  if (config.name == "ar")
    return make_autoregressive(config.target, *config.target_worker, config.ctx_size);
  if (config.name == "sd") return make_chain_speculation(config);
  if (config.name == "tree") return make_static_tree(config);
  if (config.name == "dyntree") return make_dynamic_tree(config);
  if (config.name == "pearl") return make_pearl(config);
  std::string known;
  for (const auto& n : strategy_names()) known += (known.empty() ? "" : ", ") + n;
  fail("unknown strategy '", config.name, "' (known: ", known, ")");
}

}  // namespace parspec
