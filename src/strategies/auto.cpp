// `auto`: runs what the cost model (tuning/cost_model.h) predicts fastest on
// this machine for this pair of models and threads: sd with a γ (guarded:
// plain steps while drafting does not pay), PEARL with a window, or ar when
// nothing is predicted to beat it. The measurements are
// cached (tuning/tuning.h); without a cache entry the strategy measures when
// it is made, reporting progress through tuning_progress(). Without a draft
// model it is ar.
#include <cstdio>

#include "decode/registry.h"
#include "tuning/tuning.h"

namespace parspec {

namespace {

// The option of strategies that time drafted steps against plain ones as
// they generate (sd's --speculation-guard).
constexpr const char* kSpeculationGuardKey = "speculation_guard";

class AutoStrategy final : public Strategy {
 public:
  explicit AutoStrategy(const StrategyConfig& config) {
    if (!config.draft) {
      chosen_ = reference_strategy_name();
      inner_ = make_strategy(config_for_candidate(config, reference_candidate()));
      notes_.push_back("auto: no draft model: " + chosen_);
      return;
    }
    TuneOptions options;
    options.calibration.progress = tuning_progress();
    const Tuning t = tune(config, options);
    chosen_ = t.choice.chosen.label();
    StrategyConfig chosen_config = config_for_candidate(config, t.choice.chosen);
    // The choice was made for the calibration's short context: where the
    // chosen strategy can check as it goes that drafting still pays, it does.
    for (const StrategyOption& option : strategy_info(t.choice.chosen.strategy).options)
      if (option.json_key == kSpeculationGuardKey) option.set(chosen_config, true);
    inner_ = make_strategy(chosen_config);
    notes_.push_back("auto: runs " + chosen_ + ": " + t.choice.reason +
                     (t.from_cache ? " (tuned earlier: " + t.cache_file + ")"
                                   : " (tuned now; cached in " + t.cache_file + ")"));
    for (const std::string& note : inner_->notes()) notes_.push_back(note);
  }

  std::string name() const override { return "auto"; }
  GenerationResult generate(const GenerationRequest& request) override {
    return inner_->generate(request);
  }
  std::vector<std::string> notes() const override { return notes_; }
  std::string runs() const override { return chosen_; }

 private:
  std::unique_ptr<Strategy> inner_;
  std::string chosen_;
  std::vector<std::string> notes_;
};

}  // namespace

StrategyInfo auto_strategy() {
  return {.name = "auto",
          .summary =
              "the strategy and parameter predicted fastest on this machine (parspec "
              "tune), ar when none beats it or without a draft model",
          .needs_draft = false,
          .options = {},
          .variant_key = "",
          .roles = {StrategyRole::generate_drafted},
          .mpirun_refusal =
              "strategy 'auto' tunes on a target in this process; under mpirun choose pp, stpp, "
              "pipedec, pearl, sd, tree or dyntree",
          .simulation_refusal =
              "strategy 'auto' chooses by timing this machine; simulate the "
              "strategies it chooses among (the candidates of simulate --plan)",
          .make = [](const StrategyConfig& c) { return std::make_unique<AutoStrategy>(c); }};
}

}  // namespace parspec
