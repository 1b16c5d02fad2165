#pragma once
// The query-in-lanes attention kernel built for AVX-512 (16 lanes): call only
// where the CPU has AVX-512 F/BW/VL (kernels/isa.h). Bit-identical to the AVX2
// build (kernels/attention_lanes.h).
#include <cstddef>

#include "kernels/attention.h"

namespace parspec::attention_avx512 {

constexpr int kLanes = 16;

// kLanes queries qs[l] over keys[0, nk[l]); outs[l] may be null (padding).
void queries_in_lanes(const float* const* qs, const int* nk, const float* const* keys,
                      const float* const* values, int hd, float scale, AttentionScratch& scratch,
                      float* const* outs);

// 2 · kLanes queries at once, the same results: each key or value element
// loaded feeds two vectors of queries.
void queries_in_two_vectors(const float* const* qs, const int* nk, const float* const* keys,
                            const float* const* values, int hd, float scale,
                            AttentionScratch& scratch, float* const* outs);

// The two halves of the keys-in-lanes kernel (attention.cpp) for up to
// kKeyLaneQueries queries, 16 keys or dimensions per vector:
// scores s[i · stride + j] = scale · q_i·k_j for every key j < nk_max (lanes
// past it repeat the last key), and outs[i] = inv[i] · Σ_j<nk[i] p_ij v_j
// from the probabilities p_ij = s[i · stride + j].
constexpr int kKeyLaneQueries = 4;
void key_lane_scores(int nq, const float* const* qs, int nk_max, const float* const* keys, int hd,
                     float scale, float* s, size_t stride);
void key_lane_values(int nq, const float* s, size_t stride, const int* nk,
                     const float* const* values, int hd, const float* inv, float* const* outs);

}  // namespace parspec::attention_avx512
