#pragma once
// CoSine's request scheduler in the server ("Collaborative Speculative
// Inference for Efficient LLM Inference Serving", section 4.3, Algorithm 2):
// at the start of each of its steps a request asks which verification pass it
// joins and with how many draft tokens and drafters. Once per target pass (or
// when requests come and go) the scheduler solves eq. 5-8 over the pool of
// active requests (strategies/cosine/cosine_schedule.h: their lengths, the γ each wants,
// their memory; adaptive speculation cuts the γs to Γmax); members of the
// chosen batch draft and verify now, the others wait: they draft while the
// chosen batch is verified (ForwardBatcher::wait_for_target_pass) and so
// verify in a later pass. A request refused `max_wait` times in a row is
// admitted anyway (no starvation). The drafters a request drafts with are shared among the chosen
// batch (participating_drafters): all of them when the verifier serves one
// request, fewer as its load grows.
#include <cstdint>
#include <map>
#include <mutex>
#include <vector>

#include "serve/forward_batcher.h"
#include "strategies/cosine/cosine_schedule.h"

namespace parspec {

struct SchedulerOptions {
  LatencyModel model;
  ScheduleBounds bounds;
  int max_wait = 4;  // refusals in a row after which a request is admitted regardless
};

// The scheduler's answer to one request's step.
struct StepDecision {
  bool admitted = false;
  bool forced = false;  // admitted after max_wait refusals, outside the chosen batch
  // The step's grant, also when refused (then as if it joined the chosen batch).
  int gamma = 0;         // draft tokens (after adaptive speculation)
  int drafters = 0;      // drafters it drafts with
  int batch = 0;         // b of the chosen batch (eq. 5), with this request if outside it
  int gamma_total = 0;   // Γ of that batch (eq. 6)
  double t_ttl_ms = 0;   // its modelled T_ttl (eq. 7)
  bool feasible = true;  // false: no batch met T_max / M_max (the shortest request alone)
};

class RequestScheduler {
 public:
  explicit RequestScheduler(SchedulerOptions options);

  // A request enters the pool (before its first step) / leaves it.
  int add();
  void remove(int id);

  // Request `id` starts a step: its context length, the γ it wants, its memory
  // and the drafters it would route to. `epoch` counts the target passes run so
  // far: the batch is chosen again once per epoch (and when the pool changes).
  StepDecision plan(int id, const PoolRequest& state, int drafters_wanted, int64_t epoch);
  // plan() with `batcher`'s target passes as epochs; a refused step waits in
  // the batcher for the coming target pass (`waits` counts them) and drafts
  // beside it with the grant.
  StepDecision admit(int id, const PoolRequest& state, int drafters_wanted, ForwardBatcher& batcher,
                     int64_t& waits);

  struct Stats {
    int64_t decisions = 0;     // batches chosen (eq. 8 solved)
    int64_t infeasible = 0;    // of them, with no batch within the bounds
    int64_t admitted = 0;      // request steps admitted to the coming pass
    int64_t refused = 0;       // request steps told to wait for a later pass
    int64_t forced = 0;        // admitted after max_wait refusals
    int64_t batch_sum = 0;     // Σ b over all steps
    int64_t gamma_sum = 0;     // Σ γ granted
    int64_t drafters_sum = 0;  // Σ drafters granted
    int last_batch = 0, last_gamma_total = 0, last_drafters = 0;  // of the last step
  };
  Stats stats() const;
  const SchedulerOptions& options() const { return options_; }

 private:
  struct Entry {
    PoolRequest state;
    bool ready = false;  // has asked once (its state is known)
    int refusals = 0;
  };
  void decide();

  const SchedulerOptions options_;
  mutable std::mutex mutex_;
  std::map<int, Entry> pool_;
  int next_id_ = 0;
  uint64_t version_ = 0;  // bumped when the pool's membership changes
  // The current batch: its members (ids) with their γs, for (epoch, version).
  int64_t decided_epoch_ = -1;
  uint64_t decided_version_ = 0;
  BatchChoice choice_;
  std::map<int, int> granted_;  // id -> γ
  Stats stats_;
};

}  // namespace parspec
