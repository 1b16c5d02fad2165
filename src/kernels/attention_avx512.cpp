// The query-in-lanes attention kernel (kernels/attention_lanes.h) on 16
// lanes; this file alone is compiled with AVX-512 F/BW/VL.
// GCC 12 warns that the undefined registers its own AVX-512 intrinsics start
// from are "used uninitialized" (GCC bug 105593); every lane used is written.
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#pragma GCC diagnostic ignored "-Wuninitialized"
#include "kernels/attention_avx512.h"

#include <immintrin.h>

#include "kernels/attention_lanes.h"

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

}  // namespace

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
