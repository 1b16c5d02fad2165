#include "kernels/ops.h"

#include <cmath>

#include "model/model_config.h"

namespace parspec {

void rmsnorm(const float* x, const float* w, int n, float eps, float* out) {
  double sum_sq = 0.0;
  for (int i = 0; i < n; ++i) sum_sq += static_cast<double>(x[i]) * x[i];
  const float inv = static_cast<float>(1.0 / std::sqrt(sum_sq / n + eps));
  for (int i = 0; i < n; ++i) out[i] = x[i] * inv * w[i];
}

void rope(float* x, int n_heads, int head_dim, int rope_dims, int32_t position,
          const float* inv_freq, RopeStyle style) {
  const int n_pairs = rope_dims / 2;
  // cos/sin depend only on (position, pair): computed once for all heads.
  float cos_buf[512], sin_buf[512];
  for (int i = 0; i < n_pairs; ++i) {
    const double theta = static_cast<double>(position) * inv_freq[i];
    cos_buf[i] = static_cast<float>(std::cos(theta));
    sin_buf[i] = static_cast<float>(std::sin(theta));
  }
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

void swiglu(const float* gate, const float* up, int n, float* out) {
  for (int i = 0; i < n; ++i) {
    const float g = gate[i];
    out[i] = g / (1.0f + std::exp(-g)) * up[i];
  }
}

void add_inplace(float* y, const float* x, int n) {
  for (int i = 0; i < n; ++i) y[i] += x[i];
}

}  // namespace parspec
