#include "kernels/ops.h"

#include <immintrin.h>

#include <cmath>
#include <cstring>

#include "kernels/attention_lanes.h"
#include "kernels/lanes256.h"

namespace parspec {

void rmsnorm(const float* x, const float* w, int n, float eps, float* out) {
  // Σ x² in double, 8 lanes at a time (two 4-lane chains), then the tail;
  // one row at a time, so a row's sum never depends on the others.
  __m256d s0 = _mm256_setzero_pd(), s1 = _mm256_setzero_pd();
  int i = 0;
  for (; i + 8 <= n; i += 8) {
    const __m256 v = _mm256_loadu_ps(x + i);
    const __m256d lo = _mm256_cvtps_pd(_mm256_castps256_ps128(v));
    const __m256d hi = _mm256_cvtps_pd(_mm256_extractf128_ps(v, 1));
    s0 = _mm256_fmadd_pd(lo, lo, s0);
    s1 = _mm256_fmadd_pd(hi, hi, s1);
  }
  alignas(32) double lanes[4];
  _mm256_store_pd(lanes, _mm256_add_pd(s0, s1));
  double sum_sq = (lanes[0] + lanes[1]) + (lanes[2] + lanes[3]);
  for (; i < n; ++i) sum_sq += static_cast<double>(x[i]) * x[i];
  const float inv = static_cast<float>(1.0 / std::sqrt(sum_sq / n + eps));
  const __m256 vinv = _mm256_set1_ps(inv);
  for (i = 0; i + 8 <= n; i += 8)
    _mm256_storeu_ps(out + i, _mm256_mul_ps(_mm256_mul_ps(_mm256_loadu_ps(x + i), vinv),
                                            _mm256_loadu_ps(w + i)));
  for (; i < n; ++i) out[i] = x[i] * inv * w[i];
}

void rope(float* x, int n_heads, int head_dim, int rope_dims, int32_t position,
          const float* inv_freq, RopeStyle style) {
  // cos/sin depend only on (position, pair): computed once for all heads.
  float cos_buf[512], sin_buf[512];
  rope_angles(position, inv_freq, rope_dims / 2, cos_buf, sin_buf);
  rope_rotate(x, n_heads, head_dim, rope_dims, cos_buf, sin_buf, style);
}

void rope_angles(int32_t position, const float* inv_freq, int n_pairs, float* cos, float* sin) {
  for (int i = 0; i < n_pairs; ++i) {
    const double theta = static_cast<double>(position) * inv_freq[i];
    cos[i] = static_cast<float>(std::cos(theta));
    sin[i] = static_cast<float>(std::sin(theta));
  }
}

void rope_rotate(float* x, int n_heads, int head_dim, int rope_dims, const float* cos_buf,
                 const float* sin_buf, RopeStyle style) {
  const int n_pairs = rope_dims / 2;
  for (int h = 0; h < n_heads; ++h) {
    float* head = x + static_cast<size_t>(h) * head_dim;
    for (int i = 0; i < n_pairs; ++i) {
      const int a = style == RopeStyle::kAdjacent ? 2 * i : i;
      const int b = style == RopeStyle::kAdjacent ? 2 * i + 1 : i + n_pairs;
      const float x0 = head[a], x1 = head[b];
      head[a] = x0 * cos_buf[i] - x1 * sin_buf[i];
      head[b] = x0 * sin_buf[i] + x1 * cos_buf[i];
    }
  }
}

namespace {

// SiLU(g)·u on 8 lanes with the contract's exponential (attention_lanes.h):
// σ(g) = 1 / (1 + e^−g) for g ≥ 0 and e^g / (1 + e^g) below, so the
// exponential's argument, −|g|, is never positive. A scalar std::exp per
// element cost ~2 ns, a tenth of a multi-token forward of a 1B model.
inline __m256 silu_times(__m256 g, __m256 u) {
  const __m256 one = _mm256_set1_ps(1.0f);
  const __m256 t =
      attention_lanes::exp_nonpositive<Avx2Lanes>(_mm256_or_ps(g, _mm256_set1_ps(-0.0f)));
  const __m256 sigma = _mm256_div_ps(_mm256_blendv_ps(one, t, g), _mm256_add_ps(one, t));
  return _mm256_mul_ps(_mm256_mul_ps(g, sigma), u);
}

}  // namespace

void swiglu(const float* gate, const float* up, int n, float* out) {
  int i = 0;
  for (; i + 8 <= n; i += 8)
    _mm256_storeu_ps(out + i, silu_times(_mm256_loadu_ps(gate + i), _mm256_loadu_ps(up + i)));
  if (i == n) return;
  // The tail through 8-lane buffers: each element gets the same operations
  // wherever it lies, so a row's result does not depend on how rows are split.
  alignas(32) float g[8] = {}, u[8] = {}, o[8];
  std::memcpy(g, gate + i, sizeof(float) * (n - i));
  std::memcpy(u, up + i, sizeof(float) * (n - i));
  _mm256_store_ps(o, silu_times(_mm256_load_ps(g), _mm256_load_ps(u)));
  std::memcpy(out + i, o, sizeof(float) * (n - i));
}

void geglu_tanh(const float* gate, const float* up, int n, float* out) {
  constexpr float kSqrt2OverPi = 0.79788456080286535588f;
  constexpr float kCubic = 0.044715f;
  for (int i = 0; i < n; ++i) {
    const float g = gate[i];
    const float inner = kSqrt2OverPi * (g + kCubic * g * g * g);
    out[i] = 0.5f * g * (1.0f + std::tanh(inner)) * up[i];
  }
}

void softcap_inplace(float* x, int n, float cap) {
  const float inv = 1.0f / cap;
  for (int i = 0; i < n; ++i) x[i] = cap * std::tanh(x[i] * inv);
}

void add_inplace(float* y, const float* x, int n) {
  for (int i = 0; i < n; ++i) y[i] += x[i];
}

}  // namespace parspec
