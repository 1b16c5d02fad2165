#include "decode/speculative.h"

#include "core/error.h"
#include "decode/local_model.h"

namespace parspec {

namespace {

const StrategyConfig& checked(const StrategyConfig& config) {
  check(config.target != nullptr, "strategy '", config.name, "' needs a target model");
  check(config.draft != nullptr, "strategy '", config.name,
        "' needs a draft model (-md/--model-draft)");
  check(config.target_worker != nullptr, "strategy '", config.name, "' needs a worker");
  check(config.draft->config().n_vocab == config.target->config().n_vocab,
        "the draft model's vocabulary (", config.draft->config().n_vocab,
        " tokens) differs from the target's (", config.target->config().n_vocab,
        "): speculative decoding needs a shared tokenizer");
  return config;
}

// Both sides check the config first: the order they are made in is unspecified.
std::unique_ptr<Target> local_target(const StrategyConfig& config) {
  checked(config);
  return make_target_side(config);
}

std::unique_ptr<Drafter> model_drafter(const StrategyConfig& config, Worker* chosen) {
  checked(config);
  if (config.make_drafter) return config.make_drafter(config);
  Worker* worker = chosen != nullptr ? chosen : config.draft_worker;
  return std::make_unique<ModelDrafter>(config.draft,
                                        worker != nullptr ? *worker : *config.target_worker);
}

}  // namespace

SpeculativeStrategy::SpeculativeStrategy(const StrategyConfig& config, Worker* draft_worker)
    : DecodeStrategy(config, local_target(config), model_drafter(config, draft_worker)) {
  if (config_.draft_worker == nullptr) config_.draft_worker = config_.target_worker;
}

}  // namespace parspec
