#pragma once
// Attention of query heads over an ordered list of key/value rows.
//
// Numerics (one definition for every code path, so a token's output is
// bit-identical whenever it sees the same keys in the same order — alone in
// autoregressive decoding, in a chain, as a node of a tree, or batched with
// other queries in a prompt): for a query q over keys 0..n-1,
//   s_j  = scale · (fma chain over d = 0..D-1 of q[d]·k_j[d], from +0)
//   m    = max_j s_j
//   p_j  = attention_exp(s_j − m)          (elementwise, attention.cpp)
//   sum  = ((S0 + S1) + (S2 + S3)) + ((S4 + S5) + (S6 + S7)),
//          S_r = Σ p_j over j ≡ r (mod 8) in j order, from +0
//   o[d] = fma chain over j = 0..n-1 of p_j·v_j[d], from +0
//   out[d] = o[d] · (1 / sum)
// Every operation is elementwise per (query, key) or (query, d), so kernels
// may put queries or keys in SIMD lanes, and group queries however they like.
#include <vector>

namespace parspec {

struct AttentionScratch {
  std::vector<float> scores;   // per key (and lane)
  std::vector<float> queries;  // queries transposed into lanes
  std::vector<float> acc;      // weighted-value accumulators, dimension-major
};

// keys[i] and values[i] point to head_dim floats each.
void attend(const float* q, const float* const* keys, const float* const* values, int n_keys,
            int head_dim, float scale, AttentionScratch& scratch, float* out);

// Several queries over one key list: query i attends to keys[0, n_keys[i])
// and writes outs[i] (head_dim floats). Each output is exactly attend()'s for
// that query and its keys; sharing the list lets the keys be read once for
// many queries (the heads of a KV group, the rows of a prompt).
void attend_many(int n_queries, const float* const* queries, const int* n_keys,
                 const float* const* keys, const float* const* values, int head_dim, float scale,
                 AttentionScratch& scratch, float* const* outs);

// Attention with soft-capped scores (Gemma 2): s_j = cap · tanh(scale ·
// (q·k_j) / cap), then softmax and weighted values as above. One query at a
// time in a fixed scalar order, so its output depends only on its keys.
void attend_softcapped(const float* q, const float* const* keys, const float* const* values,
                       int n_keys, int head_dim, float scale, float cap, std::vector<float>& scores,
                       float* out);

// Scalar reference (double accumulation) for tests.
void attend_reference(const float* q, const float* const* keys, const float* const* values,
                      int n_keys, int head_dim, float scale, float* out);

}  // namespace parspec
