#include "decode/speculative.h"

#include "core/error.h"
#include "core/timer.h"
#include "decode/local_model.h"
#include "decode/sides.h"

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

std::unique_ptr<Drafter> model_drafter(const StrategyConfig& config, Worker* chosen,
                                       std::unique_ptr<Drafter> own) {
  checked(config);
  if (own) return own;
  if (config.make_drafter) return config.make_drafter(config);
  Worker* worker = chosen != nullptr ? chosen : config.draft_worker;
  Worker& on = worker != nullptr ? *worker : *config.target_worker;
  return std::make_unique<ModelDrafter>(config.draft, on);
}

}  // namespace

SpeculativeStrategy::SpeculativeStrategy(const StrategyConfig& config, Worker* draft_worker,
                                         std::unique_ptr<Drafter> drafter)
    : DecodeStrategy(config, local_target(config),
                     model_drafter(config, draft_worker, std::move(drafter))) {
  if (config_.draft_worker == nullptr) config_.draft_worker = config_.target_worker;
}

int SpeculativeStrategy::verify_and_commit_chain(const std::vector<int32_t>& drafts,
                                                 const std::vector<Distribution>& q,
                                                 std::vector<int32_t>& emitted) {
  const int k = static_cast<int>(drafts.size());
  std::vector<int32_t> chain = {cur()};
  chain.insert(chain.end(), drafts.begin(), drafts.end());
  const std::vector<float> target_logits =
      target_->forward(chain_batch(target_->n_committed(), chain, true));
  ChainVerdict verdict;
  {
    ScopedTimer timer(stats_->t_verify_ms);
    if (greedy()) {
      verdict = verify_chain_greedy(drafts, target_logits.data(), n_vocab());
    } else {
      std::vector<Distribution> p;
      for (int i = 0; i <= k; ++i) p.push_back(distribution(&target_logits[size_t(i) * n_vocab()]));
      verdict = verify_chain_sampled(drafts, q, p, rng_);
    }
  }
  const int n = verdict.n_accepted;
  stats_->observe_step(k, n);
  emitted.assign(drafts.begin(), drafts.begin() + n);
  emitted.push_back(verdict.next_token);
  target_->commit_chain(1 + n);
  return n;
}

}  // namespace parspec
