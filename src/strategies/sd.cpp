// `sd`: classic speculative decoding (Leviathan et al. 2023; Chen et al. 2023).
// The draft proposes a chain of γ tokens, the target checks all of them in
// one forward, the longest agreeing prefix plus one target token is emitted.
#include <algorithm>

#include "core/error.h"
#include "core/timer.h"
#include "strategies/ppd/ppd_drafter.h"
#include "decode/speculative.h"
#include "decode/registry.h"
#include "sample/sampler.h"

namespace parspec {

namespace {

class ChainSpeculation final : public SpeculativeStrategy {
 public:
  explicit ChainSpeculation(const StrategyConfig& config)
      : SpeculativeStrategy(config, nullptr, ppd_drafter_if_asked(config)) {
    check(config_.draft_max >= 1, "--draft-max must be at least 1");
    check(config_.draft_min >= 1 && config_.draft_min <= config_.draft_max,
          "--draft-min must be between 1 and --draft-max");
  }

  std::string name() const override { return "sd"; }

 protected:
  int spec_budget() const override { return config_.draft_max + 1; }
  void reset() override { gamma_ = config_.draft_max; }

  void step(std::vector<int32_t>& emitted) override {
    int32_t n_tail = 0;
    int n_fed = 0;  // drafts the drafter has processed (its cache holds them)
    std::vector<Distribution> q;
    const std::vector<int32_t> drafts = draft_chain(&n_tail, &n_fed, q);
    const int k = static_cast<int>(drafts.size());

    // Verify [cur, d0..d(k-1)] in one target forward.
    const int n = verify_and_commit_chain(drafts, q, emitted);
    // The drafter saw the tail and n_fed drafts; keep what was accepted.
    drafter_->accept_chain(n_tail + std::min(n, n_fed));

    if (config_.adaptive) {
      gamma_ = n == k ? std::min(config_.draft_max, gamma_ + 2)
                      : std::max(config_.draft_min, gamma_ - 1);
    }
  }

 private:
  // Drafts up to γ tokens, one forward each, continuing from cur; `q` gets the
  // distribution each was drawn from.
  std::vector<int32_t> draft_chain(int32_t* n_tail, int* n_fed, std::vector<Distribution>& q) {
    std::vector<float> logits = drafter_->catch_up(seq_, n_tail);
    std::vector<int32_t> drafts;
    // A step emits the accepted drafts plus one target token: more drafts than
    // the request still needs would only be thrown away.
    const int gamma = std::max(1, std::min(gamma_, remaining() - 1));
    for (int i = 0; i < gamma; ++i) {
      // --draft-p-min: stop when the draft is unsure (never before one token).
      if (i > 0 && config_.draft_p_min > 0 &&
          top_probability(logits.data(), n_vocab()) < config_.draft_p_min)
        break;
      Distribution qi = distribution(logits.data());
      const int32_t token = greedy() ? argmax(logits.data(), n_vocab()) : sample_from(qi, rng_);
      drafts.push_back(token);
      q.push_back(std::move(qi));
      if (i + 1 == gamma) break;
      Batch next;
      const int32_t parent = *n_tail - 1 + i;
      next.add(token, drafter_->n_seen() + parent + 1, parent, true);
      logits = drafter_->propose(next);
      ++*n_fed;
    }
    return drafts;
  }

  int gamma_ = 4;
};

}  // namespace

StrategyInfo sd_strategy() {
  return {
      .name = "sd",
      .summary = "speculative decoding: the draft proposes a chain of γ tokens",
      .needs_draft = true,
      .options = {option_field(
                      "--draft-max", "draft_max", "N",
                      "draft tokens per step (γ; the maximum when adaptive; never more than the "
                      "tokens still to generate)",
                      &StrategyConfig::draft_max),
                  option_field("--draft-min", "draft_min", "N", "smallest γ when adaptive",
                               &StrategyConfig::draft_min),
                  option_field("--draft-p-min", "draft_p_min", "P",
                               "stop drafting when the draft's top probability is below P",
                               &StrategyConfig::draft_p_min),
                  option_flag("--adaptive-draft", "adaptive_draft",
                              "grow γ by 2 after a fully accepted step, shrink by 1 otherwise",
                              &StrategyConfig::adaptive),
                  draft_ppd_option()},
      .variant_key = "draft_max",
      .make = [](const StrategyConfig& c) { return std::make_unique<ChainSpeculation>(c); }};
}

}  // namespace parspec
