#pragma once
// Continuous batching of forwards across requests. Each active request runs
// its strategy on its own thread, unchanged; its sides (a LocalTarget and
// ModelDrafters on the batcher, an executor like any other) hand every forward
// to the ForwardBatcher, which waits until every joined request thread is
// waiting in a forward and then runs them all as one forward_multi per model
// on the executor underneath (the target's verifications of all requests in
// one pass, the drafters' proposals in another). Requests join and leave
// between rounds. Batch invariance makes each request's logits, and so its
// tokens, identical to a solo run.
#include <condition_variable>
#include <cstdint>
#include <exception>
#include <memory>
#include <mutex>
#include <vector>

#include "core/threads.h"
#include "model/executor.h"
#include "model/kv_cache.h"
#include "model/model.h"

namespace parspec {

class ForwardBatcher final : public ForwardExecutor {
 public:
  // `token_budget`: batch rows one round may run (a round always runs at least
  // one forward); smaller forwards (decode and verification steps) go first,
  // prompt chunks fill the rest.
  // Rounds run their passes on `executor`. `draft_executor` (may be null):
  // the passes of models other than `target` run on it, on a thread of the
  // batcher's own, at the same time as the target's pass, so drafting for
  // some requests overlaps verification for others (CoSine's collaborative
  // pipeline); null: every pass runs on `executor`, one after the other.
  ForwardBatcher(ForwardExecutor& executor, int token_budget,
                 ForwardExecutor* draft_executor = nullptr, const Model* target = nullptr);

  // A thread joins before its first forward() and leaves after its last; a
  // round starts when every joined thread waits in forward().
  void join();
  void leave();
  // Runs `batch` on `kv` in the next round; returns its logits as
  // Model::forward would. Called by joined threads only.
  std::vector<float> forward(const Model& model, const Batch& batch, KvCache& kv) override;
  // The sequences go into the next round together, as one thread's forward.
  std::vector<std::vector<float>> forward_multi(
      const Model& model, std::span<const Model::SequenceBatch> sequences) override;
  // Rounds are made of whole forwards: the layer pieces throw parspec::Error.
  void forward_layers(const Model& model, const Batch& batch, KvCache& kv, int32_t first_cell,
                      int layer_first, int layer_last, float* hidden) override;
  void attention_output(const Model& model, int layer, const Batch& batch, KvCache& kv,
                        int32_t first_cell, const float* hidden, float* out,
                        AttentionProbe* probe) override;
  void mlp_block(const Model& model, int layer, int n_tokens, float* hidden) override;
  void output_logits(const Model& model, const float* hidden, int n, float* logits) override;
  // A joined thread whose request the scheduler left out of the coming
  // verification pass waits here without holding up rounds. With a draft
  // executor it returns when a round with a target pass is about to run, and
  // that round waits for its next forward, so its drafting runs beside the
  // verification (the collaborative pipeline); without one it returns when
  // that pass ended. At once when no other joined thread has work left.
  void wait_for_target_pass();

  struct Stats {
    int64_t rounds = 0;                    // rounds run
    int64_t passes = 0;                    // forward_multi calls (one per model per round)
    int64_t sequence_forwards = 0;         // sequences' forwards served
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
  // One joined thread's forward, waiting for its round.
  struct Pending {
    const Model* model;
    std::span<const Model::SequenceBatch> sequences;
    size_t rows;
    uint64_t order;
    std::vector<std::vector<float>> logits;  // one per sequence
    std::exception_ptr error;
    bool done = false;
  };
  void run_rounds(std::unique_lock<std::mutex>& lock);
  void run_round(std::unique_lock<std::mutex>& lock);

  // Runs one model's pass over `group`, storing logits or the error in each.
  void run_pass(ForwardExecutor& executor, const Model& model, const std::vector<Pending*>& group);

  ForwardExecutor& executor_;
  const int token_budget_;
  ForwardExecutor* draft_executor_;
  const Model* target_;
  // Runs the draft passes beside the target's (with a draft executor only).
  std::unique_ptr<TaskRunner> drafting_;
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

}  // namespace parspec
