#include "strategies/pool/routing.h"

#include <algorithm>

#include "core/error.h"

namespace parspec {

double routing_score(std::span<const float> confidence, std::span<const float> accuracy) {
  check(confidence.size() == accuracy.size(), "routing_score: ", confidence.size(),
        " confidences but ", accuracy.size(), " accuracies");
  if (confidence.empty()) return 0.0;
  double sum = 0.0;
  for (size_t i = 0; i < confidence.size(); ++i) {
    const double c = std::clamp(static_cast<double>(confidence[i]), 0.0, 1.0);
    const double d = std::clamp(static_cast<double>(accuracy[i]), 0.0, 1.0);
    const double agree = c * d, denominator = agree + (1.0 - c) * (1.0 - d);
    sum += denominator > 0.0 ? agree / denominator : 0.0;
  }
  return sum / static_cast<double>(confidence.size());
}

RoutingPolicy::RoutingPolicy(int n_drafters, RoutingParams params) : params_(params) {
  check(n_drafters >= 1, "a drafter pool needs at least one drafter");
  check(params_.threshold >= 0, "the routing threshold must not be negative");
  check(
      params_.explore >= 0 && params_.explore <= 1 && params_.exploit >= 0 && params_.exploit <= 1,
      "the exploration and exploitation shares must be in [0, 1]");
  check(params_.smoothing > 0 && params_.smoothing <= 1, "routing smoothing must be in (0, 1]");
  scores_.assign(n_drafters, 0.5);
}

void RoutingPolicy::reset() {
  std::fill(scores_.begin(), scores_.end(), 0.5);
  last_acceptance_ = -1;
}

std::vector<int> RoutingPolicy::choose(int want, Rng& rng) {
  const int n = static_cast<int>(scores_.size());
  std::vector<int> chosen;
  if (last_acceptance_ < 0) {
    for (int i = 0; i < n; ++i) chosen.push_back(i);
    return chosen;
  }
  want = std::clamp(want, 1, n);
  const double random_share = exploring() ? params_.explore : params_.exploit;
  std::vector<uint8_t> taken(n, 0);
  for (int slot = 0; slot < want; ++slot) {
    int pick = -1;
    if (rng.uniform() < random_share) {
      const int free = n - slot;
      int k = static_cast<int>(rng.uniform() * free);
      for (int i = 0; i < n && pick < 0; ++i)
        if (!taken[i] && k-- == 0) pick = i;
    } else {
      for (int i = 0; i < n; ++i)
        if (!taken[i] && (pick < 0 || scores_[i] > scores_[pick])) pick = i;
    }
    taken[pick] = 1;
  }
  for (int i = 0; i < n; ++i)
    if (taken[i]) chosen.push_back(i);
  return chosen;
}

void RoutingPolicy::update(int drafter, std::span<const float> confidence,
                           std::span<const float> accuracy) {
  check(drafter >= 0 && drafter < static_cast<int>(scores_.size()), "routing: drafter ", drafter,
        " is not in the pool");
  const double m = routing_score(confidence, accuracy);
  scores_[drafter] = (1.0 - params_.smoothing) * scores_[drafter] + params_.smoothing * m;
}

}  // namespace parspec
