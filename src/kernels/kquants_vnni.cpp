// The Q4_K/Q6_K tile kernels built for AVX-VNNI (this file alone is compiled
// with -mavxvnni; matmul.cpp calls it only when the CPU reports the feature):
// k_tiles.h's 8-row kernels with the VEX-encoded 256-bit vpdpbusd.
#include "kernels/k_tiles.h"

namespace parspec::ktiles {
namespace {

struct Dpbusd256Vex {
  static __m256i dot(__m256i acc, __m256i u, __m256i s) {
    return _mm256_dpbusd_avx_epi32(acc, u, s);
  }
};

}  // namespace

KTileKernels vnni_k_tile_kernels() {
  using V8 = Vec256<Dpbusd256Vex>;
  return {&tile_q4_K<V8>, &tile_q6_K<V8>, nullptr, nullptr, &packed_q4_K<V8>, &packed_q6_K<V8>};
}

}  // namespace parspec::ktiles
