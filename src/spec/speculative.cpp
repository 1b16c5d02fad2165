#include "spec/speculative.h"

#include <numeric>

#include "core/error.h"
#include "sample/sampler.h"

namespace parspec {

namespace {

double ms_since(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
}

// Runs `f`; an Error it throws gets `role` in front, so that a message about a
// file also says whether it is the target or the draft.
template <class F>
void naming_role(const char* role, F&& f) {
  try {
    f();
  } catch (const Error& e) {
    fail(role, ": ", e.what());
  }
}

}  // namespace

void commit_chain(KvCache& kv, int32_t n_cells) {
  std::vector<int32_t> path(n_cells);
  std::iota(path.begin(), path.end(), 0);
  kv.commit(path);
}

SpeculativeStrategy::SpeculativeStrategy(const StrategyConfig& config) : config_(config) {
  check(config_.target != nullptr, "strategy '", config_.name, "' needs a target model");
  check(config_.draft != nullptr, "strategy '", config_.name,
        "' needs a draft model (-md/--model-draft)");
  check(config_.target_worker != nullptr, "strategy '", config_.name, "' needs a worker");
  if (config_.draft_worker == nullptr) config_.draft_worker = config_.target_worker;
  check(config_.draft->config().n_vocab == config_.target->config().n_vocab,
        "the draft model's vocabulary (", config_.draft->config().n_vocab,
        " tokens) differs from the target's (", config_.target->config().n_vocab,
        "): speculative decoding needs a shared tokenizer");
}

std::vector<float> SpeculativeStrategy::draft_forward(const Batch& batch) {
  const auto t0 = Clock::now();
  std::vector<float> logits;
  naming_role("draft model",
              [&] { logits = config_.draft->forward(*config_.draft_worker, batch, *draft_kv_); });
  stats_->t_draft_ms += ms_since(t0);
  ++stats_->draft_forwards;
  return logits;
}

std::vector<float> SpeculativeStrategy::target_forward(const Batch& batch) {
  const auto t0 = Clock::now();
  std::vector<float> logits;
  naming_role("target model", [&] {
    logits = config_.target->forward(*config_.target_worker, batch, *target_kv_);
  });
  stats_->t_verify_ms += ms_since(t0);
  ++stats_->target_forwards;
  return logits;
}

std::vector<float> SpeculativeStrategy::catch_up_draft(int32_t* n_cells) {
  check(draft_kv_->n_spec() == 0, "catch_up_draft: the draft cache has speculative cells");
  const std::span<const int32_t> tail(seq_.data() + draft_kv_->n_committed(),
                                      seq_.size() - draft_kv_->n_committed());
  check(!tail.empty(), "catch_up_draft: nothing to feed");
  *n_cells = static_cast<int32_t>(tail.size());
  return draft_forward(Batch::chain(*draft_kv_, tail, false));
}

Distribution SpeculativeStrategy::distribution(const float* logits) const {
  Distribution d;
  probabilities(logits, n_vocab(), sampling_, d);
  return d;
}

GenerationResult SpeculativeStrategy::generate(const GenerationRequest& req) {
  check(!req.prompt.empty(), "the prompt is empty");
  check(req.n_predict >= 0, "n_predict must not be negative");
  const int64_t needed = static_cast<int64_t>(req.prompt.size()) + req.n_predict;
  check(needed <= config_.ctx_size, "prompt (", req.prompt.size(), " tokens) + ", req.n_predict,
        " tokens to generate exceed the context size ", config_.ctx_size, " (raise -c/--ctx-size)");
  validate_sampling_params(req.sampling);
  sampling_ = req.sampling;
  rng_.reseed(req.sampling.seed);
  // Speculative cells come on top of the committed context; a step can emit
  // more tokens than were asked for, which stay in the caches unused.
  const int capacity = config_.ctx_size + spec_budget() + 2;
  target_kv_ = std::make_unique<KvCache>(config_.target->config(), capacity);
  draft_kv_ = std::make_unique<KvCache>(config_.draft->config(), capacity);
  seq_ = req.prompt;
  GenerationResult result;
  stats_ = &result.stats;
  stats_->n_prompt = static_cast<int>(req.prompt.size());
  reset();

  // Prefill both models with everything but the last prompt token (cur).
  const auto t0 = Clock::now();
  if (seq_.size() > 1) {
    const std::span<const int32_t> head(seq_.data(), seq_.size() - 1);
    constexpr size_t kChunk = 256;
    for (size_t b = 0; b < head.size(); b += kChunk) {
      const auto chunk = head.subspan(b, std::min(kChunk, head.size() - b));
      naming_role("target model", [&] {
        config_.target->forward(*config_.target_worker, Batch::chain(*target_kv_, chunk, false),
                                *target_kv_);
      });
      commit_chain(*target_kv_, target_kv_->n_spec());
      naming_role("draft model", [&] {
        config_.draft->forward(*config_.draft_worker, Batch::chain(*draft_kv_, chunk, false),
                               *draft_kv_);
      });
      commit_chain(*draft_kv_, draft_kv_->n_spec());
    }
  }
  const auto t1 = Clock::now();
  stats_->t_prompt_ms = ms_since(t0);
  stats_->t_draft_ms = stats_->t_verify_ms = 0;

  std::vector<int32_t> emitted;
  bool done = req.n_predict == 0;
  while (!done) {
    emitted.clear();
    remaining_ = req.n_predict - static_cast<int>(result.tokens.size());
    step(emitted);
    ++stats_->verify_steps;
    check(!emitted.empty(), "strategy '", name(), "' emitted no token");
    for (int32_t t : emitted) {
      result.tokens.push_back(t);
      seq_.push_back(t);
      if (req.on_token) req.on_token(t);
      if ((req.is_stop && req.is_stop(t)) ||
          static_cast<int>(result.tokens.size()) >= req.n_predict) {
        done = true;
        break;
      }
    }
  }
  stats_->n_gen = static_cast<int>(result.tokens.size());
  stats_->t_gen_ms = ms_since(t1);
  stats_ = nullptr;
  return result;
}

}  // namespace parspec
