// The cost model's predictions: the formulas' building blocks (acceptance,
// latencies, tree shapes) and predict(), which asks the candidate's family.
#include <algorithm>
#include <numeric>

#include "core/error.h"
#include "tuning/cost_family.h"
#include "tuning/cost_model.h"

namespace parspec {

std::string Candidate::label() const {
  if (depth > 0) {
    const std::string shape =
        strategy + ":d" + std::to_string(depth) + "c" + std::to_string(branch);
    return width > 0 ? shape + "w" + std::to_string(width) : shape;
  }
  return param > 0 ? strategy + ":" + std::to_string(param) : strategy;
}

Candidate reference_candidate() {
  return {reference_strategy_name()};
}

double expected_accepted(const CostMeasurements& m, int gamma) {
  check(gamma >= 0 && gamma <= static_cast<int>(m.accept_prefix.size()), "cost model: γ = ", gamma,
        " is beyond the ", m.accept_prefix.size(), " measured draft positions");
  double e = 0;
  for (int k = 0; k < gamma; ++k) e += m.accept_prefix[k];
  return e;
}

std::vector<int> tree_level_sizes(const Candidate& c) {
  check(c.depth >= 1 && c.branch >= 1 && c.width >= 0, "cost model: '", c.label(),
        "' is not a tree shape");
  std::vector<int> sizes;
  int64_t n = 1;
  for (int d = 0; d < c.depth; ++d) {
    n = std::min<int64_t>(n * c.branch, 1 << 20);
    if (c.width > 0) n = std::min<int64_t>(n, c.width);
    sizes.push_back(static_cast<int>(n));
  }
  return sizes;
}

double expected_tree_accepted(const CostMeasurements& m, const Candidate& c) {
  const std::vector<int> sizes = tree_level_sizes(c);
  check(c.branch <= static_cast<int>(m.tree_accept.size()) &&
            c.depth <= static_cast<int>(m.tree_accept[c.branch - 1].size()),
        "cost model: tree acceptance was not measured for ", c.label());
  const auto& accept = m.tree_accept[c.branch - 1];
  // Level by level: every node of the level above with its c children, the
  // level's n_d most likely kept (all of them for a full tree).
  std::vector<double> level = {1.0};  // P(node on the target's path), the root
  double expected = 0;
  for (int d = 0; d < c.depth; ++d) {
    std::vector<double> next;
    for (double p : level)
      for (int r = 0; r < c.branch; ++r) next.push_back(p * accept[d][r]);
    std::sort(next.begin(), next.end(), std::greater<>());
    next.resize(std::min<size_t>(next.size(), sizes[d]));
    for (double p : next) expected += p;
    level = std::move(next);
  }
  return expected;
}

double target_step_ms(const CostMeasurements& m, int n) {
  check(n >= 1 && n <= static_cast<int>(m.target_ms.size()), "cost model: L(", n,
        ") was not measured (", m.target_ms.size(), " batch sizes)");
  return verification_ms(m, n) + m.target_overhead_ms + (n - 1) * m.verify_row_ms;
}

double draft_step_ms(const CostMeasurements& m, int n) {
  const double ms = n == 1 && m.draft_batch_ms.empty() ? m.draft_ms : -1;
  check(ms >= 0 || (n >= 1 && n <= static_cast<int>(m.draft_batch_ms.size())),
        "cost model: the draft's forward over ", n, " tokens was not measured");
  return (ms >= 0 ? ms : m.draft_batch_ms[n - 1]) + m.draft_overhead_ms;
}

int chain_reach(const CostMeasurements& m, int max_gamma) {
  return std::min({max_gamma, static_cast<int>(m.accept_prefix.size()),
                   static_cast<int>(m.target_ms.size()) - 1});
}

int tree_nodes(const std::vector<int>& level_sizes) {
  return std::accumulate(level_sizes.begin(), level_sizes.end(), 0);
}

bool tree_shape_fits(const CostMeasurements& m, const Candidate& c) {
  if (c.branch > static_cast<int>(m.tree_accept.size()) ||
      c.depth > static_cast<int>(m.tree_accept[c.branch - 1].size()))
    return false;
  const std::vector<int> sizes = tree_level_sizes(c);
  for (int d = 0; d + 1 < c.depth; ++d)
    if (sizes[d] > std::max<int>(1, m.draft_batch_ms.size())) return false;
  // The node budget is what L(n) reaches.
  const int max_nodes = std::min(kMaxTreeNodes, static_cast<int>(m.target_ms.size()) - 1);
  return tree_nodes(sizes) <= max_nodes;
}

Prediction predict_tree_step(const CostMeasurements& m, const Candidate& c) {
  const std::vector<int> sizes = tree_level_sizes(c);
  const int nodes = tree_nodes(sizes);
  Prediction p;
  p.tokens_per_step = 1 + expected_tree_accepted(m, c);
  p.ms_per_step =
      draft_step_ms(m, 1) + target_step_ms(m, nodes + 1) + nodes * m.tree_node_overhead_ms;
  for (int d = 0; d + 1 < c.depth; ++d) p.ms_per_step += draft_step_ms(m, sizes[d]);
  return p;
}

Prediction predict(const CostMeasurements& m, const Candidate& c) {
  Prediction p = cost_family(c.strategy).predict(m, c);
  p.candidate = c;
  p.tok_per_s = p.ms_per_step > 0 ? 1000.0 * p.tokens_per_step / p.ms_per_step : 0;
  return p;
}

}  // namespace parspec
