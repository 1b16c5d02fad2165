#pragma once
// Row-wise operations of the transformer block. Each works on one row at a
// time in a fixed order, so results never depend on batch composition.
#include <cstdint>

namespace parspec {

enum class RopeStyle {
  kAdjacent,  // rotates (x[2i], x[2i+1]): llama (the converter permutes Q/K rows)
  kNeox,      // rotates (x[i], x[i + d/2]): qwen2
};

// out = x / sqrt(mean(x²) + eps) * w
void rmsnorm(const float* x, const float* w, int n, float eps, float* out);
// Rotates the first rope_dims dims of each of n_heads heads (head_dim apart)
// by angle position * inv_freq[i] for pair i.
void rope(float* x, int n_heads, int head_dim, int rope_dims, int32_t position,
          const float* inv_freq, RopeStyle style);
// The two halves of rope: the cosines and sines of pair i's angle at
// `position` (rope_dims / 2 of each), and the rotation by them.
void rope_angles(int32_t position, const float* inv_freq, int n_pairs, float* cos, float* sin);
void rope_rotate(float* x, int n_heads, int head_dim, int rope_dims, const float* cos,
                 const float* sin, RopeStyle style);
// out = silu(gate) * up
void swiglu(const float* gate, const float* up, int n, float* out);
// out = gelu(gate) * up, GELU's tanh approximation (Gemma's GeGLU); scalar,
// each element computed alike wherever it lies.
void geglu_tanh(const float* gate, const float* up, int n, float* out);
// x = cap * tanh(x * (1 / cap)), elementwise (Gemma's logit soft-capping).
void softcap_inplace(float* x, int n, float cap);
// y += x
void add_inplace(float* y, const float* x, int n);

}  // namespace parspec
