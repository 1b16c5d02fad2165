// The Q4_K/Q6_K tile kernels built for AVX-512 F/BW/VL/VNNI (this file alone is
// compiled with those flags; matmul.cpp calls it only when the CPU has them):
// 16 weight rows, one per 32-bit lane of a 512-bit register, so one broadcast
// activation dword feeds 16 rows through one vpdpbusd; up to 8 activation
// rows' sums stay in registers. The arithmetic is k_tiles.h's, so results are
// bit-identical to the AVX2 and AVX-VNNI builds.
// GCC 12 warns that the undefined registers its own AVX-512 insert/extract
// intrinsics start from (_mm*_undefined_*) are "used uninitialized" (GCC bug
// 105593); every lane of the results here is written.
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#pragma GCC diagnostic ignored "-Wuninitialized"
#include "kernels/k_tiles.h"
#include "kernels/lanes512.h"

namespace parspec::ktiles {
namespace {

struct Dpbusd256Evex {
  static __m256i dot(__m256i acc, __m256i u, __m256i s) { return _mm256_dpbusd_epi32(acc, u, s); }
};

struct Vec512 {
  static constexpr int kRows = 16;
  // 8 activation rows' int32 sums and dot chains plus the block's 8 weight
  // vectors fit the 32 zmm registers.
  static constexpr int kMaxM = 8;
  using I = __m512i;
  using F = __m512;
  static I zero() { return _mm512_setzero_si512(); }
  static F zerof() { return _mm512_setzero_ps(); }
  static I set1(int32_t v) { return _mm512_set1_epi32(v); }
  static I set1_8(char v) { return _mm512_set1_epi8(v); }
  static F set1f(float v) { return _mm512_set1_ps(v); }
  static I bcast(const int8_t* p) {
    int32_t v;
    std::memcpy(&v, p, sizeof(v));
    return _mm512_set1_epi32(v);
  }
  static I add(I a, I b) { return _mm512_add_epi32(a, b); }
  static I sub(I a, I b) { return _mm512_sub_epi32(a, b); }
  static I mullo(I a, I b) { return _mm512_mullo_epi32(a, b); }
  static I madd16(I a, I b) { return _mm512_madd_epi16(a, b); }
  static I dpbusd(I acc, I u, I s) { return _mm512_dpbusd_epi32(acc, u, s); }
  static I and_(I a, I b) { return _mm512_and_si512(a, b); }
  static I or_(I a, I b) { return _mm512_or_si512(a, b); }
  static I srli16(I a, int n) { return _mm512_srli_epi16(a, static_cast<unsigned>(n)); }
  static I slli16(I a, int n) { return _mm512_slli_epi16(a, static_cast<unsigned>(n)); }
  static I srli32(I a, int n) { return _mm512_srli_epi32(a, static_cast<unsigned>(n)); }
  static I slli32(I a, int n) { return _mm512_slli_epi32(a, static_cast<unsigned>(n)); }
  static I srai32(I a, int n) { return _mm512_srai_epi32(a, static_cast<unsigned>(n)); }
  static I srai16(I a, int n) { return _mm512_srai_epi16(a, static_cast<unsigned>(n)); }
  static F cvt(I a) { return _mm512_cvtepi32_ps(a); }
  static F addf(F a, F b) { return _mm512_add_ps(a, b); }
  static F mul(F a, F b) { return _mm512_mul_ps(a, b); }
  static F fmadd(F a, F b, F c) { return _mm512_fmadd_ps(a, b, c); }
  static F fmsub(F a, F b, F c) { return _mm512_fmsub_ps(a, b, c); }
  static F loadf(const float* p) { return _mm512_loadu_ps(p); }
  static void storef(float* p, F v) { _mm512_storeu_ps(p, v); }
  static I load_lanes(const uint8_t* p) { return _mm512_loadu_si512(p); }
  static I load_split(const uint8_t* lo, const uint8_t* hi) {
    return _mm512_inserti64x4(
        _mm512_castsi256_si512(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(lo))),
        _mm256_loadu_si256(reinterpret_cast<const __m256i*>(hi)), 1);
  }
  // z[r] holds the 16 bytes of rows r, r + 4, r + 8, r + 12 in its four
  // 128-bit lanes; a 4 × 4 dword transpose within each lane then puts dword d
  // of row 4c + r into lane 4c + r of out[d].
  PARSPEC_KERNEL_INLINE static void transpose16(const uint8_t* const rows[kRows], int64_t at,
                                                I out[4]) {
    I z[4];
    for (int r = 0; r < 4; ++r)
      z[r] =
          lanes512::load_quad(rows[r] + at, rows[r + 4] + at, rows[r + 8] + at, rows[r + 12] + at);
    lanes512::transpose_quads(z, out);
  }
  static F f16_lanes(const uint8_t* p) {
    return _mm512_cvtph_ps(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(p)));
  }
  static F f16_low(I v) { return _mm512_cvtph_ps(_mm512_cvtepi32_epi16(v)); }
  static F f16_high(I v) { return f16_low(_mm512_srli_epi32(v, 16)); }
  static F f16_rows(const uint8_t* const rows[kRows], int64_t at) {
    const __m256 lo = q8tiles::load_row_scales(rows, at),
                 hi = q8tiles::load_row_scales(rows + 8, at);
    return _mm512_castpd_ps(
        _mm512_insertf64x4(_mm512_castpd256_pd512(_mm256_castps_pd(lo)), _mm256_castps_pd(hi), 1));
  }
};

}  // namespace

KTileKernels avx512_k_tile_kernels() {
  using V8 = Vec256<Dpbusd256Evex>;
  return {&tile_q4_K<V8>,     &tile_q6_K<V8>,       &tile_q4_K<Vec512>,
          &tile_q6_K<Vec512>, &packed_q4_K<Vec512>, &packed_q6_K<Vec512>};
}

}  // namespace parspec::ktiles
