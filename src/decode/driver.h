#pragma once
// The generation driver every strategy runs in: request validation, the
// sides' caches, chunked prefill, the step loop with stop conditions and
// the accounting of forwards and time. A strategy supplies step(): one
// round that emits at least one token. The invariant between the sides:
//   seq = prompt + emitted tokens;
//   the target holds seq minus its last token ("cur", the next input)
//   (ar: all of seq, see autoregressive.cpp);
//   the drafter holds a prefix of seq (it may lag; Drafter::catch_up feeds
//   what it misses, ending with cur).
#include <memory>
#include <vector>

#include "decode/sides.h"
#include "decode/strategy.h"
#include "decode/verify.h"

namespace parspec {

// Throws Error for an empty prompt, a negative n_predict, a request that does
// not fit in ctx_size tokens, or bad sampling parameters.
void validate_request(const GenerationRequest& request, int ctx_size);

class DecodeStrategy : public Strategy {
 public:
  GenerationResult generate(const GenerationRequest& request) final;

 protected:
  // `drafter` may be null (ar); a subclass may also set drafter_ itself.
  DecodeStrategy(const StrategyConfig& config, std::unique_ptr<Target> target,
                 std::unique_ptr<Drafter> drafter);

  // One round: appends the tokens it emits (at least one) to `emitted` and
  // commits the sides accordingly (the driver extends seq).
  virtual void step(std::vector<int32_t>& emitted) = 0;
  // Cells of speculative work a step may add on top of the committed tokens.
  virtual int spec_budget() const = 0;
  // Called before the first step of a request, after the sides began.
  virtual void reset() {}
  // Fills the sides from the prompt: by default every prompt token but the
  // last, into the target and the drafter.
  virtual void prefill();
  // Called with the request's statistics after the last step.
  virtual void finish(GenerationStats& stats) {}

  // Runs `tokens` through the target / the drafter in chunks, committing them;
  // returns the target's logits after the last token.
  std::vector<float> prefill_target(std::span<const int32_t> tokens);
  void prefill_drafter(std::span<const int32_t> tokens);

  int32_t cur() const { return seq_.back(); }
  // Tokens the request still asks for (at least 1 while a step runs): drafting
  // more than this is wasted work.
  int remaining() const { return remaining_; }
  bool greedy() const { return sampling_.greedy(); }
  int n_vocab() const { return target_->n_vocab(); }
  // Filtered distribution for logits (one-hot at argmax when greedy).
  Distribution distribution(const float* logits) const;

  StrategyConfig config_;
  std::unique_ptr<Target> target_;
  std::unique_ptr<Drafter> drafter_;
  SamplingParams sampling_;
  Rng rng_;
  std::vector<int32_t> seq_;
  GenerationStats* stats_ = nullptr;

 private:
  // Adds the sides' forwards since the last call to the statistics (draft
  // forwards to draft time, target forwards to verification time).
  void take_meters(GenerationStats* stats);
  void run_steps(const GenerationRequest& request, GenerationResult& result);

  int remaining_ = 0;
};

}  // namespace parspec
