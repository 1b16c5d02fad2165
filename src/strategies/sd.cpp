// `sd`: classic speculative decoding (Leviathan et al. 2023; Chen et al. 2023).
// The draft proposes a chain of γ tokens, the target checks all of them in
// one forward, the longest agreeing prefix plus one target token is emitted.
#include <algorithm>

#include "core/error.h"
#include "core/timer.h"
#include "decode/registry.h"
#include "decode/speculative.h"
#include "sample/sampler.h"
#include "strategies/ppd/ppd_drafter.h"
#include "tuning/cost_family.h"

namespace parspec {

namespace {

StrategyOption draft_min_option() {
  return option_entry("--draft-min", "draft_min", "N", "smallest γ when adaptive", 1);
}

StrategyOption adaptive_draft_option() {
  return option_entry("--adaptive-draft", "adaptive_draft", "",
                      "grow γ by 2 after a fully accepted step, shrink by 1 otherwise", false);
}

StrategyOption speculation_guard_option() {
  return option_entry(
      "--speculation-guard", "speculation_guard", "",
      "time drafted steps against plain target steps while generating (a few steps in 16 are of "
      "the other kind) and take plain steps while drafting costs over 1.2x a plain step per "
      "token, as when a long context makes verification dear (auto turns it on)",
      false);
}

// Per-token cost of one kind of step over its recent steps: the median step
// time (one slow step, a thread woken late, does not count) over the mean
// tokens a step emitted. The first step it is given is left out (caches and
// graphs warm up).
class StepCost {
 public:
  // Over the last `window` steps; known once `min_steps` were timed.
  StepCost(size_t window, size_t min_steps) : window_(window), min_steps_(min_steps) {}
  // A new request: its context starts short again. The warm-up stays done.
  void clear() {
    ms_.clear();
    tokens_.clear();
  }
  void add(double ms, int tokens) {
    if (++steps_ == 1) return;
    if (ms_.size() == window_) {
      ms_.erase(ms_.begin());
      tokens_.erase(tokens_.begin());
    }
    ms_.push_back(ms);
    tokens_.push_back(tokens);
  }
  bool known() const { return ms_.size() >= min_steps_; }
  double ms_per_token() const {
    std::vector<double> sorted = ms_;
    std::sort(sorted.begin(), sorted.end());
    const size_t n = sorted.size();
    const double median = n % 2 == 1 ? sorted[n / 2] : (sorted[n / 2 - 1] + sorted[n / 2]) / 2;
    double tokens = 0;
    for (int t : tokens_) tokens += t;
    return median * static_cast<double>(n) / tokens;
  }

 private:
  size_t window_, min_steps_;
  int steps_ = 0;
  std::vector<double> ms_;
  std::vector<int> tokens_;
};

class ChainSpeculation final : public SpeculativeStrategy {
 public:
  explicit ChainSpeculation(const StrategyConfig& config)
      : SpeculativeStrategy(config, nullptr, ppd_drafter_if_asked(config)),
        draft_min_(option_value<int>(config, draft_min_option())),
        adaptive_(option_value<bool>(config, adaptive_draft_option())),
        guard_(option_value<bool>(config, speculation_guard_option())) {
    check(config_.draft_max >= 1, "--draft-max must be at least 1");
    check(draft_min_ >= 1 && draft_min_ <= config_.draft_max,
          "--draft-min must be between 1 and --draft-max");
  }

  std::string name() const override { return "sd"; }

 protected:
  int spec_budget() const override { return config_.draft_max + 1; }
  void reset() override {
    gamma_ = config_.draft_max;
    drafted_cost_.clear();
    plain_cost_.clear();
    plain_mode_ = after_plain_ = false;
    steps_ = 0;
    long_prompt_ = seq_.size() >= static_cast<size_t>(kLongPrompt);
  }

  void step(std::vector<int32_t>& emitted) override {
    if (!guard_) return drafted_step(emitted);
    // Both kinds are lossless steps: a plain step is the target's own next
    // token. The kind not in use runs now and then so that its cost stays
    // known as the context grows: one plain step in kProbeEvery while
    // drafting (none before the first kProbeEvery: the strategy was chosen for
    // a short context, which is where a request starts, unless its prompt is
    // long: then also at steps 2 and 4, so that a verification made dear by
    // the long context is seen within a few steps); two drafted steps in
    // kProbeEvery while plain, the first of which only catches the drafter up
    // on the plain steps' tokens.
    constexpr int kProbeEvery = 16;
    ++steps_;
    const int phase = steps_ % kProbeEvery;
    const bool early_probe = long_prompt_ && (steps_ == 2 || steps_ == 4);
    const bool drafted = plain_mode_ ? phase <= 1 : phase != 0 && !early_probe;
    const Stopwatch watch;
    if (drafted)
      drafted_step(emitted);
    else
      verify_and_commit_chain({}, {}, emitted);
    const double ms = watch.elapsed_ms();
    const int tokens = static_cast<int>(emitted.size());
    // A drafted step right after a plain one also feeds the drafter what it
    // missed: not a drafted step's usual cost.
    if (!drafted)
      plain_cost_.add(ms, tokens);
    else if (!after_plain_)
      drafted_cost_.add(ms, tokens);
    after_plain_ = !drafted;
    if (!drafted_cost_.known() || !plain_cost_.known()) return;
    // Plain steps only once drafting is clearly dearer, so that timing noise
    // (large beside a short step) does not give up a speedup; drafting again
    // as soon as it is cheaper.
    const double drafted_ms = drafted_cost_.ms_per_token(), plain_ms = plain_cost_.ms_per_token();
    if (!plain_mode_ && drafted_ms > 1.2 * plain_ms) plain_mode_ = true;
    if (plain_mode_ && drafted_ms < plain_ms) plain_mode_ = false;
  }

 private:
  void drafted_step(std::vector<int32_t>& emitted) {
    int32_t n_tail = 0;
    int n_fed = 0;  // drafts the drafter has processed (its cache holds them)
    std::vector<Distribution> q;
    const std::vector<int32_t> drafts = draft_chain(&n_tail, &n_fed, q);
    const int k = static_cast<int>(drafts.size());

    // Verify [cur, d0..d(k-1)] in one target forward.
    const int n = verify_and_commit_chain(drafts, q, emitted);
    // The drafter saw the tail and n_fed drafts; keep what was accepted.
    drafter_->accept_chain(n_tail + std::min(n, n_fed));

    if (adaptive_) {
      gamma_ = n == k ? std::min(config_.draft_max, gamma_ + 2) : std::max(draft_min_, gamma_ - 1);
    }
  }

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

  const int draft_min_;
  const bool adaptive_;
  const bool guard_;
  int gamma_ = 4;
  // A drafted step emits 1 to γ + 1 tokens: drafting is judged on several,
  // over a window long enough that a few rejected drafts in a row do not count
  // as a change of what drafting costs.
  StepCost drafted_cost_{16, 4}, plain_cost_{8, 1};
  bool plain_mode_ = false, after_plain_ = false;
  int steps_ = 0;
  // Prompts of this many tokens or more start with early plain steps.
  static constexpr int kLongPrompt = 512;
  bool long_prompt_ = false;
};

// The cost model's chain: 1 + E(γ) tokens per γ·D + T(γ+1).
std::shared_ptr<const CostFamily> sd_cost() {
  auto family = std::make_shared<CostFamily>();
  family->calibration = CalibrationRole::chain;
  family->complexity = 1;
  family->candidates = [](const CostMeasurements& m, int max_gamma) {
    std::vector<Candidate> out;
    for (int g = 1; g <= chain_reach(m, max_gamma); ++g) out.push_back({"sd", g});
    return out;
  };
  family->predict = [](const CostMeasurements& m, const Candidate& c) {
    const int gamma = c.param;
    check(gamma >= 1, "cost model: sd needs γ >= 1");
    Prediction p;
    p.tokens_per_step = 1 + expected_accepted(m, gamma);
    p.ms_per_step = gamma * (m.draft_ms + m.draft_overhead_ms) + target_step_ms(m, gamma + 1);
    return p;
  };
  family->configure = [](StrategyConfig& config, const Candidate& c) {
    config.draft_max = c.param;
    draft_min_option().set(config, 1);
    adaptive_draft_option().set(config, false);
    speculation_guard_option().set(config, false);
    config.draft_p_min = 0;
  };
  family->calibration_candidate = [](int gamma) { return Candidate{"sd", gamma}; };
  return family;
}

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
                  draft_min_option(),
                  option_field("--draft-p-min", "draft_p_min", "P",
                               "stop drafting when the draft's top probability is below P",
                               &StrategyConfig::draft_p_min),
                  adaptive_draft_option(), speculation_guard_option(), draft_ppd_option()},
      .variant_key = "draft_max",
      .roles = {StrategyRole::serve_drafted},
      .served = true,
      .plan_shapes =
          [](int) {
            return std::vector<std::string>{"sd:2", "sd:4", "sd:8"};
          },
      .cost = sd_cost(),
      .make = [](const StrategyConfig& c) { return std::make_unique<ChainSpeculation>(c); }};
}

}  // namespace parspec
