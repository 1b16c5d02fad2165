#pragma once
// CoSine's request scheduler and adaptive speculation ("Collaborative
// Speculative Inference for Efficient LLM Inference Serving", section 4.3,
// Algorithm 2 and eq. 5-8), as functions of given latencies so that their
// decisions can be checked: which requests of the pool form the next batch, with
// how many draft tokens each, and how many drafters a request drafts with.
//
// The latencies come from the cost model `parspec tune` measures and caches
// (tuning/cost_model.h): T_llm(b, Γ) is the target's measured forward time over
// the batch's b roots and Γ draft tokens, L(b + Γ), plus its per-step overhead
// (linear beyond the measured sizes, fitted to the upper half); T_ssm(γ) is γ draft
// forwards of one request, γ·(d + the draft overhead). Both were measured on a
// short context, so the request length l of eq. 5 bounds the batch only through
// memory (m_i), not through time.
#include <span>
#include <vector>

#include "tuning/cost_model.h"

namespace parspec {

// Adaptive speculation (Algorithm 2): while the draft tokens of the batch,
// Σ γ_i, exceed Γmax (> 0), take one from the largest γ (the first of equal
// ones); no γ goes below 1. Returns the cut γs.
std::vector<int> adaptive_speculation(std::vector<int> gammas, int gamma_max);

struct LatencyModel {
  std::vector<double> target_ms;  // L(n) for n = 1..size, ms
  double target_overhead_ms = 0;  // per verification step
  double draft_token_ms = 0;      // one draft forward of one token, overhead included

  // T_llm(b, Γ): one verification forward over b roots and Γ draft tokens;
  // beyond the measured sizes L grows by extrapolation_slope() per token.
  double verify_ms(int batch, int gamma_total) const;
  // The least-squares slope of L over the upper half of the measured sizes (≥ 0).
  double extrapolation_slope() const;
  // T_ssm(γ): drafting γ tokens for one request.
  double draft_ms(int gamma) const { return gamma * draft_token_ms; }
};

// The model of `parspec tune`'s measurements (throws Error when L is not measured).
LatencyModel latency_model(const CostMeasurements& m);

struct PoolRequest {
  int length = 0;     // l_i: tokens in its context
  int gamma = 1;      // γ_i it asks for (before adaptive speculation)
  double memory = 0;  // m_i: its footprint (any unit, the same as max_memory)
};

struct ScheduleBounds {
  int gamma_max = 0;          // Γmax of eq. 6 (0: none)
  double max_latency_ms = 0;  // T_max of eq. 7 (0: none)
  double max_memory = 0;      // M_max of eq. 7 (0: none)
  // λ of eq. 8, read as a reward: each verified draft token is worth λ ms off
  // the objective (the paper's "trade-off between maximizing the verified token
  // length and minimizing latency"; λ = 0 minimises latency per request alone).
  double lambda = 0;
  // Batches whose objective is within this fraction of the best one's count as
  // tied, and ties go to the larger batch: the latencies are measured, and a
  // request left out waits a whole verification pass for a gain in the noise.
  double near_tie = 0.05;
};

struct BatchChoice {
  std::vector<int> members;  // indices into the pool, ascending
  std::vector<int> gammas;   // their γ after adaptive speculation
  int gamma_total = 0;       // Γ
  int critical_length = 0;   // l of eq. 5
  double t_ttl_ms = 0;       // eq. 7: max T_ssm + T_llm
  double objective = 0;      // eq. 8: T_ttl / b − λΓ
  bool feasible = true;      // false: no batch met the bounds; the shortest request alone
};

// Eq. 5-8: the batch B* minimising T_ttl/b − λΓ over the subsets of the pool
// (exhaustively up to 16 requests, otherwise over the k shortest for every k)
// whose γs are cut by adaptive speculation and that keep T_ttl ≤ T_max and
// Σ m_i ≤ M_max. Ties (within near_tie) go to the larger batch, then to the
// lower objective, then to the lower indices. An empty pool gives an empty
// choice.
BatchChoice schedule_batch(std::span<const PoolRequest> pool, const LatencyModel& model,
                           const ScheduleBounds& bounds);

// The collaborative pipeline's drafter participation: `route` drafters of a
// pool of `pool_size` (0: all) shared among the `load` requests the verifier
// serves at once, at least one each.
int participating_drafters(int route, int pool_size, int load);

}  // namespace parspec
