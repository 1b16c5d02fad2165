// `sd`: classic speculative decoding (Leviathan et al. 2023; Chen et al. 2023).
// The draft proposes a chain of γ tokens, the target checks all of them in
// one forward, the longest agreeing prefix plus one target token is emitted.
#include <algorithm>
#include <cmath>

#include "core/error.h"
#include "sample/sampler.h"
#include "spec/speculative.h"
#include "spec/strategies.h"

namespace parspec {

namespace {

class ChainSpeculation final : public SpeculativeStrategy {
 public:
  explicit ChainSpeculation(const StrategyConfig& config) : SpeculativeStrategy(config) {
    check(config_.draft_max >= 1, "--draft-max must be at least 1");
    check(config_.draft_min >= 1 && config_.draft_min <= config_.draft_max,
          "--draft-min must be between 1 and --draft-max");
  }

  std::string name() const override { return "sd"; }

 protected:
  int spec_budget() const override { return config_.draft_max + 1; }
  void reset() override { gamma_ = config_.draft_max; }

  void step(std::vector<int32_t>& emitted) override {
    // Draft γ tokens, one forward each, continuing from cur.
    int32_t n_tail = 0;
    std::vector<float> logits = catch_up_draft(&n_tail);
    std::vector<int32_t> drafts;
    std::vector<Distribution> q;
    int n_fed = 0;  // drafts the draft model has processed (its cache holds them)
    // A step emits the accepted drafts plus one target token: more drafts than
    // the request still needs would only be thrown away.
    const int gamma = std::max(1, std::min(gamma_, remaining() - 1));
    for (int i = 0; i < gamma; ++i) {
      // --draft-p-min: stop when the draft is unsure (never before one token).
      if (i > 0 && config_.draft_p_min > 0 && top_probability(logits) < config_.draft_p_min) break;
      Distribution qi = distribution(logits.data());
      const int32_t token = greedy() ? argmax(logits.data(), n_vocab()) : sample_from(qi, rng_);
      drafts.push_back(token);
      q.push_back(std::move(qi));
      if (i + 1 == gamma) break;
      Batch next;
      const int32_t parent = n_tail - 1 + i;
      next.add(token, draft_kv_->n_committed() + parent + 1, parent, true);
      logits = draft_forward(next);
      ++n_fed;
    }
    const int k = static_cast<int>(drafts.size());

    // Verify [cur, d0..d(k-1)] in one target forward.
    std::vector<int32_t> chain = {cur()};
    chain.insert(chain.end(), drafts.begin(), drafts.end());
    const std::vector<float> target_logits = target_forward(Batch::chain(*target_kv_, chain, true));
    ChainVerdict verdict;
    const auto t0 = Clock::now();
    if (greedy()) {
      verdict = verify_chain_greedy(drafts, target_logits.data(), n_vocab());
    } else {
      std::vector<Distribution> p;
      for (int i = 0; i <= k; ++i) p.push_back(distribution(&target_logits[size_t(i) * n_vocab()]));
      verdict = verify_chain_sampled(drafts, q, p, rng_);
    }
    stats_->t_verify_ms += std::chrono::duration<double, std::milli>(Clock::now() - t0).count();

    const int n = verdict.n_accepted;
    stats_->drafted += k;
    stats_->accepted += n;
    for (int i = 0; i < k; ++i) stats_->per_position.add(i, i < n);
    emitted.assign(drafts.begin(), drafts.begin() + n);
    emitted.push_back(verdict.next_token);

    commit_chain(*target_kv_, 1 + n);
    // The draft saw the tail and n_fed drafts; keep what was accepted.
    commit_chain(*draft_kv_, n_tail + std::min(n, n_fed));

    if (config_.adaptive) {
      gamma_ = n == k ? std::min(config_.draft_max, gamma_ + 2)
                      : std::max(config_.draft_min, gamma_ - 1);
    }
  }

 private:
  // Largest softmax probability of the raw logits (the draft's confidence).
  float top_probability(const std::vector<float>& logits) const {
    const float top = logits[argmax(logits.data(), n_vocab())];
    double sum = 0.0;
    for (int i = 0; i < n_vocab(); ++i) sum += std::exp(static_cast<double>(logits[i]) - top);
    return static_cast<float>(1.0 / sum);
  }

  int gamma_ = 4;
};

}  // namespace

std::unique_ptr<Strategy> make_chain_speculation(const StrategyConfig& config) {
  return std::make_unique<ChainSpeculation>(config);
}

}  // namespace parspec
