#include "kernels/attention.h"

#include <immintrin.h>

#include <cmath>

namespace parspec {

namespace {

float dot(const float* a, const float* b, int n) {
  __m256 acc = _mm256_setzero_ps();
  int i = 0;
  for (; i + 8 <= n; i += 8)
    acc = _mm256_fmadd_ps(_mm256_loadu_ps(a + i), _mm256_loadu_ps(b + i), acc);
  __m128 s = _mm_add_ps(_mm256_castps256_ps128(acc), _mm256_extractf128_ps(acc, 1));
  s = _mm_add_ps(s, _mm_movehl_ps(s, s));
  s = _mm_add_ss(s, _mm_movehdup_ps(s));
  float sum = _mm_cvtss_f32(s);
  for (; i < n; ++i) sum += a[i] * b[i];
  return sum;
}

}  // namespace

void attend(const float* q, const float* const* keys, const float* const* values, int n_keys,
            int head_dim, float scale, AttentionScratch& scratch, float* out) {
  if (static_cast<int>(scratch.scores.size()) < n_keys) scratch.scores.resize(n_keys);
  float* s = scratch.scores.data();
  float max_score = -INFINITY;
  for (int j = 0; j < n_keys; ++j) {
    s[j] = dot(q, keys[j], head_dim) * scale;
    max_score = std::max(max_score, s[j]);
  }
  double sum = 0.0;
  for (int j = 0; j < n_keys; ++j) {
    s[j] = std::exp(s[j] - max_score);
    sum += s[j];
  }
  for (int d = 0; d < head_dim; ++d) out[d] = 0.0f;
  for (int j = 0; j < n_keys; ++j) {
    const float p = s[j];
    const float* v = values[j];
    int d = 0;
    const __m256 pv = _mm256_set1_ps(p);
    for (; d + 8 <= head_dim; d += 8)
      _mm256_storeu_ps(out + d,
                       _mm256_fmadd_ps(pv, _mm256_loadu_ps(v + d), _mm256_loadu_ps(out + d)));
    for (; d < head_dim; ++d) out[d] += p * v[d];
  }
  const float inv = static_cast<float>(1.0 / sum);
  for (int d = 0; d < head_dim; ++d) out[d] *= inv;
}

void attend_reference(const float* q, const float* const* keys, const float* const* values,
                      int n_keys, int head_dim, float scale, float* out) {
  std::vector<double> s(n_keys);
  double max_score = -INFINITY;
  for (int j = 0; j < n_keys; ++j) {
    double acc = 0.0;
    for (int d = 0; d < head_dim; ++d) acc += static_cast<double>(q[d]) * keys[j][d];
    s[j] = acc * scale;
    max_score = std::max(max_score, s[j]);
  }
  double sum = 0.0;
  for (int j = 0; j < n_keys; ++j) sum += (s[j] = std::exp(s[j] - max_score));
  for (int d = 0; d < head_dim; ++d) {
    double acc = 0.0;
    for (int j = 0; j < n_keys; ++j) acc += s[j] * values[j][d];
    out[d] = static_cast<float>(acc / sum);
  }
}

}  // namespace parspec
