#pragma once
// The draft-and-verify strategies' base: a target and a drafter on the
// config's models (LocalTarget and ModelDrafter), checked to share a
// vocabulary. The loop, prefill and accounting are the driver's (driver.h).
#include <memory>

#include "decode/driver.h"

namespace parspec {

class SpeculativeStrategy : public DecodeStrategy {
 protected:
  // The drafter runs the draft model on `draft_worker` (null: the config's).
  explicit SpeculativeStrategy(const StrategyConfig& config, Worker* draft_worker = nullptr);
};

}  // namespace parspec
