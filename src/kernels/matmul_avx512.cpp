// The Q4_0/Q8_0 tile kernels built for AVX-512 F/BW/VL/VNNI (this file alone is
// compiled with those flags; matmul.cpp calls it only when the CPU has them).
//
// A tile is 16 weight rows, one per 32-bit lane of a 512-bit register, so one
// broadcast activation dword feeds 16 rows and each vpdpbusd does twice the
// work of the 256-bit kernels. Per lane the operations are those of
// q8_tiles.h, in the same order: the exact int32 block sum, then
// acc = fma(float(isum), dw * dx, acc) block by block, so results are
// bit-identical to the AVX2 and AVX-VNNI builds.
// GCC 12 warns that the undefined upper half of _mm512_cast*256_*512 "may be
// used uninitialized" inside its own AVX-512 insert intrinsics (GCC bug 105593);
// the upper half is always overwritten here.
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#include "kernels/q8_tiles.h"

namespace parspec::q8tiles {
namespace {

// The 8-row kernels for a leftover tile: vpdpbusd on 256 bits (AVX512-VL).
struct DotVnni256 {
  static __m256i sum_q4(const __m256i lo[4], const __m256i hi[4], const int8_t* xq) {
    __m256i s = _mm256_setzero_si256();
    for (int d = 0; d < 4; ++d) {
      s = _mm256_dpbusd_epi32(s, lo[d], broadcast_i32(xq + 4 * d));
      s = _mm256_dpbusd_epi32(s, hi[d], broadcast_i32(xq + 16 + 4 * d));
    }
    return s;
  }
  static constexpr bool kBiasedQ8 = true;
  static __m256i sum_q8(const __m256i biased[8], const __m256i[8], const int8_t* xq) {
    // Σ (w + 128)·x; the tile subtracts 128·Σ x.
    __m256i s = _mm256_setzero_si256();
    for (int g = 0; g < 8; ++g) s = _mm256_dpbusd_epi32(s, biased[g], broadcast_i32(xq + 4 * g));
    return s;
  }
};

inline __m512i broadcast_x(const int8_t* p) {
  int32_t v;
  std::memcpy(&v, p, sizeof(v));
  return _mm512_set1_epi32(v);
}

inline __m512i join(__m256i lo, __m256i hi) {
  return _mm512_inserti64x4(_mm512_castsi256_si512(lo), hi, 1);
}

// Dwords [offset, offset + 16) of the current block of 16 rows, transposed:
// out[d] lane r = dword d of row r (d = 0..3).
inline void transpose16x4(const uint8_t* const rows[kTileRows16], int64_t offset, __m512i out[4]) {
  __m256i pairs[4], lo[4], hi[4];
  for (int r = 0; r < 4; ++r) pairs[r] = load_row_pair(rows[r] + offset, rows[r + 4] + offset);
  transpose_8x4(pairs, lo);
  for (int r = 0; r < 4; ++r) pairs[r] = load_row_pair(rows[r + 8] + offset, rows[r + 12] + offset);
  transpose_8x4(pairs, hi);
  for (int d = 0; d < 4; ++d) out[d] = join(lo[d], hi[d]);
}

inline __m512 load_row_scales16(const uint8_t* const rows[kTileRows16], int64_t at) {
  const __m256 lo = load_row_scales(rows, at), hi = load_row_scales(rows + 8, at);
  return _mm512_castpd_ps(_mm512_insertf64x4(
      _mm512_insertf64x4(_mm512_setzero_pd(), _mm256_castps_pd(lo), 0), _mm256_castps_pd(hi), 1));
}

inline void prefetch_next_tile16(const uint8_t* const rows[kTileRows16], size_t row_stride,
                                 int64_t at) {
  const size_t ahead = kTileRows16 * row_stride;
  for (int r = 0; r < kTileRows16; ++r)
    _mm_prefetch(reinterpret_cast<const char*>(rows[r] + at + ahead), _MM_HINT_T0);
}

void tile16_q4_0(const uint8_t* const rows[kTileRows16], size_t row_stride, int64_t nb,
                 const Q8Activations& act, int64_t m0, int64_t m1, float* acc) {
  const __m512i low_mask = _mm512_set1_epi8(0x0f);
  for (int64_t m = m0; m < m1; ++m) _mm512_storeu_ps(acc + (m - m0) * 16, _mm512_setzero_ps());
  for (int64_t b = 0; b < nb; ++b) {
    const int64_t at = b * static_cast<int64_t>(sizeof(BlockQ4_0));
    prefetch_next_tile16(rows, row_stride, at);
    __m512i packed[4], lo[4], hi[4];
    transpose16x4(rows, at + 2, packed);
    for (int d = 0; d < 4; ++d) {
      lo[d] = _mm512_and_si512(packed[d], low_mask);
      hi[d] = _mm512_and_si512(_mm512_srli_epi16(packed[d], 4), low_mask);
    }
    const __m512 dw = load_row_scales16(rows, at);
    for (int64_t m = m0; m < m1; ++m) {
      const int64_t i = m * nb + b;
      const int8_t* xq = act.blocks[i].qs;
      __m512i s = _mm512_setzero_si512();
      for (int d = 0; d < 4; ++d) {
        s = _mm512_dpbusd_epi32(s, lo[d], broadcast_x(xq + 4 * d));
        s = _mm512_dpbusd_epi32(s, hi[d], broadcast_x(xq + 16 + 4 * d));
      }
      // Σ (q − 8)·x = Σ q·x − 8·Σ x.
      const __m512i isum = _mm512_sub_epi32(s, _mm512_set1_epi32(act.sums8[i]));
      const __m512 scale = _mm512_mul_ps(dw, _mm512_set1_ps(act.scales[i]));
      float* a = acc + (m - m0) * 16;
      _mm512_storeu_ps(a, _mm512_fmadd_ps(_mm512_cvtepi32_ps(isum), scale, _mm512_loadu_ps(a)));
    }
  }
}

void tile16_q8_0(const uint8_t* const rows[kTileRows16], size_t row_stride, int64_t nb,
                 const Q8Activations& act, int64_t m0, int64_t m1, float* acc) {
  const __m512i bias = _mm512_set1_epi8(static_cast<char>(0x80));
  for (int64_t m = m0; m < m1; ++m) _mm512_storeu_ps(acc + (m - m0) * 16, _mm512_setzero_ps());
  for (int64_t b = 0; b < nb; ++b) {
    const int64_t at = b * static_cast<int64_t>(sizeof(BlockQ8_0));
    prefetch_next_tile16(rows, row_stride, at);
    // w + 128 as unsigned bytes: vpdpbusd multiplies u8 × s8, and
    // Σ (w + 128)·x − 128·Σ x = Σ w·x exactly, with no sign fix-up per row.
    __m512i w[8];
    transpose16x4(rows, at + 2, w);
    transpose16x4(rows, at + 18, w + 4);
    for (int g = 0; g < 8; ++g) w[g] = _mm512_xor_si512(w[g], bias);
    const __m512 dw = load_row_scales16(rows, at);
    for (int64_t m = m0; m < m1; ++m) {
      const int64_t i = m * nb + b;
      const int8_t* xq = act.blocks[i].qs;
      __m512i s = _mm512_setzero_si512();
      for (int g = 0; g < 8; ++g) s = _mm512_dpbusd_epi32(s, w[g], broadcast_x(xq + 4 * g));
      // sums8 = 8·Σ x, so 128·Σ x = 16·sums8.
      const __m512i isum = _mm512_sub_epi32(s, _mm512_set1_epi32(16 * act.sums8[i]));
      const __m512 scale = _mm512_mul_ps(dw, _mm512_set1_ps(act.scales[i]));
      float* a = acc + (m - m0) * 16;
      _mm512_storeu_ps(a, _mm512_fmadd_ps(_mm512_cvtepi32_ps(isum), scale, _mm512_loadu_ps(a)));
    }
  }
}

}  // namespace

TileKernels avx512_tile_kernels() {
  return {&tile_q4_0<DotVnni256>, &tile_q8_0<DotVnni256>, &tile16_q4_0, &tile16_q8_0};
}

}  // namespace parspec::q8tiles
