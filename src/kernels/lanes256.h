#pragma once
// The 256-bit (AVX2/FMA) lane traits that the width-generic kernels of
// attention_lanes.h are written over; include only from translation units
// compiled with AVX2/FMA (attention.cpp, ops.cpp).
#include <immintrin.h>

namespace parspec {

struct Avx2Lanes {
  using V = __m256;
  static constexpr int W = 8;
  static V zero() { return _mm256_setzero_ps(); }
  static V set1(float x) { return _mm256_set1_ps(x); }
  static V load(const float* p) { return _mm256_loadu_ps(p); }
  static void store(float* p, V v) { _mm256_storeu_ps(p, v); }
  static V add(V a, V b) { return _mm256_add_ps(a, b); }
  static V sub(V a, V b) { return _mm256_sub_ps(a, b); }
  static V mul(V a, V b) { return _mm256_mul_ps(a, b); }
  static V div(V a, V b) { return _mm256_div_ps(a, b); }
  static V max(V a, V b) { return _mm256_max_ps(a, b); }
  static V fma(V a, V b, V c) { return _mm256_fmadd_ps(a, b, c); }
  static V fnmadd(V a, V b, V c) { return _mm256_fnmadd_ps(a, b, c); }
  static V round(V x) { return _mm256_round_ps(x, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC); }
  // 2^n for integral n in [-126, 0].
  static V pow2(V n) {
    const __m256i e = _mm256_add_epi32(_mm256_cvtps_epi32(n), _mm256_set1_epi32(127));
    return _mm256_castsi256_ps(_mm256_slli_epi32(e, 23));
  }
  static __m256i load_counts(const int* nk) {
    return _mm256_loadu_si256(reinterpret_cast<const __m256i*>(nk));
  }
  // v where key j is one of the lane's keys (j < nk), else `otherwise`.
  static V keep_valid(V v, V otherwise, __m256i nk, int j) {
    const __m256 valid = _mm256_castsi256_ps(_mm256_cmpgt_epi32(nk, _mm256_set1_epi32(j)));
    return _mm256_blendv_ps(otherwise, v, valid);
  }
};

// Rows r of an 8 × 8 block (8 floats each) to columns: out[c] lane r = in[r][c].
inline void transpose8(const __m256 in[8], __m256 out[8]) {
  __m256 t[8], u[8];
  for (int i = 0; i < 4; ++i) {
    t[2 * i] = _mm256_unpacklo_ps(in[2 * i], in[2 * i + 1]);
    t[2 * i + 1] = _mm256_unpackhi_ps(in[2 * i], in[2 * i + 1]);
  }
  for (int i = 0; i < 2; ++i) {
    u[4 * i + 0] = _mm256_shuffle_ps(t[4 * i], t[4 * i + 2], 0x44);
    u[4 * i + 1] = _mm256_shuffle_ps(t[4 * i], t[4 * i + 2], 0xee);
    u[4 * i + 2] = _mm256_shuffle_ps(t[4 * i + 1], t[4 * i + 3], 0x44);
    u[4 * i + 3] = _mm256_shuffle_ps(t[4 * i + 1], t[4 * i + 3], 0xee);
  }
  for (int i = 0; i < 4; ++i) {
    out[i] = _mm256_permute2f128_ps(u[i], u[4 + i], 0x20);
    out[4 + i] = _mm256_permute2f128_ps(u[i], u[4 + i], 0x31);
  }
}

// Mask of the first n lanes (n in [0, 8]) for maskload.
inline __m256i first_lanes(int n) {
  return _mm256_cmpgt_epi32(_mm256_set1_epi32(n), _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7));
}

}  // namespace parspec
