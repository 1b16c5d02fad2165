#include "tuning/cost_family.h"

#include "core/error.h"

namespace parspec {

const CostFamily& cost_family(const std::string& strategy) {
  const StrategyInfo& info = strategy_info(strategy);
  check(info.cost != nullptr, "cost model: strategy '", strategy, "' is not tuned");
  return *info.cost;
}

const StrategyInfo& calibrating_strategy(CalibrationRole role) {
  for (const StrategyInfo& info : strategy_registry())
    if (info.cost != nullptr && info.cost->calibration == role) return info;
  fail("cost model: no tuned strategy calibrates role ", static_cast<int>(role));
}

}  // namespace parspec
