// The mixture-of-experts part of the cost model (cost_model.h): what a
// verification costs by the distinct experts its rows touch.
#include <algorithm>
#include <array>
#include <cmath>

#include "core/error.h"
#include "tuning/cost_model.h"

namespace parspec {

double verify_experts(const CostMeasurements& m, double n) {
  if (m.n_expert <= 0) return 0;
  return m.n_expert - (m.n_expert - m.n_expert_used) * std::pow(m.expert_overlap, n - 1);
}

double verification_ms(const CostMeasurements& m, int n) {
  check(n >= 1 && n <= static_cast<int>(m.target_ms.size()), "cost model: L(", n,
        ") was not measured (", m.target_ms.size(), " batch sizes)");
  const double ms = m.target_ms[n - 1];
  if (m.n_expert <= 0 || m.target_experts.size() < static_cast<size_t>(n)) return ms;
  return ms + m.expert_ms * (verify_experts(m, n) - m.target_experts[n - 1]);
}

double fit_expert_ms(const std::vector<double>& target_ms, const std::vector<double>& experts) {
  const size_t n = std::min(target_ms.size(), experts.size());
  if (n < 3) return 0;
  // Normal equations of ms = a + b·rows + c·experts, solved by Cramer's rule.
  std::array<std::array<double, 3>, 3> A{};
  std::array<double, 3> y{};
  for (size_t i = 0; i < n; ++i) {
    const std::array<double, 3> x = {1.0, static_cast<double>(i + 1), experts[i]};
    for (int r = 0; r < 3; ++r) {
      for (int c = 0; c < 3; ++c) A[r][c] += x[r] * x[c];
      y[r] += x[r] * target_ms[i];
    }
  }
  const auto det = [](const std::array<std::array<double, 3>, 3>& M) {
    return M[0][0] * (M[1][1] * M[2][2] - M[1][2] * M[2][1]) -
           M[0][1] * (M[1][0] * M[2][2] - M[1][2] * M[2][0]) +
           M[0][2] * (M[1][0] * M[2][1] - M[1][1] * M[2][0]);
  };
  const double d = det(A);
  // Experts that grow in step with the rows (or not at all) leave c undetermined.
  if (std::abs(d) < 1e-9 * std::max(1.0, std::abs(A[0][0] * A[1][1] * A[2][2]))) return 0;
  auto with_y = A;
  for (int r = 0; r < 3; ++r) with_y[r][2] = y[r];
  return std::max(0.0, det(with_y) / d);
}

double fit_expert_overlap(int n_expert, int n_expert_used, double rows, double observed) {
  if (n_expert <= n_expert_used || rows <= 1) return 1;
  const double remaining = (n_expert - observed) / (n_expert - n_expert_used);
  return std::clamp(std::pow(std::clamp(remaining, 0.0, 1.0), 1.0 / (rows - 1)), 0.0, 1.0);
}

}  // namespace parspec
