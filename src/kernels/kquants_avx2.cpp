// The repacked Q4_K and Q6_K kernels (k_tiles.h) built for plain AVX2, so that
// a matrix repacked at load runs under every ISA: four u8 × s8 products per
// int32 lane by maddubs + madd. The weights are at most 6-bit (0..63), so a
// maddubs pair sum is at most 2 · 63 · 128 and never saturates int16: the int32
// sums are vpdpbusd's exactly, and the results those of the other builds.
#include "kernels/k_tiles.h"

namespace parspec::ktiles {
namespace {

struct Dpbusd256Avx2 {
  static __m256i dot(__m256i acc, __m256i u, __m256i s) {
    const __m256i pairs = _mm256_maddubs_epi16(u, s);
    return _mm256_add_epi32(acc, _mm256_madd_epi16(pairs, _mm256_set1_epi16(1)));
  }
};

}  // namespace

KTileKernels avx2_k_tile_kernels() {
  KTileKernels kernels;
  kernels.q4_K_packed = &packed_q4_K<Vec256<Dpbusd256Avx2>>;
  kernels.q6_K_packed = &packed_q6_K<Vec256<Dpbusd256Avx2>>;
  return kernels;
}

}  // namespace parspec::ktiles
