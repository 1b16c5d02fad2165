// The Q4_0/Q8_0 tile kernels built for AVX-VNNI (this file alone is compiled
// with -mavxvnni; matmul.cpp calls it only when the CPU reports the feature).
// vpdpbusd adds four u8 × s8 products straight into each int32 lane: one
// instruction where AVX2 needs maddubs, madd and an add.
#include "kernels/q8_tiles.h"

namespace parspec::q8tiles {
namespace {

struct DotVnni {
  static __m256i sum_q4(const __m256i lo[4], const __m256i hi[4], const int8_t* xq) {
    __m256i s = _mm256_setzero_si256();
    for (int d = 0; d < 4; ++d) {
      s = _mm256_dpbusd_avx_epi32(s, lo[d], broadcast_i32(xq + 4 * d));
      s = _mm256_dpbusd_avx_epi32(s, hi[d], broadcast_i32(xq + 16 + 4 * d));
    }
    return s;
  }
  static constexpr bool kBiasedQ8 = true;
  static __m256i sum_q8(const __m256i biased[8], const __m256i[8], const int8_t* xq) {
    // Σ (w + 128)·x; the tile subtracts 128·Σ x.
    __m256i s = _mm256_setzero_si256();
    for (int g = 0; g < 8; ++g)
      s = _mm256_dpbusd_avx_epi32(s, biased[g], broadcast_i32(xq + 4 * g));
    return s;
  }
};

}  // namespace

TileKernels vnni_tile_kernels() {
  return {&tile_q4_0<DotVnni>, &tile_q8_0<DotVnni>};
}

PackedKernels vnni_packed_kernels() {
  PackedKernels k;
  k.q4_0 = &packed_q4_0<DotVnni>;
  k.q8_0 = &packed_q8_0<DotVnni>;
  return k;
}

}  // namespace parspec::q8tiles
