#pragma once
// The query-in-lanes attention kernel built for AVX-512 (16 lanes): call only
// where the CPU has AVX-512 F/BW/VL (kernels/isa.h). Bit-identical to the AVX2
// build (kernels/attention_lanes.h).
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

}  // namespace parspec::attention_avx512
