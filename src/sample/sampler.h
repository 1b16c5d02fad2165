#pragma once
// Token sampling. probabilities() turns logits into the filtered, normalized
// distribution over the whole vocabulary (temperature → softmax → top-k →
// top-p → min-p → renormalize); speculative verification compares the draft's
// and the target's vectors, so both go through this same function.
//
// Token order for every filter: higher logit first, lower id on ties, so the
// result is fully deterministic. NaN logits get probability 0; +inf logits
// share all the mass; if no logit is above -inf, the distribution is one-hot
// at argmax(); all-NaN logits are an error.
#include <cstdint>
#include <span>
#include <vector>

#include "sample/rng.h"

namespace parspec {

// llama.cpp's defaults.
struct SamplingParams {
  float temp = 0.8f;    // <= 0: greedy (argmax); must not be NaN or +inf
  int top_k = 40;       // <= 0 (or >= n_vocab): disabled
  float top_p = 0.95f;  // in (0, 1]; 1: disabled
  float min_p = 0.05f;  // in [0, 1); 0: disabled
  uint64_t seed = 0;

  bool greedy() const { return temp <= 0.0f; }
};

// Throws parspec::Error naming the bad field and its allowed range.
void validate_sampling_params(const SamplingParams& params);

// Fills `out` (resized to n_vocab) with the filtered distribution; zeros for
// filtered tokens. Top-p keeps the smallest set of best tokens whose mass is
// >= top_p of the mass that survived top-k; min-p then drops tokens with
// p < min_p * p_max. The best token always survives. Greedy: one-hot at argmax.
void probabilities(const float* logits, int n_vocab, const SamplingParams& params,
                   std::vector<float>& out);

// Lowest id among the largest logits; NaN never wins. Throws if all are NaN.
int32_t argmax(const float* logits, int n_vocab);

// Plain softmax of raw logits (no temperature, no filters), in float with a
// double sum: the draft distribution tree strategies rank children by.
std::vector<float> softmax(const float* logits, int n_vocab);
// Largest softmax probability of raw logits, in double (a draft's confidence).
float top_probability(const float* logits, int n_vocab);
// The min(c, size) ids of largest weight, best first, lower id on ties.
std::vector<int32_t> top_c(std::span<const float> weights, int c);

// One uniform draw, inverse CDF in id order. `weights` must be finite and
// >= 0 with a positive sum but need not be normalized (e.g. max(p - q, 0)
// residuals); tokens of weight 0 are never returned.
int32_t sample_from(std::span<const float> weights, Rng& rng);
int32_t sample_from(const std::vector<float>& probs, Rng& rng);

class Sampler {
 public:
  // Validates params; the Rng is seeded with params.seed.
  explicit Sampler(SamplingParams params);

  // Greedy: argmax (draws nothing). Otherwise probabilities() + sample_from().
  int32_t sample(const float* logits, int n_vocab);

  const SamplingParams& params() const { return params_; }
  Rng& rng() { return rng_; }

 private:
  SamplingParams params_;
  Rng rng_;
  std::vector<float> probs_;  // reused between calls
};

}  // namespace parspec
