#include "decode/local_model.h"

#include <utility>

#include "core/error.h"
#include "core/timer.h"

namespace parspec {

LocalSequence::LocalSequence(std::shared_ptr<const Model> model, ForwardExecutor& executor,
                             const char* role)
    : model_(std::move(model)), executor_(executor), role_(role) {
  check(model_ != nullptr, "a local model side needs a model");
}

LocalSequence::LocalSequence(std::shared_ptr<const Model> model, Worker& worker, const char* role)
    : model_(std::move(model)),
      own_executor_(std::make_unique<CpuExecutor>(worker)),
      executor_(*own_executor_),
      role_(role) {
  check(model_ != nullptr, "a local model side needs a model");
}

void LocalSequence::begin(int32_t capacity) {
  // The next request of the same size reuses the cache (its pages are already in memory).
  if (kv_ != nullptr && kv_->capacity() == capacity)
    kv_->clear();
  else
    kv_ = std::make_unique<KvCache>(model_->config(), capacity);
}

KvCache& LocalSequence::kv() {
  check(kv_ != nullptr, "a model side was used before begin()");
  return *kv_;
}

std::vector<float> LocalSequence::forward(const Batch& batch) {
  ScopedTimer timer(meter_.ms);
  ++meter_.forwards;
  // The model's tally counts every forward of the model; this sequence's are
  // the difference across its own (a model shared with other running
  // sequences would count theirs too).
  const ExpertTally& tally = model_->expert_tally();
  const int64_t passes = tally.layer_passes, touched = tally.experts_touched;
  try {
    std::vector<float> logits = executor_.forward(*model_, batch, kv());
    meter_.expert_layer_passes += tally.layer_passes - passes;
    meter_.experts_touched += tally.experts_touched - touched;
    return logits;
  } catch (const Error& e) {
    fail(role_, ": ", e.what());
  }
}

ForwardMeter LocalSequence::take_meter() {
  return std::exchange(meter_, ForwardMeter{});
}

std::unique_ptr<Target> make_target_side(const StrategyConfig& config) {
  if (config.make_target) return config.make_target(config);
  check(config.target != nullptr && config.target_worker != nullptr, "strategy '", config.name,
        "' needs a target model and a worker");
  return std::make_unique<LocalTarget>(config.target, *config.target_worker);
}

std::unique_ptr<Drafter> make_drafter_side(const StrategyConfig& config) {
  if (config.make_drafter) return config.make_drafter(config);
  check(config.draft != nullptr && config.target_worker != nullptr, "strategy '", config.name,
        "' needs a draft model and a worker");
  Worker& worker = config.draft_worker != nullptr ? *config.draft_worker : *config.target_worker;
  return std::make_unique<ModelDrafter>(config.draft, worker);
}

int32_t LocalTarget::n_committed() const {
  return seq_.kv().n_committed();
}
int32_t LocalTarget::n_spec() const {
  return seq_.kv().n_spec();
}
std::vector<float> LocalTarget::forward(const Batch& batch) {
  if (before_forward_) before_forward_();
  return seq_.forward(batch);
}
int32_t ModelDrafter::n_seen() const {
  return seq_.kv().n_committed();
}
int32_t ModelDrafter::n_spec() const {
  return seq_.kv().n_spec();
}

void ModelDrafter::roll_back(int32_t n) {
  if (seq_.kv().n_committed() > n) seq_.kv().truncate(n);
}

}  // namespace parspec
