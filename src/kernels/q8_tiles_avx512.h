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

// Block b's contribution to activation row i (k.part(g) multiplying
// activation dword g): acc = fma(float(isum), dw·dx, acc), the integer sum
// starting at Block::start (the offset correction) in two chains of four
// (exact in any order; two chains let a batch's rows overlap).
template <class Block>
PARSPEC_KERNEL_INLINE __m512 apply_block16(const Block& k, const ActView& act, int64_t i,
                                           __m512 acc) {
  const int8_t* xq = act.blocks[i].qs;
  __m512i s0 = _mm512_set1_epi32(Block::start(act, i)), s1 = _mm512_setzero_si512();
  for (int g = 0; g < 8; g += 2) {
    s0 = _mm512_dpbusd_epi32(s0, k.part(g), broadcast_x(xq + 4 * g));
    s1 = _mm512_dpbusd_epi32(s1, k.part(g + 1), broadcast_x(xq + 4 * g + 4));
  }
  const __m512i isum = _mm512_add_epi32(s0, s1);
  const __m512 scale = _mm512_mul_ps(k.dw, _mm512_set1_ps(act.scales[i]));
  return _mm512_fmadd_ps(_mm512_cvtepi32_ps(isum), scale, acc);
}

struct Q4Block16 {
  static constexpr int64_t kBytes = sizeof(BlockQ4_0);
  __m512i lo[4], hi[4];
  __m512 dw;
  // The weights that multiply activation dword g (quants 4g..4g+3).
  PARSPEC_KERNEL_INLINE __m512i part(int g) const { return g < 4 ? lo[g] : hi[g - 4]; }
  // Σ (q − 8)·x = Σ q·x − 8·Σ x: the sum starts at −8·Σ x.
  static int32_t start(const ActView& act, int64_t i) { return act.minus_sums8[i]; }
  PARSPEC_KERNEL_INLINE __m512 apply(const ActView& act, int64_t i, __m512 acc) const {
    return apply_block16(*this, act, i, acc);
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
    return apply_block16(*this, act, i, acc);
  }
};

// Block b of 32 rows (k0: rows 0-15, k1: 16-31) applied to activation rows
// [m0, m1), accumulated in acc (32 per row): each broadcast activation dword
// feeds both halves. Per lane the same integer sum and fma as apply_block16.
template <class Block>
PARSPEC_KERNEL_INLINE void apply_block_pair(const Block& k0, const Block& k1, const ActView& act,
                                            int64_t nb, int64_t b, int64_t m0, int64_t m1,
                                            float* acc) {
  for (int64_t m = m0; m < m1; ++m) {
    const int64_t i = m * nb + b;
    const int8_t* xq = act.blocks[i].qs;
    const __m512i start = _mm512_set1_epi32(Block::start(act, i));
    __m512i a0 = start, a1 = _mm512_setzero_si512(), c0 = start, c1 = _mm512_setzero_si512();
    for (int g = 0; g < 8; g += 2) {
      const __m512i x0 = broadcast_x(xq + 4 * g), x1 = broadcast_x(xq + 4 * g + 4);
      a0 = _mm512_dpbusd_epi32(a0, k0.part(g), x0);
      c0 = _mm512_dpbusd_epi32(c0, k1.part(g), x0);
      a1 = _mm512_dpbusd_epi32(a1, k0.part(g + 1), x1);
      c1 = _mm512_dpbusd_epi32(c1, k1.part(g + 1), x1);
    }
    const __m512 dx = _mm512_set1_ps(act.scales[i]);
    float* out = acc + (m - m0) * 32;
    _mm512_storeu_ps(out, _mm512_fmadd_ps(_mm512_cvtepi32_ps(_mm512_add_epi32(a0, a1)),
                                          _mm512_mul_ps(k0.dw, dx), _mm512_loadu_ps(out)));
    _mm512_storeu_ps(out + 16,
                     _mm512_fmadd_ps(_mm512_cvtepi32_ps(_mm512_add_epi32(c0, c1)),
                                     _mm512_mul_ps(k1.dw, dx), _mm512_loadu_ps(out + 16)));
  }
}

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
