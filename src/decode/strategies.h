#pragma once
// Constructors of the individual strategies (make_strategy picks one by name).
#include <memory>

#include "decode/strategy.h"

namespace parspec {

std::unique_ptr<Strategy> make_chain_speculation(const StrategyConfig& config);
std::unique_ptr<Strategy> make_static_tree(const StrategyConfig& config);
std::unique_ptr<Strategy> make_dynamic_tree(const StrategyConfig& config);
std::unique_ptr<Strategy> make_pearl(const StrategyConfig& config);

}  // namespace parspec
