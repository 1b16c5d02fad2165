#include "serve/forward_batcher.h"

#include <algorithm>
#include <map>
#include <utility>

#include "core/error.h"
#include "core/timer.h"

namespace parspec {

ForwardBatcher::ForwardBatcher(ForwardExecutor& executor, int token_budget,
                               ForwardExecutor* draft_executor, const Model* target)
    : executor_(executor),
      token_budget_(token_budget),
      draft_executor_(draft_executor),
      target_(target) {
  check(draft_executor_ == nullptr || (target_ != nullptr && draft_executor_ != &executor_),
        "a batcher's draft executor needs the target model and an executor of its own");
  check(token_budget_ >= 1, "the per-step token budget must be at least 1");
  if (draft_executor_ != nullptr) drafting_ = std::make_unique<TaskRunner>("draft passes");
}

void ForwardBatcher::join() {
  std::lock_guard lock(mutex_);
  ++joined_;
}

void ForwardBatcher::leave() {
  std::unique_lock lock(mutex_);
  --joined_;
  // The others may all be waiting for this thread.
  run_rounds(lock);
}

int ForwardBatcher::joined() const {
  std::lock_guard lock(mutex_);
  return joined_;
}

ForwardBatcher::Stats ForwardBatcher::stats() const {
  std::lock_guard lock(mutex_);
  return stats_;
}

std::vector<float> ForwardBatcher::forward(const Model& model, const Batch& batch, KvCache& kv) {
  const Model::SequenceBatch sequence{&batch, &kv};
  return std::move(forward_multi(model, std::span(&sequence, 1))[0]);
}

std::vector<std::vector<float>> ForwardBatcher::forward_multi(
    const Model& model, std::span<const Model::SequenceBatch> sequences) {
  size_t rows = 0;
  for (const Model::SequenceBatch& s : sequences) rows += s.batch->size();
  Pending p{&model, sequences, rows, 0, {}, nullptr, false};
  std::unique_lock lock(mutex_);
  check(joined_ > 0, "ForwardBatcher::forward called by a thread that did not join");
  p.order = next_order_++;
  pending_.push_back(&p);
  run_rounds(lock);
  cv_.wait(lock, [&] { return p.done; });
  if (p.error) std::rethrow_exception(p.error);
  return std::move(p.logits);
}

void ForwardBatcher::forward_layers(const Model&, const Batch&, KvCache&, int32_t, int, int,
                                    float*) {
  fail("the forward batcher runs whole forwards only (forward_layers)");
}

void ForwardBatcher::attention_output(const Model&, int, const Batch&, KvCache&, int32_t,
                                      const float*, float*, AttentionProbe*) {
  fail("the forward batcher runs whole forwards only (attention_output)");
}

void ForwardBatcher::mlp_block(const Model&, int, int, float*) {
  fail("the forward batcher runs whole forwards only (mlp_block)");
}

void ForwardBatcher::output_logits(const Model&, const float*, int, float*) {
  fail("the forward batcher runs whole forwards only (output_logits)");
}

void ForwardBatcher::wait_for_target_pass() {
  std::unique_lock lock(mutex_);
  check(joined_ > 0, "ForwardBatcher::wait_for_target_pass called by a thread that did not join");
  const int64_t passes = stats_.target_passes;
  const uint64_t release = releases_;
  ++waiting_;
  run_rounds(lock);
  cv_.wait(lock, [&] {
    return releases_ != release || (draft_executor_ == nullptr && stats_.target_passes != passes);
  });
  // A release counted every waiting thread out; a pass's end lets only this one go.
  if (releases_ == release) --waiting_;
}

void ForwardBatcher::run_rounds(std::unique_lock<std::mutex>& lock) {
  // The thread that completes the set runs the round (waiting threads count as
  // ready); a round in progress finishes first (its leader re-checks afterwards).
  while (!running_ && static_cast<int>(pending_.size()) + waiting_ >= joined_) {
    if (waiting_ > 0) {
      const bool target_pending = std::any_of(
          pending_.begin(), pending_.end(), [&](const Pending* p) { return p->model == target_; });
      // Release the waiting threads when their drafting can run beside a target
      // pass, or when nothing else is left to run: the round starts once their
      // forwards came.
      if ((draft_executor_ != nullptr && target_pending) || pending_.empty()) {
        waiting_ = 0;
        ++releases_;
        cv_.notify_all();
        return;
      }
    }
    if (pending_.empty()) return;
    run_round(lock);
  }
}

void ForwardBatcher::run_round(std::unique_lock<std::mutex>& lock) {
  // Smallest forwards first (decode and verification steps keep their pace),
  // then in arrival order, within the token budget.
  std::vector<Pending*> order = pending_;
  // Without a draft executor every pass runs on one executor, one after the other.
  // Then the target's pass waits while any request is still drafting, so that
  // one target forward serves every request's step: requests whose drafting
  // is out of phase would otherwise split the target's work over several
  // smaller passes, and each pass reads all of the target's weights.
  if (draft_executor_ == nullptr && target_ != nullptr &&
      std::any_of(order.begin(), order.end(),
                  [&](const Pending* p) { return p->model != target_; }))
    std::erase_if(order, [&](const Pending* p) { return p->model == target_; });
  std::stable_sort(order.begin(), order.end(), [](const Pending* a, const Pending* b) {
    if (a->rows != b->rows) return a->rows < b->rows;
    return a->order < b->order;
  });
  std::vector<Pending*> chosen;
  size_t rows = 0;
  for (Pending* p : order) {
    if (!chosen.empty() && rows + p->rows > static_cast<size_t>(token_budget_)) continue;
    chosen.push_back(p);
    rows += p->rows;
  }
  running_ = true;
  lock.unlock();

  // One pass per model, its sequences in the chosen order.
  std::map<const Model*, std::vector<Pending*>> by_model;
  std::vector<const Model*> models;
  for (Pending* p : chosen) {
    if (by_model.find(p->model) == by_model.end()) models.push_back(p->model);
    by_model[p->model].push_back(p);
  }
  // With a draft executor, the drafters' passes run on the batcher's drafting
  // thread while this thread runs the target's.
  const bool overlap =
      draft_executor_ != nullptr && by_model.count(target_) != 0 && by_model.size() > 1;
  double draft_ms = 0, target_ms = 0;
  if (overlap)
    drafting_->post([&] {
      const Stopwatch watch;
      for (const Model* model : models)
        if (model != target_) run_pass(*draft_executor_, *model, by_model.at(model));
      draft_ms = watch.elapsed_ms();
    });
  for (const Model* model : models) {
    if (overlap && model != target_) continue;
    const Stopwatch watch;
    // A drafter's passes stay on its own executor even when no target pass
    // runs beside them: a GPU executor keeps each cache's rows on its device.
    ForwardExecutor& executor =
        draft_executor_ != nullptr && model != target_ ? *draft_executor_ : executor_;
    run_pass(executor, *model, by_model.at(model));
    (model == target_ ? target_ms : draft_ms) += watch.elapsed_ms();
  }
  // run_pass keeps every error with its forwards, so the drafting task throws none.
  if (overlap) drafting_->wait();

  lock.lock();
  running_ = false;
  ++stats_.rounds;
  stats_.passes += static_cast<int64_t>(models.size());
  for (const Pending* p : chosen)
    stats_.sequence_forwards += static_cast<int64_t>(p->sequences.size());
  stats_.rows += static_cast<int64_t>(rows);
  stats_.overlapped += overlap ? 1 : 0;
  stats_.draft_ms += draft_ms;
  if (overlap) stats_.overlapped_draft_ms += std::min(draft_ms, target_ms);
  if (by_model.count(target_) != 0) {
    ++stats_.target_passes;
    for (const Pending* p : by_model[target_])
      stats_.target_sequence_forwards += static_cast<int64_t>(p->sequences.size());
  }
  for (Pending* p : chosen) {
    p->done = true;
    pending_.erase(std::find(pending_.begin(), pending_.end(), p));
  }
  cv_.notify_all();
}

void ForwardBatcher::run_pass(ForwardExecutor& executor, const Model& model,
                              const std::vector<Pending*>& group) {
  std::vector<Model::SequenceBatch> sequences;
  for (const Pending* p : group)
    sequences.insert(sequences.end(), p->sequences.begin(), p->sequences.end());
  try {
    std::vector<std::vector<float>> logits = executor.forward_multi(model, sequences);
    size_t next = 0;
    for (Pending* p : group)
      for (size_t i = 0; i < p->sequences.size(); ++i)
        p->logits.push_back(std::move(logits[next++]));
  } catch (...) {
    for (Pending* p : group) p->error = std::current_exception();
  }
}

}  // namespace parspec
