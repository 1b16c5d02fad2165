#include "strategies/cosine/cosine_schedule.h"

#include <algorithm>
#include <cmath>
#include <numeric>

#include "core/error.h"

namespace parspec {

std::vector<int> adaptive_speculation(std::vector<int> gammas, int gamma_max) {
  int64_t total = 0;
  for (int& g : gammas) total += (g = std::max(g, 1));
  if (gamma_max <= 0) return gammas;
  while (total > gamma_max) {
    const auto largest = std::max_element(gammas.begin(), gammas.end());
    if (largest == gammas.end() || *largest <= 1) break;
    --*largest;
    --total;
  }
  return gammas;
}

double LatencyModel::extrapolation_slope() const {
  // Least squares over the upper half of the measured sizes (at least the last
  // two): one noisy timing must not set the cost of every larger batch.
  const int measured = static_cast<int>(target_ms.size());
  if (measured < 2) return 0;
  const int first = std::min(measured / 2, measured - 2);
  double mean_n = 0, mean_l = 0;
  const int k = measured - first;
  for (int i = first; i < measured; ++i) {
    mean_n += i + 1;
    mean_l += target_ms[i];
  }
  mean_n /= k;
  mean_l /= k;
  double cov = 0, var = 0;
  for (int i = first; i < measured; ++i) {
    cov += (i + 1 - mean_n) * (target_ms[i] - mean_l);
    var += (i + 1 - mean_n) * (i + 1 - mean_n);
  }
  return std::max(0.0, cov / var);
}

double LatencyModel::verify_ms(int batch, int gamma_total) const {
  check(!target_ms.empty(), "latency model: L(n) was not measured");
  const int n = std::max(1, batch + gamma_total);
  const int measured = static_cast<int>(target_ms.size());
  double l = 0;
  if (n <= measured) {
    l = target_ms[n - 1];
  } else {
    l = target_ms[measured - 1] + extrapolation_slope() * (n - measured);
  }
  return l + target_overhead_ms;
}

LatencyModel latency_model(const CostMeasurements& m) {
  check(!m.target_ms.empty(), "latency model: the tuning has no target latencies");
  LatencyModel model;
  model.target_ms = m.target_ms;
  model.target_overhead_ms = m.target_overhead_ms;
  model.draft_token_ms = m.draft_ms + m.draft_overhead_ms;
  return model;
}

namespace {

// The choice for one candidate batch, or nullopt-like feasible = false.
BatchChoice evaluate(std::span<const PoolRequest> pool, const std::vector<int>& members,
                     const LatencyModel& model, const ScheduleBounds& bounds) {
  BatchChoice c;
  c.members = members;
  std::vector<int> asked;
  double memory = 0;
  for (int i : members) {
    asked.push_back(pool[i].gamma);
    c.critical_length = std::max(c.critical_length, pool[i].length);
    memory += pool[i].memory;
  }
  c.gammas = adaptive_speculation(asked, bounds.gamma_max);
  c.gamma_total = std::accumulate(c.gammas.begin(), c.gammas.end(), 0);
  const int b = static_cast<int>(members.size());
  double drafting = 0;
  for (int g : c.gammas) drafting = std::max(drafting, model.draft_ms(g));
  c.t_ttl_ms = drafting + model.verify_ms(b, c.gamma_total);
  c.objective = c.t_ttl_ms / b - bounds.lambda * c.gamma_total;
  c.feasible = (bounds.gamma_max <= 0 || c.gamma_total <= bounds.gamma_max) &&
               (bounds.max_latency_ms <= 0 || c.t_ttl_ms <= bounds.max_latency_ms) &&
               (bounds.max_memory <= 0 || memory <= bounds.max_memory);
  return c;
}

// Among batches tied with the best objective: the larger, then the lower objective.
bool better(const BatchChoice& a, const BatchChoice& b) {
  if (a.members.size() != b.members.size()) return a.members.size() > b.members.size();
  if (a.objective != b.objective) return a.objective < b.objective;
  return a.members < b.members;
}

}  // namespace

BatchChoice schedule_batch(std::span<const PoolRequest> pool, const LatencyModel& model,
                           const ScheduleBounds& bounds) {
  const int r = static_cast<int>(pool.size());
  if (r == 0) return {};
  for (const PoolRequest& p : pool)
    check(p.length >= 0 && p.gamma >= 1 && p.memory >= 0,
          "schedule_batch: a request needs length >= 0, γ >= 1 and memory >= 0");
  std::vector<std::vector<int>> candidates;
  if (r <= 16) {
    for (uint32_t mask = 1; mask < (1u << r); ++mask) {
      std::vector<int> members;
      for (int i = 0; i < r; ++i)
        if (mask & (1u << i)) members.push_back(i);
      candidates.push_back(std::move(members));
    }
  } else {
    std::vector<int> by_length(r);
    std::iota(by_length.begin(), by_length.end(), 0);
    std::stable_sort(by_length.begin(), by_length.end(),
                     [&](int a, int b) { return pool[a].length < pool[b].length; });
    for (int k = 1; k <= r; ++k) {
      std::vector<int> members(by_length.begin(), by_length.begin() + k);
      std::sort(members.begin(), members.end());
      candidates.push_back(std::move(members));
    }
  }
  std::vector<BatchChoice> feasible;
  double lowest = 0;
  for (const std::vector<int>& members : candidates) {
    BatchChoice c = evaluate(pool, members, model, bounds);
    if (!c.feasible) continue;
    if (feasible.empty() || c.objective < lowest) lowest = c.objective;
    feasible.push_back(std::move(c));
  }
  if (!feasible.empty()) {
    // The objective may be negative (λ): "within near_tie" of its size.
    const double limit = lowest + std::max(0.0, bounds.near_tie) * std::abs(lowest);
    const BatchChoice* best = nullptr;
    for (const BatchChoice& c : feasible)
      if (c.objective <= limit && (best == nullptr || better(c, *best))) best = &c;
    return *best;
  }
  // Nothing meets the bounds: serve the shortest request alone rather than stall.
  int shortest = 0;
  for (int i = 1; i < r; ++i)
    if (pool[i].length < pool[shortest].length) shortest = i;
  BatchChoice alone = evaluate(pool, {shortest}, model, bounds);
  alone.feasible = false;
  return alone;
}

int participating_drafters(int route, int pool_size, int load) {
  check(pool_size >= 1, "participating_drafters: an empty pool");
  const int want = route <= 0 ? pool_size : std::min(route, pool_size);
  load = std::max(1, load);
  return std::max(1, (want + load - 1) / load);
}

}  // namespace parspec
