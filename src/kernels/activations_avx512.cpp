// Activation rows quantized to Q8_0 for the matmul kernels, built for AVX-512
// F/BW/VL: per block the operations of quantize_block_q8_0 (quant.cpp) on 16 lanes
// instead of 8, so the bytes are the same as the AVX2 build's.
// GCC 12 warns about its own AVX-512 intrinsics here (see matmul_avx512.cpp).
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#pragma GCC diagnostic ignored "-Wuninitialized"
#include <immintrin.h>

#include <cstring>

#include "kernels/q8_tiles.h"

namespace parspec::q8tiles {

namespace {

// One block, as quantize_block_q8_0 (quant.cpp); returns Σ quants.
PARSPEC_KERNEL_INLINE int32_t quantize_block(const float* x, BlockQ8_0& block) {
  const __m512 q_max = _mm512_set1_ps(127.0f), q_min = _mm512_set1_ps(-127.0f);
  const __m512 v0 = _mm512_loadu_ps(x), v1 = _mm512_loadu_ps(x + 16);
  // max(a, b) returns b when a is NaN: NaN inputs never become the scale, and
  // without NaN the order of the maxima cannot matter.
  const __m512 amax =
      _mm512_max_ps(_mm512_abs_ps(v1), _mm512_max_ps(_mm512_abs_ps(v0), _mm512_setzero_ps()));
  block.d = static_cast<uint16_t>(
      _cvtss_sh(_mm512_reduce_max_ps(amax) / 127.0f, _MM_FROUND_TO_NEAREST_INT));
  const float d = _cvtsh_ss(block.d);
  if (d == 0.0f) {
    std::memset(block.qs, 0, sizeof(block.qs));
    return 0;
  }
  const __m512 dv = _mm512_set1_ps(d);
  auto quants = [&](__m512 v) {
    __m512 r =
        _mm512_roundscale_ps(_mm512_div_ps(v, dv), _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
    // Clamp (NaN becomes -127): never -128, which the integer dot products rely on.
    r = _mm512_min_ps(_mm512_max_ps(r, q_min), q_max);
    return _mm512_cvtps_epi32(r);
  };
  const __m512i q0 = quants(v0), q1 = quants(v1);
  _mm_storeu_si128(reinterpret_cast<__m128i*>(block.qs), _mm512_cvtepi32_epi8(q0));
  _mm_storeu_si128(reinterpret_cast<__m128i*>(block.qs + 16), _mm512_cvtepi32_epi8(q1));
  return _mm512_reduce_add_epi32(_mm512_add_epi32(q0, q1));
}

}  // namespace

void quantize_activation_rows_avx512(const float* x, int64_t n_in, int64_t M, int64_t row0,
                                     int64_t row1, bool pairs, Q8Activations& out) {
  quantize_activation_rows(x, n_in, M, row0, row1, pairs, out, quantize_block);
}

}  // namespace parspec::q8tiles
