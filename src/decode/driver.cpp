#include "decode/driver.h"

#include <algorithm>

#include "core/error.h"
#include "core/timer.h"
#include "sample/sampler.h"

namespace parspec {

namespace {

// Prompts are prefilled in chunks of this many tokens; batch invariance makes
// the result independent of the chunk size, which only bounds memory.
constexpr size_t kPrefillChunk = 256;

}  // namespace

void validate_request(const GenerationRequest& req, int ctx_size) {
  check(!req.prompt.empty(), "the prompt is empty");
  check(req.n_predict >= 0, "n_predict must not be negative");
  const int64_t needed = static_cast<int64_t>(req.prompt.size()) + req.n_predict;
  check(needed <= ctx_size, "prompt (", req.prompt.size(), " tokens) + ", req.n_predict,
        " tokens to generate exceed the context size ", ctx_size, " (raise -c/--ctx-size)");
  validate_sampling_params(req.sampling);
}

DecodeStrategy::DecodeStrategy(const StrategyConfig& config, std::unique_ptr<Target> target,
                               std::unique_ptr<Drafter> drafter)
    : config_(config), target_(std::move(target)), drafter_(std::move(drafter)) {
  check(target_ != nullptr, "strategy '", config_.name, "' needs a target");
}

Distribution DecodeStrategy::distribution(const float* logits) const {
  Distribution d;
  probabilities(logits, n_vocab(), sampling_, d);
  return d;
}

std::vector<float> DecodeStrategy::prefill_target(std::span<const int32_t> tokens) {
  std::vector<float> logits;
  for (size_t b = 0; b < tokens.size(); b += kPrefillChunk) {
    const auto chunk = tokens.subspan(b, std::min(kPrefillChunk, tokens.size() - b));
    logits = target_->forward(chain_batch(target_->n_committed(), chunk, false));
    target_->commit_chain(static_cast<int32_t>(chunk.size()));
  }
  return logits;
}

void DecodeStrategy::prefill_drafter(std::span<const int32_t> tokens) {
  for (size_t b = 0; b < tokens.size(); b += kPrefillChunk) {
    const auto chunk = tokens.subspan(b, std::min(kPrefillChunk, tokens.size() - b));
    drafter_->propose(chain_batch(drafter_->n_seen(), chunk, false));
    drafter_->accept_chain(static_cast<int32_t>(chunk.size()));
  }
}

void DecodeStrategy::prefill() {
  const std::span<const int32_t> head(seq_.data(), seq_.size() - 1);
  prefill_target(head);
  if (drafter_) prefill_drafter(head);
}

void DecodeStrategy::take_meters(GenerationStats* stats) {
  const ForwardMeter t = target_->take_meter();
  const ForwardMeter d = drafter_ ? drafter_->take_meter() : ForwardMeter{};
  if (stats == nullptr) return;
  stats->target_forwards += t.forwards;
  stats->t_verify_ms += t.ms;
  stats->expert_layer_passes += t.expert_layer_passes;
  stats->experts_touched += t.experts_touched;
  stats->draft_forwards += d.forwards;
  stats->t_draft_ms += d.ms;
}

GenerationResult DecodeStrategy::generate(const GenerationRequest& req) {
  validate_request(req, config_.ctx_size);
  sampling_ = req.sampling;
  rng_.reseed(req.sampling.seed);
  // Speculative cells come on top of the committed context; a step can emit
  // more tokens than were asked for, which stay in the caches unused.
  const int32_t capacity = config_.ctx_size + spec_budget() + 2;
  target_->begin(capacity);
  if (drafter_) drafter_->begin(capacity);
  seq_ = req.prompt;
  GenerationResult result;
  stats_ = &result.stats;
  stats_->n_prompt = static_cast<int>(req.prompt.size());
  reset();

  const Stopwatch prompt_watch;
  prefill();
  stats_->t_prompt_ms = prompt_watch.elapsed_ms();
  take_meters(nullptr);  // prefill forwards are not generation work

  const Stopwatch generation_watch;
  run_steps(req, result);
  stats_->n_gen = static_cast<int>(result.tokens.size());
  stats_->t_gen_ms = generation_watch.elapsed_ms();
  finish(*stats_);
  stats_ = nullptr;
  return result;
}

void DecodeStrategy::run_steps(const GenerationRequest& req, GenerationResult& result) {
  std::vector<int32_t> emitted;
  bool done = req.n_predict == 0;
  while (!done) {
    emitted.clear();
    remaining_ = req.n_predict - static_cast<int>(result.tokens.size());
    step(emitted);
    take_meters(stats_);
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
}

}  // namespace parspec
