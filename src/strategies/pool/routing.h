#pragma once
// Adaptive request routing of CoSine ("Collaborative Speculative Inference for
// Efficient LLM Inference Serving", section 4.2): every request keeps a
// routing vector M_r with one score per drafter of the pool, computed from the
// drafters' generation confidence and their verification accuracy (eq. 1-2),
// and each step routes the request to the top-scoring drafters or, by chance,
// to random ones: more often at random while the request's acceptance length
// is below a threshold (exploration), less often above it (exploitation, eq. 3).
#include <span>
#include <vector>

#include "sample/rng.h"

namespace parspec {

// Eq. 2: the mean over the K draft positions of the normalised harmonic mean
// c·d / (c·d + (1-c)(1-d)) of confidence c (the drafter's probability of its
// token) and accuracy d (eq. 1: similarity of its token to the one the target
// emitted at that position, 0 past the accepted length). Both are clamped to
// [0, 1]; a position where the mean is 0/0 (c = 1, d = 0 or c = 0, d = 1)
// counts 0. Returns 0 for no positions.
double routing_score(std::span<const float> confidence, std::span<const float> accuracy);

struct RoutingParams {
  int route = 2;           // drafters per step (clamped to 1..pool size)
  float threshold = 2.0f;  // τ of eq. 3: acceptance length below which the request explores
  float explore = 0.5f;    // chance that a routed slot goes to a random drafter when exploring
  float exploit = 0.1f;    // the same when exploiting
  float smoothing = 0.5f;  // weight of the newest step's score in the routing vector
};

class RoutingPolicy {
 public:
  RoutingPolicy(int n_drafters, RoutingParams params);

  // A new request: every score back to the neutral 0.5 and no history.
  void reset();
  // The drafters for the next step, ascending: `want` of them (clamped to
  // 1..pool size). The first step of a request routes to every drafter (each
  // gets a score); later each slot takes the best-scoring drafter not chosen
  // yet, or with the explore/exploit chance a random one (eq. 3).
  std::vector<int> choose(int want, Rng& rng);
  // After verification: `drafter` drafted with these per-position confidences
  // and accuracies; `acceptance_length` is the step's emitted tokens (L_acc).
  void update(int drafter, std::span<const float> confidence, std::span<const float> accuracy);
  void observe_acceptance(int acceptance_length) { last_acceptance_ = acceptance_length; }

  bool exploring() const { return last_acceptance_ >= 0 && last_acceptance_ < params_.threshold; }
  const std::vector<double>& scores() const { return scores_; }
  const RoutingParams& params() const { return params_; }

 private:
  RoutingParams params_;
  std::vector<double> scores_;
  int last_acceptance_ = -1;  // -1: no step yet
};

}  // namespace parspec
