#pragma once
// What the AVX-512 Q4_0/Q8_0 tiles (matmul_avx512.cpp) and the repacked
// Q4_0/Q8_0 tiles (matmul_packed_avx512.cpp) share: include only from translation units
// compiled with AVX-512 F/BW/VL/VNNI. The repacked tiles live in a translation
// unit of their own because, in matmul_avx512.cpp, their code changed how the
// compiler inlines the row-major Q8_0 tiles, which must stay as they are.
#include <immintrin.h>

#include <cstdint>
#include <cstring>
#include <utility>

#include "kernels/q8_tiles.h"

namespace parspec::q8tiles {
namespace {

PARSPEC_KERNEL_INLINE __m512i broadcast_x(const int8_t* p) {
  int32_t v;
  std::memcpy(&v, p, sizeof(v));
  return _mm512_set1_epi32(v);
}

// The activation arrays as plain pointers, read once per tile: through the
// vectors of Q8Activations every block would reload them (the accumulator
// stores may alias them as far as the compiler knows).
struct ActView {
  const BlockQ8_0* blocks;
  const float* scales;
  const int32_t* minus_sums8;
  const int32_t* minus_sums128;
  explicit ActView(const Q8Activations& a)
      : blocks(a.blocks.data()),
        scales(a.scales.data()),
        minus_sums8(a.minus_sums8.data()),
        minus_sums128(a.minus_sums128.data()) {}
};

// Block b's contribution to activation row m: acc = fma(float(isum), dw·dx, acc).
struct Q4Block16 {
  static constexpr int64_t kBytes = sizeof(BlockQ4_0);
  __m512i lo[4], hi[4];
  __m512 dw;
  // The weights that multiply activation dword g (quants 4g..4g+3).
  PARSPEC_KERNEL_INLINE __m512i part(int g) const { return g < 4 ? lo[g] : hi[g - 4]; }
  static int32_t start(const ActView& act, int64_t i) { return act.minus_sums8[i]; }
  PARSPEC_KERNEL_INLINE __m512 apply(const ActView& act, int64_t i, __m512 acc) const {
    const int8_t* xq = act.blocks[i].qs;
    // Σ (q − 8)·x = Σ q·x − 8·Σ x: the sum starts at −8·Σ x. Two chains of
    // four (the integer sum is exact in any order) let a batch's rows overlap.
    __m512i s0 = _mm512_set1_epi32(act.minus_sums8[i]), s1 = _mm512_setzero_si512();
    for (int d = 0; d < 4; d += 2) {
      s0 = _mm512_dpbusd_epi32(s0, lo[d], broadcast_x(xq + 4 * d));
      s1 = _mm512_dpbusd_epi32(s1, lo[d + 1], broadcast_x(xq + 4 * d + 4));
      s0 = _mm512_dpbusd_epi32(s0, hi[d], broadcast_x(xq + 16 + 4 * d));
      s1 = _mm512_dpbusd_epi32(s1, hi[d + 1], broadcast_x(xq + 16 + 4 * d + 4));
    }
    const __m512i isum = _mm512_add_epi32(s0, s1);
    const __m512 scale = _mm512_mul_ps(dw, _mm512_set1_ps(act.scales[i]));
    return _mm512_fmadd_ps(_mm512_cvtepi32_ps(isum), scale, acc);
  }
};

struct Q8Block16 {
  // w + 128 as unsigned bytes: vpdpbusd multiplies u8 × s8, and
  // Σ (w + 128)·x − 128·Σ x = Σ w·x exactly, with no sign fix-up per row.
  static constexpr int64_t kBytes = sizeof(BlockQ8_0);
  __m512i w[8];
  __m512 dw;
  PARSPEC_KERNEL_INLINE __m512i part(int g) const { return w[g]; }
  static int32_t start(const ActView& act, int64_t i) { return act.minus_sums128[i]; }
  PARSPEC_KERNEL_INLINE __m512 apply(const ActView& act, int64_t i, __m512 acc) const {
    const int8_t* xq = act.blocks[i].qs;
    // Σ (w + 128)·x − 128·Σ x: the sum starts at −128·Σ x; two chains of four.
    __m512i s0 = _mm512_set1_epi32(act.minus_sums128[i]), s1 = _mm512_setzero_si512();
    for (int g = 0; g < 8; g += 2) {
      s0 = _mm512_dpbusd_epi32(s0, w[g], broadcast_x(xq + 4 * g));
      s1 = _mm512_dpbusd_epi32(s1, w[g + 1], broadcast_x(xq + 4 * g + 4));
    }
    const __m512i isum = _mm512_add_epi32(s0, s1);
    const __m512 scale = _mm512_mul_ps(dw, _mm512_set1_ps(act.scales[i]));
    return _mm512_fmadd_ps(_mm512_cvtepi32_ps(isum), scale, acc);
  }
};

// Calls body(std::integral_constant<int, MR>{}) with MR = rows if 1 <= rows
// <= kMaxRegisterRows (the kernels keep MR rows' sums in registers); false
// for any other count.
template <class Body>
bool with_register_rows(int64_t rows, Body&& body) {
  return [&]<int... R>(std::integer_sequence<int, R...>) {
    return ((rows == R + 1 ? (body(std::integral_constant<int, R + 1>{}), true) : false) || ...);
  }
  (std::make_integer_sequence<int, static_cast<int>(kMaxRegisterRows)>{});
}

}  // namespace
}  // namespace parspec::q8tiles
