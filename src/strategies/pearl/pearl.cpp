// `pearl`: PEARL (Liu et al., "PEARL: Parallel Speculative Decoding with
// Adaptive Draft Length"). The scheduler (pre-verify / post-verify and the
// drafter thread) is PearlEngine; this file connects its two ports to the
// strategy's Drafter, driven by the engine's drafter thread on a worker of its
// own, and Target, driven by the caller's thread.

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <functional>
#include <vector>

#include "core/error.h"
#include "core/threads.h"
#include "core/timer.h"
#include "decode/local_model.h"
#include "decode/registry.h"
#include "decode/speculative.h"
#include "model/forward_timing.h"
#include "sample/sampler.h"
#include "strategies/pearl/pearl_engine.h"
#include "strategies/pearl/pearl_window.h"
#include "tuning/cost_family.h"
#include "tuning/side_timers.h"

namespace parspec {

namespace {

StrategyOption pearl_window_option() {
  return option_entry("--pearl-window", "pearl_window", "N",
                      "the window γ (0 = chosen as it runs: the fastest the measured forward "
                      "costs and the acceptance so far predict, at most the paper's "
                      "t(target forward) / t(draft forward))",
                      0);
}

// The two halves of PEARL's parallelism, each switched off by a flag (ablations).
StrategyOption no_pre_verify_option() {
  return option_entry("--no-pre-verify", "no_pre_verify", "",
                      "ablation: draft each window with the target idle instead of checking "
                      "its first token meanwhile",
                      false);
}

StrategyOption no_post_verify_option() {
  return option_entry("--no-post-verify", "no_post_verify", "",
                      "ablation: verify pending drafts with the drafter idle instead of "
                      "drafting the next window meanwhile",
                      false);
}

// splitmix64's finalizer: a bijection that scatters nearby inputs.
uint64_t mix64(uint64_t x) {
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ULL;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebULL;
  return x ^ (x >> 31);
}

// What the window is chosen from, timed on the strategy's own sides as they
// will run: the paper's rule, γ = round(t(target forward) / t(draft forward)),
// one token each (median of 5 after 2 warm-ups), which bounds the window;
// the target's forward over chains of n tokens, at n = 3, 5, 9, 17, ... up to
// the rule's γ + 1 (the fastest of 2 after one warm-up); and one round's worth
// of both sides at once (pearl_window.h). About 15 target forwards beyond the
// rule's: start-up time that a long window's waste would cost many times over.
struct WindowMeasurement {
  double t_target_ms = 0, t_draft_ms = 0, ratio = 1;
  int rule_window = 1;
  WindowCosts costs;
  std::string where;  // how the sides ran, for the note: "" (this CPU), a GPU, a pipeline
};

// The costs timed on the strategy's own sides, as it will run them: on this
// CPU's workers, on a GPU, or through a pipeline of MPI ranks (messages and
// stages included); the drafter on `runner`'s thread when both run at once,
// as the engine's drafter thread does. The cells used are dropped and the
// meters emptied: the first request starts clean.
WindowMeasurement measure_window(Target& target, Drafter& drafter, TaskRunner& runner) {
  constexpr int kMaxWindow = 64, kWarmup = 2, kRuns = 5, kCurveRuns = 2;
  TargetTimer target_timer(target, kMaxWindow + 1);
  DrafterTimer draft_timer(drafter, 1);
  const auto target_ms = [&](int n) {
    return [&target_timer, n] { return target_timer.forward_ms(n); };
  };
  const auto draft_ms = [&] { return draft_timer.forward_ms(1); };
  WindowMeasurement m;
  const std::vector<double> one = sorted_times(target_ms(1), kWarmup, kRuns);
  m.t_target_ms = one[kRuns / 2];
  m.t_draft_ms = sorted_times(draft_ms, kWarmup, kRuns)[kRuns / 2];
  m.ratio = m.t_draft_ms > 0 ? m.t_target_ms / m.t_draft_ms : 1.0;
  m.rule_window =
      static_cast<int>(std::clamp(std::lround(m.ratio), 1L, static_cast<long>(kMaxWindow)));
  WindowCosts& costs = m.costs;
  costs.draft_ms = m.t_draft_ms;
  costs.max_window = m.rule_window;
  costs.target.points = {{1, one.front()}};  // the curve: each point the fastest of its runs
  for (int n = std::min(3, m.rule_window + 1);; n = std::min(2 * n - 1, m.rule_window + 1)) {
    costs.target.points.emplace_back(n, sorted_times(target_ms(n), 1, kCurveRuns).front());
    if (n >= m.rule_window + 1) break;
  }
  // A short window's round with both sides at once, against each alone.
  const int w = std::min(m.rule_window, 4);
  const double verifying = costs.target.at(w + 1), drafting = w * m.t_draft_ms;
  const auto both = [&] {
    const Stopwatch watch;
    runner.post([&] {
      for (int i = 0; i < w; ++i) draft_ms();
    });
    target_timer.forward_ms(w + 1);
    runner.wait();
    return watch.elapsed_ms();
  };
  const double together = sorted_times(both, 1, kCurveRuns).front();
  const double shorter = std::min(verifying, drafting);
  costs.overlap_cost =
      shorter > 0 ? std::clamp((together - std::max(verifying, drafting)) / shorter, 0.0, 4.0)
                  : 0.0;
  target.take_meter();
  drafter.take_meter();
  return m;
}

std::vector<std::string> describe(const WindowMeasurement& m, int first_window) {
  std::string curve;
  for (const auto& [n, ms] : m.costs.target.points) {
    char point[64];
    std::snprintf(point, sizeof point, "%s%d:%.2f", curve.empty() ? "" : " ", n, ms);
    curve += point;
  }
  char line[768];
  std::snprintf(line, sizeof line,
                "pearl: target forward %.3f ms%s, draft forward %.3f ms: the paper's window "
                "%d; over n tokens the target takes (n:ms) %s, and running both at once adds "
                "%.0f%% of the shorter side; the window follows the acceptance as it runs, from "
                "%d (--pearl-window N fixes it)",
                m.t_target_ms, m.where.c_str(), m.t_draft_ms, m.rule_window, curve.c_str(),
                100 * m.costs.overlap_cost, first_window);
  return {line};
}

// The engine's drafter port on a Drafter: each call feeds what the drafter
// has not seen of the context (usually the previous draft) in one forward.
class DrafterPort final : public PearlDrafter {
 public:
  explicit DrafterPort(Drafter& drafter) : drafter_(drafter) {}

  void begin(const SamplingParams& sampling) {
    sampling_ = sampling;
    seed_ = mix64(mix64(sampling.seed ^ 0x5eed0f0d2a1f7e11ULL));
  }

  DraftToken next(std::span<const int32_t> context, uint64_t draw) override {
    int32_t n_fed = 0;
    const std::vector<float> logits = drafter_.catch_up(context, &n_fed);
    drafter_.accept_chain(n_fed);
    DraftToken draft;
    const int n_vocab = drafter_.n_vocab();
    if (sampling_.greedy()) {
      draft.token = argmax(logits.data(), n_vocab);
    } else {
      probabilities(logits.data(), n_vocab, sampling_, draft.q);
      // A stream per draft: the outcome does not depend on how far cancelled
      // windows got, and it is independent of the verifier's stream.
      Rng rng(mix64(seed_ + draw));
      draft.token = sample_from(draft.q, rng);
    }
    return draft;
  }

  void rollback(size_t n) override { drafter_.roll_back(static_cast<int32_t>(n)); }

 private:
  Drafter& drafter_;
  SamplingParams sampling_;
  uint64_t seed_ = 0;
};

class Pearl final : public SpeculativeStrategy {
 public:
  Pearl(const StrategyConfig& config, std::unique_ptr<Worker> own_draft_worker)
      : SpeculativeStrategy(config, own_draft_worker.get()),
        own_draft_worker_(std::move(own_draft_worker)),
        target_port_(*this),
        drafter_port_(*drafter_) {
    if (own_draft_worker_) config_.draft_worker = own_draft_worker_.get();
    window_ = option_value<int>(config_, pearl_window_option());
    if (window_ <= 0) {
      BorrowedRunner runner = borrow_runner();
      WindowMeasurement m = measure_window(*target_, *drafter_, *runner);
      // A side made elsewhere without a device is a pipeline of MPI ranks.
      if (!config_.device.empty())
        m.where = " (" + config_.device + ")";
      else if (config_.make_target)
        m.where = " through the pipeline";
      costs_ = m.costs;
      adaptive_ = true;
      window_ = m.rule_window;  // the largest window it may choose: the cells to reserve
      notes_ = describe(m, first_window());
    }
    PearlOptions options;
    options.window = adaptive_ ? first_window() : window_;
    options.pre_verify = !option_value<bool>(config_, no_pre_verify_option());
    options.post_verify = !option_value<bool>(config_, no_post_verify_option());
    engine_ = std::make_unique<PearlEngine>(drafter_port_, target_port_, options);
  }

  std::string name() const override { return "pearl"; }
  std::vector<std::string> notes() const override { return notes_; }

 protected:
  // Target: [cur, pending...] with pending < 2γ; the draft may run 2γ ahead.
  int spec_budget() const override { return 3 * window_ + 4; }

  void reset() override {
    drafter_port_.begin(sampling_);
    engine_->reset(seq_);
    if (adaptive_) {
      // Each request starts from the prior, so that a request's windows (and
      // with them a sampled run's draws) depend on nothing before it.
      accepted_ = rejected_ = 0;
      engine_->set_window(first_window());
    }
    stats_->draft_window = engine_->window();
  }

  void step(std::vector<int32_t>& emitted) override {
    engine_->step(rounds_);
    for (const PearlRound& round : rounds_) {
      stats_->observe_step(round.n_proposed, round.n_accepted);
      emitted.insert(emitted.end(), round.emitted.begin(), round.emitted.end());
      accepted_ += round.n_accepted;
      rejected_ += round.n_accepted < static_cast<int>(round.checked.size()) ? 1 : 0;
    }
    if (!adaptive_) return;
    engine_->set_window(fastest_window(costs_, acceptance()));
    stats_->draft_window = engine_->window();
  }

 private:
  // The engine's target port on the strategy's Target, on the caller's thread.
  class TargetPort final : public PearlTarget {
   public:
    explicit TargetPort(Pearl& pearl) : s_(pearl) {}

    void forward(std::span<const int32_t> tokens) override {
      Target& target = *s_.target_;
      logits_ = target.forward(chain_batch(target.n_committed(), tokens, true));
      probs_.assign(tokens.size(), Distribution());
    }

    bool check(int row, const DraftToken& draft, int32_t* correction) override {
      ScopedTimer timer(s_.stats_->t_verify_ms);
      if (s_.greedy()) {
        *correction = argmax(row_logits(row), s_.n_vocab());
        return *correction == draft.token;
      }
      return judge_sampled(probs(row), draft, s_.rng_, correction);
    }

    int32_t sample(int row) override {
      if (s_.greedy()) return argmax(row_logits(row), s_.n_vocab());
      return sample_from(probs(row), s_.rng_);
    }

    void commit(int n) override { s_.target_->commit_chain(n); }

   private:
    const float* row_logits(int row) const {
      return logits_.data() + static_cast<size_t>(row) * s_.n_vocab();
    }
    const Distribution& probs(int row) {
      Distribution& p = probs_.at(row);
      if (p.empty()) p = s_.distribution(row_logits(row));
      return p;
    }

    Pearl& s_;
    std::vector<float> logits_;
    std::vector<Distribution> probs_;  // filled on demand
  };

  // Per-draft acceptance so far (a draft is judged until the first rejection
  // of its round), starting from kPriorAcceptance as kPriorDrafts drafts.
  static constexpr double kPriorAcceptance = 0.7, kPriorDrafts = 10;
  double acceptance() const {
    return (accepted_ + kPriorAcceptance * kPriorDrafts) / (accepted_ + rejected_ + kPriorDrafts);
  }
  int first_window() const { return fastest_window(costs_, kPriorAcceptance); }

  std::unique_ptr<Worker> own_draft_worker_;
  TargetPort target_port_;
  DrafterPort drafter_port_;
  int window_ = 1;         // the window given, or the largest one the costs allow
  bool adaptive_ = false;  // the window follows the costs and the acceptance
  WindowCosts costs_;
  int64_t accepted_ = 0, rejected_ = 0;
  std::vector<std::string> notes_;
  std::unique_ptr<PearlEngine> engine_;  // declared last: its thread stops first
  std::vector<PearlRound> rounds_;
};

std::unique_ptr<Strategy> make_pearl(const StrategyConfig& config) {
  // The drafter runs at the same time as the target, so it needs threads of
  // its own: without -td, as many as the target's, on the same cores.
  std::unique_ptr<Worker> own;
  if (config.draft_worker == nullptr || config.draft_worker == config.target_worker) {
    check(config.target_worker != nullptr, "strategy 'pearl' needs a worker");
    own =
        std::make_unique<Worker>(config.target_worker->n_threads(), config.target_worker->cores());
  }
  return std::make_unique<Pearl>(config, std::move(own));
}

// The cost model's parallel chain: E(γ) + 1 − P(all γ accepted) tokens per
// round of max(γ·D, T(γ+1)) with cores of its own (γ·D + T(γ+1) without),
// over the efficiency measured at a calibration window.
std::shared_ptr<const CostFamily> pearl_cost() {
  auto family = std::make_shared<CostFamily>();
  family->calibration = CalibrationRole::parallel;
  family->complexity = 4;
  family->candidates = [](const CostMeasurements& m, int max_gamma) {
    std::vector<Candidate> out;
    for (int g = 1; g <= chain_reach(m, max_gamma); ++g) out.push_back({"pearl", g});
    return out;
  };
  family->predict = [](const CostMeasurements& m, const Candidate& c) {
    const int gamma = c.param;
    check(gamma >= 1, "cost model: pearl needs γ >= 1");
    const double drafted_ms = gamma * (m.draft_ms + m.draft_overhead_ms);
    const double verify_ms = target_step_ms(m, gamma + 1);
    Prediction p;
    p.tokens_per_step = expected_accepted(m, gamma) + 1 - m.accept_prefix[gamma - 1];
    p.ms_per_step = m.parallel ? std::max(drafted_ms, verify_ms) : drafted_ms + verify_ms;
    p.ms_per_step /= m.pearl_efficiency > 0 ? m.pearl_efficiency : 1;
    return p;
  };
  family->configure = [](StrategyConfig& config, const Candidate& c) {
    pearl_window_option().set(config, c.param);
    no_pre_verify_option().set(config, false);
    no_post_verify_option().set(config, false);
  };
  family->calibration_candidate = [](int window) { return Candidate{"pearl", window}; };
  return family;
}

}  // namespace

StrategyInfo pearl_strategy() {
  return {.name = "pearl",
          .summary = "PEARL: drafting and verification at the same time, adaptive draft length",
          .needs_draft = true,
          .options = {pearl_window_option(), no_pre_verify_option(), no_post_verify_option()},
          .variant_key = "pearl_window",
          .simulation_refusal =
              "strategy 'pearl' drafts on a thread of its own at the same time "
              "as it verifies, which a simulated clock does not follow",
          .cost = pearl_cost(),
          .make = make_pearl};
}

}  // namespace parspec
