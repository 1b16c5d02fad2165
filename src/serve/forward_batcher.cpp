#include "serve/forward_batcher.h"

#include <algorithm>
#include <map>
#include <thread>
#include <utility>

#include "core/error.h"
#include "core/timer.h"

namespace parspec {

ForwardBatcher::ForwardBatcher(Worker& worker, int token_budget, Worker* draft_worker,
                               const Model* target)
    : worker_(worker), token_budget_(token_budget), draft_worker_(draft_worker), target_(target) {
  check(draft_worker_ == nullptr || (target_ != nullptr && draft_worker_ != &worker_),
        "a batcher's draft worker needs the target model and a worker of its own");
  check(token_budget_ >= 1, "the per-step token budget must be at least 1");
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
  Pending p{&model, &batch, &kv, 0, {}, nullptr, false};
  std::unique_lock lock(mutex_);
  check(joined_ > 0, "ForwardBatcher::forward called by a thread that did not join");
  p.order = next_order_++;
  pending_.push_back(&p);
  run_rounds(lock);
  cv_.wait(lock, [&] { return p.done; });
  if (p.error) std::rethrow_exception(p.error);
  return std::move(p.logits);
}

void ForwardBatcher::wait_for_target_pass() {
  std::unique_lock lock(mutex_);
  check(joined_ > 0, "ForwardBatcher::wait_for_target_pass called by a thread that did not join");
  const int64_t passes = stats_.target_passes;
  const uint64_t release = releases_;
  ++waiting_;
  run_rounds(lock);
  cv_.wait(lock, [&] {
    return releases_ != release || (draft_worker_ == nullptr && stats_.target_passes != passes);
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
      if ((draft_worker_ != nullptr && target_pending) || pending_.empty()) {
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
  // Without a draft worker every pass runs on one worker, one after the other.
  // Then the target's pass waits while any request is still drafting, so that
  // one target forward serves every request's step: requests whose drafting
  // is out of phase would otherwise split the target's work over several
  // smaller passes, and each pass reads all of the target's weights.
  if (draft_worker_ == nullptr && target_ != nullptr &&
      std::any_of(order.begin(), order.end(),
                  [&](const Pending* p) { return p->model != target_; }))
    std::erase_if(order, [&](const Pending* p) { return p->model == target_; });
  std::stable_sort(order.begin(), order.end(), [](const Pending* a, const Pending* b) {
    if (a->batch->size() != b->batch->size()) return a->batch->size() < b->batch->size();
    return a->order < b->order;
  });
  std::vector<Pending*> chosen;
  size_t rows = 0;
  for (Pending* p : order) {
    if (!chosen.empty() && rows + p->batch->size() > static_cast<size_t>(token_budget_)) continue;
    chosen.push_back(p);
    rows += p->batch->size();
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
  // With a draft worker, the drafters' passes run on a thread of their own
  // while this thread runs the target's.
  const bool overlap =
      draft_worker_ != nullptr && by_model.count(target_) != 0 && by_model.size() > 1;
  std::thread drafting;
  double draft_ms = 0, target_ms = 0;
  if (overlap)
    drafting = std::thread([&] {
      const Stopwatch watch;
      for (const Model* model : models)
        if (model != target_) run_pass(*draft_worker_, *model, by_model[model]);
      draft_ms = watch.elapsed_ms();
    });
  for (const Model* model : models) {
    if (overlap && model != target_) continue;
    const Stopwatch watch;
    run_pass(worker_, *model, by_model[model]);
    (model == target_ ? target_ms : draft_ms) += watch.elapsed_ms();
  }
  if (drafting.joinable()) drafting.join();

  lock.lock();
  running_ = false;
  ++stats_.rounds;
  stats_.passes += static_cast<int64_t>(models.size());
  stats_.sequence_forwards += static_cast<int64_t>(chosen.size());
  stats_.rows += static_cast<int64_t>(rows);
  stats_.overlapped += overlap ? 1 : 0;
  stats_.draft_ms += draft_ms;
  if (overlap) stats_.overlapped_draft_ms += std::min(draft_ms, target_ms);
  if (by_model.count(target_) != 0) {
    ++stats_.target_passes;
    stats_.target_sequence_forwards += static_cast<int64_t>(by_model[target_].size());
  }
  for (Pending* p : chosen) {
    p->done = true;
    pending_.erase(std::find(pending_.begin(), pending_.end(), p));
  }
  cv_.notify_all();
}

void ForwardBatcher::run_pass(Worker& worker, const Model& model,
                              const std::vector<Pending*>& group) {
  std::vector<Model::SequenceBatch> sequences;
  for (Pending* p : group) sequences.push_back({p->batch, p->kv});
  try {
    std::vector<std::vector<float>> logits = model.forward_multi(worker, sequences);
    for (size_t i = 0; i < group.size(); ++i) group[i]->logits = std::move(logits[i]);
  } catch (...) {
    for (Pending* p : group) p->error = std::current_exception();
  }
}

BatchedSequence::BatchedSequence(std::shared_ptr<const Model> model, ForwardBatcher& batcher,
                                 const char* role)
    : model_(std::move(model)), batcher_(batcher), role_(role) {
  check(model_ != nullptr, "a batched model side needs a model");
}

void BatchedSequence::begin(int32_t capacity) {
  kv_ = std::make_unique<KvCache>(model_->config(), capacity);
}

KvCache& BatchedSequence::kv() const {
  check(kv_ != nullptr, "a model side was used before begin()");
  return *kv_;
}

std::vector<float> BatchedSequence::forward(const Batch& batch) {
  ScopedTimer timer(meter_.ms);
  ++meter_.forwards;
  try {
    return batcher_.forward(*model_, batch, kv());
  } catch (const Error& e) {
    fail(role_, ": ", e.what());
  }
}

ForwardMeter BatchedSequence::take_meter() {
  return std::exchange(meter_, ForwardMeter{});
}

BatchedTarget::BatchedTarget(std::shared_ptr<const Model> model, ForwardBatcher& batcher,
                             std::function<void()> before_forward)
    : seq_(std::move(model), batcher, "target model"), before_forward_(std::move(before_forward)) {}

std::vector<float> BatchedTarget::forward(const Batch& batch) {
  if (before_forward_) before_forward_();
  return seq_.forward(batch);
}

}  // namespace parspec
