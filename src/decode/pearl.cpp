// `pearl`: PEARL (Liu et al.), parallel speculative decoding with adaptive
// draft length. The scheduler (pre-verify / post-verify and the drafter
// thread) is PearlEngine; this file puts the two models behind it: the draft
// model on its own worker, driven by the engine's drafter thread, and the
// target on the target worker, driven by the caller's thread.

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>

#include "core/error.h"
#include "decode/pearl_engine.h"
#include "decode/speculative.h"
#include "decode/strategies.h"
#include "model/forward_timing.h"
#include "sample/sampler.h"

namespace parspec {

namespace {

using Clock = std::chrono::steady_clock;

double ms_since(Clock::time_point t0) {
  return std::chrono::duration<double, std::milli>(Clock::now() - t0).count();
}

// splitmix64's finalizer: a bijection that scatters nearby inputs.
uint64_t mix64(uint64_t x) {
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ULL;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebULL;
  return x ^ (x >> 31);
}

// A cache holding a short committed context, with room for `n_tokens` more,
// to time forwards on.
KvCache timing_cache(const Model& model, Worker& worker, int n_tokens) {
  constexpr int kContext = 32;
  const int n_vocab = model.config().n_vocab;
  KvCache kv(model.config(), kContext + n_tokens + 1);
  std::vector<int32_t> prefix(kContext);
  for (int i = 0; i < kContext; ++i) prefix[i] = i % n_vocab;
  model.forward(worker, Batch::chain(kv, prefix, false), kv);
  commit_chain(kv, kContext);
  return kv;
}

// The draft model behind the engine's drafter thread. Its cache holds a prefix
// of the engine's context: each call feeds what the cache misses (usually the
// previous draft) in one forward.
class ModelDrafter final : public PearlDrafter {
 public:
  ModelDrafter(std::shared_ptr<const Model> model, Worker& worker)
      : model_(std::move(model)), worker_(worker) {}

  // A new sequence: `kv` is the request's draft cache (prefilled by the caller
  // before the first draft).
  void begin(KvCache* kv, const SamplingParams& sampling) {
    kv_ = kv;
    sampling_ = sampling;
    seed_ = mix64(mix64(sampling.seed ^ 0x5eed0f0d2a1f7e11ULL));
    forwards_ = 0;
    forward_ms_ = 0;
  }

  DraftToken next(std::span<const int32_t> context, uint64_t draw) override {
    const size_t fed = static_cast<size_t>(kv_->n_committed());
    check(fed < context.size(), "pearl: the draft cache is ahead of the sequence");
    const std::span<const int32_t> tail = context.subspan(fed);
    const auto t0 = Clock::now();
    const std::vector<float> logits =
        model_->forward(worker_, Batch::chain(*kv_, tail, false), *kv_);
    commit_chain(*kv_, static_cast<int32_t>(tail.size()));
    forward_ms_ += ms_since(t0);
    ++forwards_;
    DraftToken draft;
    const int n_vocab = model_->config().n_vocab;
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

  void rollback(size_t n) override {
    if (static_cast<size_t>(kv_->n_committed()) > n) kv_->truncate(static_cast<int32_t>(n));
  }

  // Adds the forwards and their time since the last call (drafter idle).
  void take_counters(int64_t* forwards, double* ms) {
    *forwards += forwards_;
    *ms += forward_ms_;
    forwards_ = 0;
    forward_ms_ = 0;
  }

 private:
  std::shared_ptr<const Model> model_;
  Worker& worker_;
  KvCache* kv_ = nullptr;
  SamplingParams sampling_;
  uint64_t seed_ = 0;
  int64_t forwards_ = 0;
  double forward_ms_ = 0;
};

class Pearl final : public SpeculativeStrategy {
 public:
  explicit Pearl(const StrategyConfig& config) : SpeculativeStrategy(config), target_side_(*this) {
    if (config_.draft_worker == config_.target_worker) {
      // The drafter runs at the same time as the target, so it needs threads
      // of its own: as many as the target's, on the same cores.
      own_draft_worker_ = std::make_unique<Worker>(config_.target_worker->n_threads(),
                                                   config_.target_worker->cores());
      config_.draft_worker = own_draft_worker_.get();
    }
    window_ = config_.pearl_window > 0 ? config_.pearl_window : measure_window();
    drafter_ = std::make_unique<ModelDrafter>(config_.draft, *config_.draft_worker);
    PearlOptions options;
    options.window = window_;
    options.pre_verify = config_.pre_verify;
    options.post_verify = config_.post_verify;
    engine_ = std::make_unique<PearlEngine>(*drafter_, target_side_, options);
  }

  std::string name() const override { return "pearl"; }

 protected:
  // Target: [cur, pending...] with pending < 2γ; the draft may run 2γ ahead.
  int spec_budget() const override { return 3 * window_ + 4; }

  void reset() override {
    drafter_->begin(draft_kv_.get(), sampling_);
    engine_->reset(seq_);
    stats_->draft_window = window_;
  }

  void step(std::vector<int32_t>& emitted) override {
    engine_->step(rounds_);
    for (const PearlRound& round : rounds_) {
      for (int i = 0; i < round.n_proposed; ++i) stats_->per_position.add(i, i < round.n_accepted);
      stats_->drafted += round.n_proposed;
      stats_->accepted += round.n_accepted;
      emitted.insert(emitted.end(), round.emitted.begin(), round.emitted.end());
    }
    drafter_->take_counters(&stats_->draft_forwards, &stats_->t_draft_ms);
  }

 private:
  // The target behind the engine, on the caller's thread.
  class TargetSide final : public PearlTarget {
   public:
    explicit TargetSide(Pearl& pearl) : s_(pearl) {}

    void forward(std::span<const int32_t> tokens) override {
      logits_ = s_.target_forward(Batch::chain(*s_.target_kv_, tokens, true));
      probs_.assign(tokens.size(), Distribution());
    }

    bool check(int row, const DraftToken& draft, int32_t* correction) override {
      const auto t0 = Clock::now();
      bool accepted = false;
      if (s_.greedy()) {
        const int32_t best = argmax(row_logits(row), s_.n_vocab());
        accepted = best == draft.token;
        *correction = best;
      } else {
        accepted = judge_sampled(probs(row), draft, s_.rng_, correction);
      }
      s_.stats_->t_verify_ms += ms_since(t0);
      return accepted;
    }

    int32_t sample(int row) override {
      if (s_.greedy()) return argmax(row_logits(row), s_.n_vocab());
      return sample_from(probs(row), s_.rng_);
    }

    void commit(int n) override { commit_chain(*s_.target_kv_, n); }

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

  int measure_window() {
    // t(forward) as the paper means it: one token, median of 7 after 2 warm-ups.
    constexpr int kMaxWindow = 64, kWarmup = 2, kRuns = 7;
    const Model& target = *config_.target;
    Worker& target_worker = *config_.target_worker;
    KvCache target_kv = timing_cache(target, target_worker, kMaxWindow);
    KvCache draft_kv = timing_cache(*config_.draft, *config_.draft_worker, 1);
    const double t_target =
        median_forward_ms(target, target_worker, target_kv, 1, kWarmup, kRuns, true);
    const double t_draft =
        median_forward_ms(*config_.draft, *config_.draft_worker, draft_kv, 1, kWarmup, kRuns, true);
    const double c = t_draft > 0 ? t_target / t_draft : 1.0;
    const int window =
        static_cast<int>(std::clamp(std::lround(c), 1L, static_cast<long>(kMaxWindow)));
    std::fprintf(stderr,
                 "pearl: target forward %.3f ms, draft forward %.3f ms on this machine: speed "
                 "ratio c = %.2f, window γ = %d (--draft-max overrides)\n",
                 t_target, t_draft, c, window);
    // The rule presumes that verifying γ tokens costs about one forward (true
    // of memory-bound GPUs); say so when this machine disagrees.
    const double t_window =
        median_forward_ms(target, target_worker, target_kv, window, kWarmup, kRuns, true);
    if (window > 1 && t_window > 2 * t_target)
      std::fprintf(stderr,
                   "pearl: note: a target forward over %d tokens takes %.3f ms here (%.1fx one "
                   "token), which the rule assumes to be nearly free; a smaller --draft-max may "
                   "be faster\n",
                   window, t_window, t_window / t_target);
    return window;
  }

  TargetSide target_side_;
  std::unique_ptr<Worker> own_draft_worker_;
  int window_ = 1;
  std::unique_ptr<ModelDrafter> drafter_;
  std::unique_ptr<PearlEngine> engine_;  // declared last: its thread stops first
  std::vector<PearlRound> rounds_;
};

}  // namespace

std::unique_ptr<Strategy> make_pearl(const StrategyConfig& config) {
  return std::make_unique<Pearl>(config);
}

}  // namespace parspec
