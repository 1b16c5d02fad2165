#pragma once
// The draft-and-verify strategies' base: a target and a drafter on the
// config's models (LocalTarget and ModelDrafter), checked to share a
// vocabulary. The loop, prefill and accounting are the driver's (driver.h).
#include <memory>
#include <vector>

#include "decode/driver.h"
#include "decode/verify.h"

namespace parspec {

class SpeculativeStrategy : public DecodeStrategy {
 protected:
  // The drafter runs the draft model on `draft_worker` (null: the config's),
  // unless the strategy brings its own `drafter` (sd's PPD drafter).
  explicit SpeculativeStrategy(const StrategyConfig& config, Worker* draft_worker = nullptr,
                               std::unique_ptr<Drafter> drafter = nullptr);

  // One chain verification: runs [cur, drafts...] through the target, accepts
  // a prefix by the greedy or sampled rule (q: the drafts' distributions when
  // sampling), records the step, commits the accepted tokens and the next one
  // to the target and sets `emitted` to them. Returns the accepted count.
  int verify_and_commit_chain(const std::vector<int32_t>& drafts,
                              const std::vector<Distribution>& q, std::vector<int32_t>& emitted);
};

}  // namespace parspec
