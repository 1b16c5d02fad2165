#pragma once
// Continuous batching of forwards across requests. Each active request runs
// its strategy on its own thread, unchanged; its sides (BatchedTarget,
// BatchedDrafter) hand every forward to the ForwardBatcher, which waits until
// every joined request thread is waiting in a forward and then runs them all
// as one Model::forward_multi per model (the target's verifications of all
// requests in one pass, the drafters' proposals in another). Requests join and
// leave between rounds. Batch invariance makes each request's logits, and so
// its tokens, identical to a solo run.
#include <condition_variable>
#include <cstdint>
#include <exception>
#include <functional>
#include <memory>
#include <mutex>
#include <vector>

#include "core/worker.h"
#include "decode/sides.h"
#include "model/kv_cache.h"
#include "model/model.h"

namespace parspec {

class ForwardBatcher {
 public:
  // `token_budget`: batch rows one round may run (a round always runs at least
  // one forward); smaller forwards (decode and verification steps) go first,
  // prompt chunks fill the rest.
  // `draft_worker` (may be null): the passes of models other than `target` run
  // on it at the same time as the target's pass, so drafting for some
  // requests overlaps verification for others (CoSine's collaborative
  // pipeline); null: every pass runs on `worker`, one after the other.
  ForwardBatcher(Worker& worker, int token_budget, Worker* draft_worker = nullptr,
                 const Model* target = nullptr);

  // A thread joins before its first forward() and leaves after its last; a
  // round starts when every joined thread waits in forward().
  void join();
  void leave();
  // Runs `batch` on `kv` in the next round; returns its logits as
  // Model::forward would.
  std::vector<float> forward(const Model& model, const Batch& batch, KvCache& kv);
  // A joined thread whose request the scheduler left out of the coming
  // verification pass waits here without holding up rounds. With a draft
  // worker it returns when a round with a target pass is about to run, and
  // that round waits for its next forward, so its drafting runs beside the
  // verification (the collaborative pipeline); without one it returns when
  // that pass ended. At once when no other joined thread has work left.
  void wait_for_target_pass();

  struct Stats {
    int64_t rounds = 0;                    // rounds run
    int64_t passes = 0;                    // forward_multi calls (one per model per round)
    int64_t sequence_forwards = 0;         // forwards served
    int64_t rows = 0;                      // batch rows run
    int64_t overlapped = 0;                // rounds whose draft passes ran beside the target's
    int64_t target_passes = 0;             // passes of the target model
    int64_t target_sequence_forwards = 0;  // requests' target forwards those passes served
    // Of overlapped rounds: drafting time that ran while the target's pass ran
    // (per round the shorter of the two), and the drafting time in all.
    double overlapped_draft_ms = 0;
    double draft_ms = 0;
  };
  Stats stats() const;
  int joined() const;

 private:
  struct Pending {
    const Model* model;
    const Batch* batch;
    KvCache* kv;
    uint64_t order;
    std::vector<float> logits;
    std::exception_ptr error;
    bool done = false;
  };
  void run_rounds(std::unique_lock<std::mutex>& lock);
  void run_round(std::unique_lock<std::mutex>& lock);

  // Runs one model's pass over `group`, storing logits or the error in each.
  void run_pass(Worker& worker, const Model& model, const std::vector<Pending*>& group);

  Worker& worker_;
  const int token_budget_;
  Worker* draft_worker_;
  const Model* target_;
  mutable std::mutex mutex_;
  std::condition_variable cv_;
  int joined_ = 0;
  int waiting_ = 0;        // joined threads in wait_for_target_pass(), not released
  uint64_t releases_ = 0;  // wait_for_target_pass() releases so far
  bool running_ = false;
  uint64_t next_order_ = 0;
  std::vector<Pending*> pending_;
  Stats stats_;
};

// A sequence of one request on one model whose forwards go through a batcher.
class BatchedSequence {
 public:
  BatchedSequence(std::shared_ptr<const Model> model, ForwardBatcher& batcher, const char* role);
  const Model& model() const { return *model_; }
  void begin(int32_t capacity);
  KvCache& kv() const;
  std::vector<float> forward(const Batch& batch);
  ForwardMeter take_meter();

 private:
  std::shared_ptr<const Model> model_;
  ForwardBatcher& batcher_;
  const char* role_;
  std::unique_ptr<KvCache> kv_;
  ForwardMeter meter_;
};

class BatchedTarget final : public Target {
 public:
  // `before_forward` (may be empty) runs before each forward: a step's emitted
  // tokens are complete then (the server tells accepted drafts from the
  // target's own tokens with it).
  BatchedTarget(std::shared_ptr<const Model> model, ForwardBatcher& batcher,
                std::function<void()> before_forward);
  int n_vocab() const override { return seq_.model().config().n_vocab; }
  void begin(int32_t capacity) override { seq_.begin(capacity); }
  int32_t n_committed() const override { return seq_.kv().n_committed(); }
  int32_t n_spec() const override { return seq_.kv().n_spec(); }
  std::vector<float> forward(const Batch& batch) override;
  std::vector<int32_t> commit(std::span<const int32_t> path,
                              std::span<const int32_t> keep) override {
    return seq_.kv().commit(path, keep);
  }
  void truncate(int32_t n) override { seq_.kv().truncate(n); }
  ForwardMeter take_meter() override { return seq_.take_meter(); }

 private:
  BatchedSequence seq_;
  std::function<void()> before_forward_;
};

class BatchedDrafter final : public Drafter {
 public:
  BatchedDrafter(std::shared_ptr<const Model> model, ForwardBatcher& batcher)
      : seq_(std::move(model), batcher, "draft model") {}
  int n_vocab() const override { return seq_.model().config().n_vocab; }
  void begin(int32_t capacity) override { seq_.begin(capacity); }
  int32_t n_seen() const override { return seq_.kv().n_committed(); }
  int32_t n_spec() const override { return seq_.kv().n_spec(); }
  std::vector<float> propose(const Batch& nodes) override { return seq_.forward(nodes); }
  std::vector<int32_t> accept(std::span<const int32_t> path,
                              std::span<const int32_t> keep) override {
    return seq_.kv().commit(path, keep);
  }
  void roll_back(int32_t n) override {
    if (seq_.kv().n_committed() > n) seq_.kv().truncate(n);
  }
  ForwardMeter take_meter() override { return seq_.take_meter(); }

 private:
  BatchedSequence seq_;
};

}  // namespace parspec
