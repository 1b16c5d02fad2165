#pragma once
// Helpers shared by the AVX-512 tile kernels; include only from translation
// units compiled with AVX-512 F/BW/VL (matmul_avx512.cpp, kquants_avx512.cpp).
#include <immintrin.h>

#include <cstdint>

namespace parspec::lanes512 {

// A "row quad": 16 bytes at each of a, b, c, d, one per 128-bit lane.
inline __attribute__((always_inline)) __m512i load_quad(const uint8_t* a, const uint8_t* b,
                                                        const uint8_t* c, const uint8_t* d) {
  const auto load16 = [](const uint8_t* p) {
    return _mm_loadu_si128(reinterpret_cast<const __m128i*>(p));
  };
  __m512i z = _mm512_castsi128_si512(load16(a));
  z = _mm512_inserti32x4(z, load16(b), 1);
  z = _mm512_inserti32x4(z, load16(c), 2);
  return _mm512_inserti32x4(z, load16(d), 3);
}

// z[j] holds 16 bytes of rows j, 4 + j, 8 + j, 12 + j in its four 128-bit
// lanes (a "row quad"); a 4 × 4 dword transpose inside each lane puts dword d
// of row 4k + j into lane 4k + j of out[d]: 8 unpacks for 16 rows.
inline __attribute__((always_inline)) void transpose_quads(const __m512i z[4], __m512i out[4]) {
  const __m512i t0 = _mm512_unpacklo_epi32(z[0], z[1]), t1 = _mm512_unpackhi_epi32(z[0], z[1]);
  const __m512i t2 = _mm512_unpacklo_epi32(z[2], z[3]), t3 = _mm512_unpackhi_epi32(z[2], z[3]);
  out[0] = _mm512_unpacklo_epi64(t0, t2);
  out[1] = _mm512_unpackhi_epi64(t0, t2);
  out[2] = _mm512_unpacklo_epi64(t1, t3);
  out[3] = _mm512_unpackhi_epi64(t1, t3);
}

}  // namespace parspec::lanes512
