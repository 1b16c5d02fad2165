#pragma once
// Chi-square goodness-of-fit helpers for the sampling-exactness tests.
#include <cmath>
#include <cstdint>
#include <map>
#include <vector>

namespace parspec::testing_support {

// Upper quantile of the chi-square distribution with `df` degrees of freedom
// (Wilson–Hilferty approximation); z = 3.29 is the 0.9995 normal quantile.
inline double chi_square_critical(int df, double z = 3.29) {
  const double k = df;
  const double t = 1.0 - 2.0 / (9.0 * k) + z * std::sqrt(2.0 / (9.0 * k));
  return k * t * t * t;
}

struct ChiSquare {
  double statistic = 0;
  int df = 0;
  bool rejects() const { return df > 0 && statistic > chi_square_critical(df); }
};

// Observed counts against expected probabilities; bins expecting fewer than
// 5 samples are pooled into one.
inline ChiSquare chi_square_fit(const std::map<int32_t, int64_t>& observed,
                                const std::vector<double>& expected_probs, int64_t n) {
  ChiSquare r;
  double pooled_expected = 0, pooled_observed = 0;
  int bins = 0;
  for (size_t t = 0; t < expected_probs.size(); ++t) {
    const double e = expected_probs[t] * n;
    const auto it = observed.find(static_cast<int32_t>(t));
    const double o = it == observed.end() ? 0.0 : static_cast<double>(it->second);
    if (e < 5) {
      pooled_expected += e;
      pooled_observed += o;
      continue;
    }
    r.statistic += (o - e) * (o - e) / e;
    ++bins;
  }
  if (pooled_expected >= 5) {
    r.statistic +=
        (pooled_observed - pooled_expected) * (pooled_observed - pooled_expected) / pooled_expected;
    ++bins;
  } else if (pooled_observed > 10) {
    r.statistic += 1e9;  // mass where there should be (almost) none
  }
  r.df = bins - 1;
  return r;
}

// Two-sample test of homogeneity between two histograms of equal totals.
inline ChiSquare chi_square_two_sample(const std::map<int32_t, int64_t>& a,
                                       const std::map<int32_t, int64_t>& b) {
  std::map<int32_t, std::pair<double, double>> joint;
  for (auto [k, v] : a) joint[k].first += v;
  for (auto [k, v] : b) joint[k].second += v;
  ChiSquare r;
  double pa = 0, pb = 0;
  int bins = 0;
  auto add = [&](double x, double y) {
    const double e = (x + y) / 2;
    r.statistic += (x - e) * (x - e) / e + (y - e) * (y - e) / e;
    ++bins;
  };
  for (auto& [k, v] : joint) {
    if (v.first + v.second < 20) {
      pa += v.first;
      pb += v.second;
      continue;
    }
    add(v.first, v.second);
  }
  if (pa + pb >= 20) add(pa, pb);
  r.df = bins - 1;
  return r;
}

}  // namespace parspec::testing_support
