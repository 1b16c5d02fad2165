#pragma once
// Target and Drafter on a Model and a KvCache of this process, whose forwards
// run through a ForwardExecutor: a CpuExecutor (a Worker's threads) for a
// command-line run, the server's ForwardBatcher (one multi-sequence forward
// for many requests) in the server.
#include <functional>
#include <memory>

#include "core/worker.h"
#include "decode/sides.h"
#include "decode/strategy.h"
#include "model/executor.h"
#include "model/kv_cache.h"
#include "model/model.h"

namespace parspec {

// A model's sequence in one KvCache, with forwards timed; the common part of
// LocalTarget and ModelDrafter.
class LocalSequence {
 public:
  // `role` ("target model", "draft model") prefixes the errors of its forwards,
  // so a message about a file also says which side it is. The executor must
  // outlive the sequence.
  LocalSequence(std::shared_ptr<const Model> model, ForwardExecutor& executor, const char* role);
  // On a CpuExecutor of its own over `worker`.
  LocalSequence(std::shared_ptr<const Model> model, Worker& worker, const char* role);

  const Model& model() const { return *model_; }
  ForwardExecutor& executor() const { return executor_; }
  void begin(int32_t capacity);
  KvCache& kv();
  std::vector<float> forward(const Batch& batch);
  ForwardMeter take_meter();

 private:
  std::shared_ptr<const Model> model_;
  std::unique_ptr<ForwardExecutor> own_executor_;
  ForwardExecutor& executor_;
  const char* role_;
  std::unique_ptr<KvCache> kv_;
  ForwardMeter meter_;
};

class LocalTarget final : public Target {
 public:
  // `before_forward` (may be empty) runs before each forward: a step's emitted
  // tokens are complete then (the server tells accepted drafts from the
  // target's own tokens with it).
  LocalTarget(std::shared_ptr<const Model> model, ForwardExecutor& executor,
              std::function<void()> before_forward = {})
      : seq_(std::move(model), executor, "target model"),
        before_forward_(std::move(before_forward)) {}
  LocalTarget(std::shared_ptr<const Model> model, Worker& worker)
      : seq_(std::move(model), worker, "target model") {}

  const Model& model() const { return seq_.model(); }
  ForwardExecutor& executor() const { return seq_.executor(); }
  int n_vocab() const override { return seq_.model().config().n_vocab; }
  void begin(int32_t capacity) override { seq_.begin(capacity); }
  int32_t n_committed() const override;
  int32_t n_spec() const override;
  std::vector<float> forward(const Batch& batch) override;
  std::vector<int32_t> commit(std::span<const int32_t> path,
                              std::span<const int32_t> keep) override {
    return seq_.kv().commit(path, keep);
  }
  void truncate(int32_t n) override { seq_.kv().truncate(n); }
  ForwardMeter take_meter() override { return seq_.take_meter(); }

 private:
  mutable LocalSequence seq_;
  std::function<void()> before_forward_;
};

// The config's target side: config.make_target's, or a LocalTarget.
std::unique_ptr<Target> make_target_side(const StrategyConfig& config);

class ModelDrafter final : public Drafter {
 public:
  ModelDrafter(std::shared_ptr<const Model> model, ForwardExecutor& executor)
      : seq_(std::move(model), executor, "draft model") {}
  ModelDrafter(std::shared_ptr<const Model> model, Worker& worker)
      : seq_(std::move(model), worker, "draft model") {}

  int n_vocab() const override { return seq_.model().config().n_vocab; }
  void begin(int32_t capacity) override { seq_.begin(capacity); }
  int32_t n_seen() const override;
  int32_t n_spec() const override;
  std::vector<float> propose(const Batch& nodes) override { return seq_.forward(nodes); }
  std::vector<int32_t> accept(std::span<const int32_t> path,
                              std::span<const int32_t> keep) override {
    return seq_.kv().commit(path, keep);
  }
  void roll_back(int32_t n) override;
  ForwardMeter take_meter() override { return seq_.take_meter(); }

 private:
  mutable LocalSequence seq_;
};

// The config's drafter side for its draft model: config.make_drafter's, or a
// ModelDrafter on the draft worker (the target's when none).
std::unique_ptr<Drafter> make_drafter_side(const StrategyConfig& config);

}  // namespace parspec
