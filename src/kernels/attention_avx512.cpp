// The query-in-lanes attention kernel (kernels/attention_lanes.h) on 16
// lanes; this file alone is compiled with AVX-512 F/BW/VL.
// GCC 12 warns that the undefined registers its own AVX-512 intrinsics start
// from are "used uninitialized" (GCC bug 105593); every lane used is written.
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#pragma GCC diagnostic ignored "-Wuninitialized"
#include "kernels/attention_avx512.h"

#include <immintrin.h>

#include <algorithm>
#include <type_traits>

#include "kernels/attention_lanes.h"
#include "kernels/lanes256.h"

namespace parspec::attention_avx512 {
namespace {

struct Avx512Lanes {
  using V = __m512;
  static constexpr int W = kLanes;
  static V zero() { return _mm512_setzero_ps(); }
  static V set1(float x) { return _mm512_set1_ps(x); }
  static V load(const float* p) { return _mm512_loadu_ps(p); }
  static void store(float* p, V v) { _mm512_storeu_ps(p, v); }
  static V add(V a, V b) { return _mm512_add_ps(a, b); }
  static V sub(V a, V b) { return _mm512_sub_ps(a, b); }
  static V mul(V a, V b) { return _mm512_mul_ps(a, b); }
  static V div(V a, V b) { return _mm512_div_ps(a, b); }
  static V max(V a, V b) { return _mm512_max_ps(a, b); }
  static V fma(V a, V b, V c) { return _mm512_fmadd_ps(a, b, c); }
  static V fnmadd(V a, V b, V c) { return _mm512_fnmadd_ps(a, b, c); }
  static V round(V x) {
    return _mm512_roundscale_ps(x, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
  }
  static V pow2(V n) {
    const __m512i e = _mm512_add_epi32(_mm512_cvtps_epi32(n), _mm512_set1_epi32(127));
    return _mm512_castsi512_ps(_mm512_slli_epi32(e, 23));
  }
  static __m512i load_counts(const int* nk) { return _mm512_loadu_si512(nk); }
  static V keep_valid(V v, V otherwise, __m512i nk, int j) {
    return _mm512_mask_blend_ps(_mm512_cmpgt_epi32_mask(nk, _mm512_set1_epi32(j)), otherwise, v);
  }
};

// Two 8-float halves as one vector (AVX-512F has no float insert of 8).
inline __m512 join(__m256 lo, __m256 hi) {
  return _mm512_castpd_ps(
      _mm512_insertf64x4(_mm512_castps_pd(_mm512_castps256_ps512(lo)), _mm256_castps_pd(hi), 1));
}

// Scores of NQ queries, 16 keys per vector: two blocks of 8 key rows
// transposed 8 dimensions at a time, each fma chain over d in order.
template <int NQ>
void key_lane_scores_for(const float* const* qs, int nk_max, const float* const* keys, int hd,
                         float scale, float* s, size_t stride) {
  const int hd8 = hd & ~7;
  const __m256i tail_mask = first_lanes(hd - hd8);
  const __m512 vscale = _mm512_set1_ps(scale);
  for (int b = 0; b * 16 < nk_max; ++b) {
    const float* rows[16];
    for (int u = 0; u < 16; ++u) rows[u] = keys[std::min(16 * b + u, nk_max - 1)];
    __m512 acc[NQ];
    for (int i = 0; i < NQ; ++i) acc[i] = _mm512_setzero_ps();
    for (int d0 = 0; d0 < hd; d0 += 8) {
      __m256 in[2][8], kt[2][8];
      for (int h = 0; h < 2; ++h) {
        for (int u = 0; u < 8; ++u)
          in[h][u] = d0 < hd8 ? _mm256_loadu_ps(rows[8 * h + u] + d0)
                              : _mm256_maskload_ps(rows[8 * h + u] + d0, tail_mask);
        transpose8(in[h], kt[h]);
      }
      const int dn = std::min(8, hd - d0);
      for (int dd = 0; dd < dn; ++dd) {
        const __m512 k = join(kt[0][dd], kt[1][dd]);
        for (int i = 0; i < NQ; ++i)
          acc[i] = _mm512_fmadd_ps(_mm512_set1_ps(qs[i][d0 + dd]), k, acc[i]);
      }
    }
    for (int i = 0; i < NQ; ++i)
      _mm512_storeu_ps(s + i * stride + 16 * b, _mm512_mul_ps(acc[i], vscale));
  }
}

// Weighted values of NQ queries over 64 dimensions from d0 (4 vectors): each
// value row is read once for all queries; per (query, dimension) one fma
// chain over the keys in order.
template <int NQ>
void key_lane_values_64(const float* s, size_t stride, const int* nk, const float* const* values,
                        int d0, const float* inv, float* const* outs) {
  int n_min = nk[0], n_max = nk[0];
  for (int i = 1; i < NQ; ++i) {
    n_min = std::min(n_min, nk[i]);
    n_max = std::max(n_max, nk[i]);
  }
  __m512 acc[NQ][4];
  for (int i = 0; i < NQ; ++i)
    for (int c = 0; c < 4; ++c) acc[i][c] = _mm512_setzero_ps();
  for (int j = 0; j < n_max; ++j) {
    const float* v = values[j] + d0;
    __m512 vv[4];
    for (int c = 0; c < 4; ++c) vv[c] = _mm512_loadu_ps(v + 16 * c);
    for (int i = 0; i < NQ; ++i) {
      if (j >= n_min && j >= nk[i]) continue;
      const __m512 p = _mm512_set1_ps(s[i * stride + j]);
      for (int c = 0; c < 4; ++c) acc[i][c] = _mm512_fmadd_ps(p, vv[c], acc[i][c]);
    }
  }
  for (int i = 0; i < NQ; ++i)
    for (int c = 0; c < 4; ++c)
      _mm512_storeu_ps(outs[i] + d0 + 16 * c, _mm512_mul_ps(acc[i][c], _mm512_set1_ps(inv[i])));
}

// The same for the last dn < 64 dimensions, one vector at a time (masked).
void key_lane_values_tail(int nq, const float* s, size_t stride, const int* nk,
                          const float* const* values, int d0, int dn, const float* inv,
                          float* const* outs) {
  for (int c0 = 0; c0 < dn; c0 += 16) {
    const __mmask16 lanes = static_cast<__mmask16>((1u << std::min(16, dn - c0)) - 1);
    for (int i = 0; i < nq; ++i) {
      __m512 acc = _mm512_setzero_ps();
      for (int j = 0; j < nk[i]; ++j)
        acc = _mm512_fmadd_ps(_mm512_set1_ps(s[i * stride + j]),
                              _mm512_maskz_loadu_ps(lanes, values[j] + d0 + c0), acc);
      _mm512_mask_storeu_ps(outs[i] + d0 + c0, lanes, _mm512_mul_ps(acc, _mm512_set1_ps(inv[i])));
    }
  }
}

// NQ as a constant (1..kKeyLaneQueries), so the accumulators stay in registers.
template <class Body>
void with_query_count(int nq, const Body& body) {
  switch (nq) {
    case 1:
      return body(std::integral_constant<int, 1>{});
    case 2:
      return body(std::integral_constant<int, 2>{});
    case 3:
      return body(std::integral_constant<int, 3>{});
    default:
      return body(std::integral_constant<int, 4>{});
  }
}

}  // namespace

void key_lane_scores(int nq, const float* const* qs, int nk_max, const float* const* keys, int hd,
                     float scale, float* s, size_t stride) {
  with_query_count(nq, [&](auto n) {
    key_lane_scores_for<decltype(n)::value>(qs, nk_max, keys, hd, scale, s, stride);
  });
}

void key_lane_values(int nq, const float* s, size_t stride, const int* nk,
                     const float* const* values, int hd, const float* inv, float* const* outs) {
  int d0 = 0;
  for (; d0 + 64 <= hd; d0 += 64)
    with_query_count(nq, [&](auto n) {
      key_lane_values_64<decltype(n)::value>(s, stride, nk, values, d0, inv, outs);
    });
  if (d0 < hd) key_lane_values_tail(nq, s, stride, nk, values, d0, hd - d0, inv, outs);
}

void queries_in_lanes(const float* const* qs, const int* nk, const float* const* keys,
                      const float* const* values, int hd, float scale, AttentionScratch& scratch,
                      float* const* outs) {
  attention_lanes::queries_in_lanes<Avx512Lanes>(qs, nk, keys, values, hd, scale, scratch, outs);
}

void queries_in_two_vectors(const float* const* qs, const int* nk, const float* const* keys,
                            const float* const* values, int hd, float scale,
                            AttentionScratch& scratch, float* const* outs) {
  attention_lanes::queries_in_lanes<Avx512Lanes, 2>(qs, nk, keys, values, hd, scale, scratch, outs);
}

}  // namespace parspec::attention_avx512
