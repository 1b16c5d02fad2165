#pragma once
// Machinery shared by the draft-and-verify strategies: the generation loop,
// the two models' caches, and the invariant that ties them together:
//   seq = prompt + emitted tokens;
//   the target cache holds seq minus its last token ("cur", the next input);
//   the draft cache holds a prefix of seq (it may lag; catch_up_draft() feeds
//   what it misses, ending with cur).
#include <chrono>
#include <memory>
#include <vector>

#include "spec/strategy.h"
#include "spec/verify.h"

namespace parspec {

class SpeculativeStrategy : public Strategy {
 public:
  explicit SpeculativeStrategy(const StrategyConfig& config);
  GenerationResult generate(const GenerationRequest& request) final;

 protected:
  using Clock = std::chrono::steady_clock;

  // One draft-and-verify round: appends the tokens it emits (at least one) to
  // `emitted` and commits the caches accordingly (seq is extended by the base).
  virtual void step(std::vector<int32_t>& emitted) = 0;
  // Cells of speculative work a step may add on top of the committed tokens.
  virtual int spec_budget() const = 0;
  // Called before the first step of a request.
  virtual void reset() {}

  int32_t cur() const { return seq_.back(); }
  // Tokens the request still asks for (at least 1 while a step runs): drafting
  // more than this is wasted work.
  int remaining() const { return remaining_; }
  bool greedy() const { return sampling_.greedy(); }
  int n_vocab() const { return config_.target->config().n_vocab; }

  // Feeds the draft the tokens of seq it has not seen (ending with cur) as a
  // chain of speculative cells; returns the draft's logits after cur. The
  // cells are 0..n-1 of the draft's (empty) speculative area; *n_cells = n.
  std::vector<float> catch_up_draft(int32_t* n_cells);
  // Filtered distribution for logits (one-hot at argmax when greedy).
  Distribution distribution(const float* logits) const;
  // Draft forward / target forward, timed and counted.
  std::vector<float> draft_forward(const Batch& batch);
  std::vector<float> target_forward(const Batch& batch);

  StrategyConfig config_;
  SamplingParams sampling_;
  Rng rng_;
  std::vector<int32_t> seq_;
  std::unique_ptr<KvCache> target_kv_, draft_kv_;
  GenerationStats* stats_ = nullptr;
  int remaining_ = 0;
};

// Chain positions 0..n-1 of a speculative area start at the committed length.
void commit_chain(KvCache& kv, int32_t n_cells);

}  // namespace parspec
