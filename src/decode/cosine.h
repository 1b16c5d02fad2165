#pragma once
// The pool strategies: `cosine` (CoSine, "Collaborative Speculative Inference
// for Efficient LLM Inference Serving": adaptive routing of each request to
// some drafters of the pool, confidence-based token fusion at every drafting
// iteration, one draft tree verified losslessly) and `specinfer` (the
// SpecInfer-style baseline: every drafter drafts its own chain, merged into
// one tree, no routing, no fusion). docs/strategies.md explains both.
#include <vector>

#include "decode/strategies.h"

namespace parspec {

// Adaptive speculation (CoSine's Algorithm 2): while the draft tokens of the
// batch, Σ γ_i, exceed Γmax, take one from the largest γ (the first of equal
// ones); no γ goes below 1. Returns the cut γs.
std::vector<int> adaptive_speculation(std::vector<int> gammas, int gamma_max);

}  // namespace parspec
