// `ar`: plain autoregressive decoding, the reference every other strategy
// must reproduce. The target holds the whole sequence: the prompt is
// prefilled with its last token, so each step samples from the logits at hand
// and runs the previous step's token first.
#include <optional>

#include "decode/driver.h"
#include "decode/local_model.h"
#include "decode/registry.h"
#include "sample/sampler.h"
#include "tuning/cost_family.h"

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

// The cost model's reference: 1 token per T(1).
std::shared_ptr<const CostFamily> ar_cost() {
  auto family = std::make_shared<CostFamily>();
  family->calibration = CalibrationRole::reference;
  family->complexity = 0;
  family->candidates = [](const CostMeasurements&, int) { return std::vector<Candidate>{{"ar"}}; };
  family->predict = [](const CostMeasurements& m, const Candidate&) {
    Prediction p;
    p.tokens_per_step = 1;
    p.ms_per_step = target_step_ms(m, 1);
    return p;
  };
  family->configure = [](StrategyConfig&, const Candidate&) {};
  family->calibration_candidate = [](int) { return Candidate{"ar"}; };
  return family;
}

StrategyInfo ar_strategy() {
  return {
      .name = "ar",
      .summary = "plain autoregressive decoding, the reference",
      .needs_draft = false,
      .options = {},
      .variant_key = "",
      .roles = {StrategyRole::reference, StrategyRole::generate_plain, StrategyRole::serve_plain},
      .served = true,
      .cost = ar_cost(),
      .make = [](const StrategyConfig& c) { return std::make_unique<Autoregressive>(c); }};
}

}  // namespace parspec
