#include "serve/request_scheduler.h"

#include <algorithm>
#include <numeric>

#include "core/error.h"

namespace parspec {

RequestScheduler::RequestScheduler(SchedulerOptions options) : options_(std::move(options)) {
  check(!options_.model.target_ms.empty(), "request scheduler: no target latencies");
  check(options_.max_wait >= 0, "request scheduler: max_wait must not be negative");
}

int RequestScheduler::add() {
  std::lock_guard lock(mutex_);
  const int id = next_id_++;
  pool_[id] = Entry{};
  return id;
}

void RequestScheduler::remove(int id) {
  std::lock_guard lock(mutex_);
  const auto it = pool_.find(id);
  if (it == pool_.end()) return;
  if (it->second.ready) ++version_;
  pool_.erase(it);
}

void RequestScheduler::decide() {
  std::vector<int> ids;
  std::vector<PoolRequest> requests;
  for (const auto& [id, e] : pool_)
    if (e.ready) {
      ids.push_back(id);
      requests.push_back(e.state);
    }
  choice_ = schedule_batch(requests, options_.model, options_.bounds);
  granted_.clear();
  for (size_t k = 0; k < choice_.members.size(); ++k)
    granted_[ids[choice_.members[k]]] = choice_.gammas[k];
  ++stats_.decisions;
  stats_.infeasible += choice_.feasible ? 0 : 1;
}

StepDecision RequestScheduler::plan(int id, const PoolRequest& state, int drafters_wanted,
                                    int64_t epoch) {
  std::lock_guard lock(mutex_);
  const auto it = pool_.find(id);
  check(it != pool_.end(), "request scheduler: request ", id, " is not in the pool");
  Entry& e = it->second;
  e.state = state;
  e.state.gamma = std::max(1, state.gamma);
  if (!e.ready) {
    e.ready = true;
    ++version_;
  }
  if (epoch != decided_epoch_ || version_ != decided_version_) {
    decide();
    decided_epoch_ = epoch;
    decided_version_ = version_;
  }

  StepDecision d;
  d.batch = static_cast<int>(choice_.members.size());
  d.gamma_total = choice_.gamma_total;
  d.t_ttl_ms = choice_.t_ttl_ms;
  d.feasible = choice_.feasible;
  if (const auto g = granted_.find(id); g != granted_.end()) {
    d.admitted = true;
    d.gamma = std::min(g->second, e.state.gamma);
    e.refusals = 0;
    ++stats_.admitted;
  } else {
    // Outside the chosen batch: its γ as if it joined it (adaptive speculation
    // cuts the batch's γs, its own included, again).
    std::vector<int> gammas = choice_.gammas;
    gammas.push_back(e.state.gamma);
    gammas = adaptive_speculation(std::move(gammas), options_.bounds.gamma_max);
    d.gamma = gammas.back();
    d.batch += 1;
    d.gamma_total = std::accumulate(gammas.begin(), gammas.end(), 0);
    if (e.refusals >= options_.max_wait) {
      // Waited long enough: admitted beside the chosen batch.
      d.admitted = d.forced = true;
      e.refusals = 0;
      ++stats_.forced;
      ++stats_.admitted;
    } else {
      ++e.refusals;
      ++stats_.refused;
    }
  }
  const int wanted = std::max(1, drafters_wanted);
  d.drafters = participating_drafters(wanted, wanted, d.batch);
  stats_.batch_sum += d.batch;
  stats_.gamma_sum += d.gamma;
  stats_.drafters_sum += d.drafters;
  stats_.last_batch = d.batch;
  stats_.last_gamma_total = d.gamma_total;
  stats_.last_drafters = d.drafters;
  return d;
}

StepDecision RequestScheduler::admit(int id, const PoolRequest& state, int drafters_wanted,
                                     ForwardBatcher& batcher, int64_t& waits) {
  const StepDecision d = plan(id, state, drafters_wanted, batcher.stats().target_passes);
  if (!d.admitted) {
    ++waits;
    batcher.wait_for_target_pass();
  }
  return d;
}

RequestScheduler::Stats RequestScheduler::stats() const {
  std::lock_guard lock(mutex_);
  return stats_;
}

}  // namespace parspec
