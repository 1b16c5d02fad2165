#pragma once
// F32/F16/BF16 weight tiles: 8 weight rows against a batch of f32 activation
// rows. One numerics contract on every ISA (which is what keeps results batch
// invariant and bit-identical across PARSPEC_ISA): for output (m, o), a
// 16-lane accumulator where lane j sums w[k]·x[k] for k ≡ j (mod 16) with fma
// in k order (a ragged tail as one zero-padded 16-step), folded as lanes 0-7
// + lanes 8-15, then reduced by fold8 below. An AVX-512 lane holds the whole
// 16-lane accumulator in one register; AVX2 holds it as two 8-lane halves.
#include <immintrin.h>

#include <cstdint>

#include "kernels/quant.h"

namespace parspec::float_tiles {

constexpr int kTileRows = 8;

// The one horizontal reduction of the 8 folded lanes, shared by every path.
inline float reduce8(__m256 v) {
  __m128 s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
  s = _mm_add_ps(s, _mm_movehl_ps(s, s));
  s = _mm_add_ss(s, _mm_movehdup_ps(s));
  return _mm_cvtss_f32(s);
}

// Column groups for a batch of M ≥ 2 activation rows against 4 weight rows:
// at most 6 per group (4×6 accumulators fit the 32 AVX-512 registers), and
// never a group of 1 (4 fma chains cannot hide the fma latency).
inline int column_group(int64_t left) {
  if (left <= 6) return static_cast<int>(left);
  if (left <= 12) return static_cast<int>((left + 1) / 2);
  return 6;
}

// AVX-512 (matmul_avx512.cpp; call only where the CPU has AVX-512 F/BW/VL):
// y[m * ldy + r] for activation rows m < M (x: M × n, row-major) and weight
// rows r < valid of `rows` (type F32, F16 or BF16, n elements each).
void avx512_tile(DType type, const uint8_t* const rows[kTileRows], int valid, const float* x,
                 int64_t M, int64_t n, float* y, int64_t ldy);

}  // namespace parspec::float_tiles
