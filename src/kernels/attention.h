#pragma once
// Attention of one query head over an ordered list of key/value rows.
// The reduction runs over keys in list order, so a token's output is
// bit-identical whenever it sees the same keys in the same order — alone in
// autoregressive decoding, in a chain, or as a node of a tree.
#include <vector>

namespace parspec {

struct AttentionScratch {
  std::vector<float> scores;
};

// keys[i] and values[i] point to head_dim floats each.
void attend(const float* q, const float* const* keys, const float* const* values, int n_keys,
            int head_dim, float scale, AttentionScratch& scratch, float* out);

// Scalar reference (double accumulation) for tests.
void attend_reference(const float* q, const float* const* keys, const float* const* values,
                      int n_keys, int head_dim, float scale, float* out);

}  // namespace parspec
