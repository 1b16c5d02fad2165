// `ar`: plain autoregressive decoding, the reference every other strategy
// must reproduce. The target holds the whole sequence: the prompt is
// prefilled with its last token, so each step samples from the logits at hand
// and runs the previous step's token first.
#include <optional>

#include "decode/driver.h"
#include "decode/local_model.h"
#include "decode/registry.h"
#include "sample/sampler.h"

namespace parspec {

namespace {

class Autoregressive final : public DecodeStrategy {
 public:
  explicit Autoregressive(const StrategyConfig& config)
      : DecodeStrategy(config, make_target_side(config), nullptr) {}

  std::string name() const override { return "ar"; }

 protected:
  int spec_budget() const override { return 0; }
  void reset() override { sampler_.emplace(sampling_); }
  void prefill() override { logits_ = prefill_target(seq_); }
  void finish(GenerationStats& stats) override { stats.t_verify_ms = stats.t_gen_ms; }

  void step(std::vector<int32_t>& emitted) override {
    // The first step samples after the prompt; later ones first run the token
    // the previous step emitted (so nothing runs after the last token).
    if (target_->n_committed() < static_cast<int32_t>(seq_.size())) {
      const int32_t token = cur();
      logits_ = target_->forward(chain_batch(target_->n_committed(), std::span(&token, 1), true));
      target_->commit_chain(1);
    }
    emitted.push_back(sampler_->sample(logits_.data(), n_vocab()));
  }

 private:
  std::optional<Sampler> sampler_;
  std::vector<float> logits_;
};

}  // namespace

StrategyInfo ar_strategy() {
  return {.name = "ar",
          .summary = "plain autoregressive decoding, the reference",
          .needs_draft = false,
          .options = {},
          .variant_key = "",
          .make = [](const StrategyConfig& c) { return std::make_unique<Autoregressive>(c); }};
}

}  // namespace parspec
