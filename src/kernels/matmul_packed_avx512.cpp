// The repacked Q4_0 tile kernels (kernels/repack.h) built for AVX-512
// F/BW/VL/VNNI, in a translation unit of their own (see q8_tiles_avx512.h).
// Per lane the operations of the row-major tiles of matmul_avx512.cpp, in the
// same order, so results are bit-identical to every other path.
// GCC 12 warns about its own AVX-512 intrinsics here (see matmul_avx512.cpp).
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#pragma GCC diagnostic ignored "-Wuninitialized"
#include "kernels/q8_tiles_avx512.h"

namespace parspec::q8tiles {
namespace {

// Block b of a repacked group: the quant vectors are the lanes already, the
// 16 scales contiguous.
inline Q4Block16 load_q4_packed(const repack::Group& group, int64_t b) {
  const __m512i low_mask = _mm512_set1_epi8(0x0f);
  const uint8_t* quants = group.quants(b);
  Q4Block16 k;
  for (int d = 0; d < 4; ++d) {
    const __m512i packed = _mm512_loadu_si512(quants + 64 * d);
    k.lo[d] = _mm512_and_si512(packed, low_mask);
    k.hi[d] = _mm512_and_si512(_mm512_srli_epi16(packed, 4), low_mask);
  }
  k.dw = _mm512_cvtph_ps(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(group.scales(b))));
  return k;
}

// One group of 16 rows, one sequential stream. MR > 0: exactly MR activation
// rows (up to 8: a verification chain), accumulated in registers; MR = 0: any
// number, accumulated in acc. As tile16 of matmul_avx512.cpp, without the
// transposition.
template <int MR>
void packed16(const uint8_t* group, int64_t nb, const Q8Activations& activations, int64_t m0,
              int64_t m1, float* acc) {
  const ActView act(activations);
  const repack::Group g{group, nb};
  __m512 regs[MR > 0 ? MR : 1];
  for (int j = 0; j < MR; ++j) regs[j] = _mm512_setzero_ps();
  if (MR == 0)
    for (int64_t m = m0; m < m1; ++m) _mm512_storeu_ps(acc + (m - m0) * 16, _mm512_setzero_ps());
  for (int64_t b = 0; b < nb; ++b) {
    prefetch_packed_block(g, b);
    const Q4Block16 k = load_q4_packed(g, b);
    if constexpr (MR > 0) {
      for (int j = 0; j < MR; ++j) regs[j] = k.apply(act, (m0 + j) * nb + b, regs[j]);
    } else {
      for (int64_t m = m0; m < m1; ++m) {
        float* a = acc + (m - m0) * 16;
        _mm512_storeu_ps(a, k.apply(act, m * nb + b, _mm512_loadu_ps(a)));
      }
    }
  }
  for (int j = 0; j < MR; ++j) _mm512_storeu_ps(acc + j * 16, regs[j]);
}

PARSPEC_KERNEL_INLINE __m512i broadcast_pair(const void* p) {
  int64_t v;
  std::memcpy(&v, p, sizeof(v));
  return _mm512_set1_epi64(v);
}

// NP pairs of activation rows (Q8Activations::pair_blocks, rows from 0): each
// weight dword is duplicated into two lanes, so one 64-bit broadcast of a
// pair's activation dwords feeds one vpdpbusd for both rows. With 16 rows a
// lane, 4-8 rows were bound by their broadcast loads (ten per row and block:
// measured ~47 cycles per block of 8 rows in L1, ~41 paired, where the
// vpdpbusd and fma count bounds it at 40). Lane 4k + 2j + h of half 0 is row
// 4k + j for row h of the pair, of half 1 row 4k + 2 + j. Per lane the same
// integer sum and the same fma as packed16.
template <int NP>
void packed16_pairs(const uint8_t* group, int64_t nb, const Q8Activations& act, int64_t m1,
                    float* acc) {
  const repack::Group g{group, nb};
  const __m512i low_mask = _mm512_set1_epi8(0x0f);
  const int8_t* xq = act.pair_blocks.data();
  const float* xs = act.pair_scales.data();
  const int32_t* xm = act.pair_minus_sums8.data();
  __m512 regs[NP][2];
  for (int p = 0; p < NP; ++p) regs[p][0] = regs[p][1] = _mm512_setzero_ps();
  for (int64_t b = 0; b < nb; ++b) {
    prefetch_packed_block(g, b);
    const uint8_t* quants = g.quants(b);
    __m512i w[2][8];
    for (int d = 0; d < 4; ++d) {
      const __m512i packed = _mm512_loadu_si512(quants + 64 * d);
      const __m512i lo = _mm512_and_si512(packed, low_mask);
      const __m512i hi = _mm512_and_si512(_mm512_srli_epi16(packed, 4), low_mask);
      w[0][d] = _mm512_unpacklo_epi32(lo, lo);
      w[1][d] = _mm512_unpackhi_epi32(lo, lo);
      w[0][d + 4] = _mm512_unpacklo_epi32(hi, hi);
      w[1][d + 4] = _mm512_unpackhi_epi32(hi, hi);
    }
    const __m512 dw =
        _mm512_cvtph_ps(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(g.scales(b))));
    const __m512 dw0 = _mm512_unpacklo_ps(dw, dw), dw1 = _mm512_unpackhi_ps(dw, dw);
    for (int p = 0; p < NP; ++p) {
      const int64_t i = p * nb + b;
      // Σ (q − 8)·x = Σ q·x − 8·Σ x: each sum starts at its row's −8·Σ x.
      __m512i s0 = broadcast_pair(xm + 2 * i), s1 = s0;
      for (int k = 0; k < 8; ++k) {
        const __m512i x = broadcast_pair(xq + 64 * i + 8 * k);
        s0 = _mm512_dpbusd_epi32(s0, w[0][k], x);
        s1 = _mm512_dpbusd_epi32(s1, w[1][k], x);
      }
      const __m512 dx = _mm512_castsi512_ps(broadcast_pair(xs + 2 * i));
      regs[p][0] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(s0), _mm512_mul_ps(dw0, dx), regs[p][0]);
      regs[p][1] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(s1), _mm512_mul_ps(dw1, dx), regs[p][1]);
    }
  }
  for (int p = 0; p < NP; ++p) {
    alignas(64) float half[2][16];
    _mm512_store_ps(half[0], regs[p][0]);
    _mm512_store_ps(half[1], regs[p][1]);
    for (int h = 0; h < 2 && 2 * p + h < m1; ++h)
      for (int r = 0; r < 16; ++r)
        acc[(2 * p + h) * 16 + r] = half[(r & 3) >> 1][4 * (r >> 2) + 2 * (r & 1) + h];
  }
}

void packed16_q4_0(const uint8_t* group, int64_t nb, const Q8Activations& act, int64_t m0,
                   int64_t m1, float* acc) {
  // Pairs where the activations were laid out for them (see matmul_many).
  if (m0 == 0 && m1 >= 6 && m1 <= kMaxRegisterRows && !act.pair_blocks.empty()) {
    static_assert(kMaxRegisterRows == 8);
    return m1 <= 6 ? packed16_pairs<3>(group, nb, act, m1, acc)
                   : packed16_pairs<4>(group, nb, act, m1, acc);
  }
  switch (m1 - m0) {
    case 1:
      return packed16<1>(group, nb, act, m0, m1, acc);
    case 2:
      return packed16<2>(group, nb, act, m0, m1, acc);
    case 3:
      return packed16<3>(group, nb, act, m0, m1, acc);
    case 4:
      return packed16<4>(group, nb, act, m0, m1, acc);
    case 5:
      return packed16<5>(group, nb, act, m0, m1, acc);
    case 6:
      return packed16<6>(group, nb, act, m0, m1, acc);
    case 7:
      return packed16<7>(group, nb, act, m0, m1, acc);
    case 8:
      return packed16<8>(group, nb, act, m0, m1, acc);
    default:
      return packed16<0>(group, nb, act, m0, m1, acc);
  }
}

// Two groups at once, for large batches: each broadcast activation dword
// feeds both (as tile32 of matmul_avx512.cpp).
void packed32_q4_0(const uint8_t* group0, const uint8_t* group1, int64_t nb,
                   const Q8Activations& activations, int64_t m0, int64_t m1, float* acc) {
  const ActView act(activations);
  const repack::Group g0{group0, nb}, g1{group1, nb};
  for (int64_t m = m0; m < m1; ++m) {
    _mm512_storeu_ps(acc + (m - m0) * 32, _mm512_setzero_ps());
    _mm512_storeu_ps(acc + (m - m0) * 32 + 16, _mm512_setzero_ps());
  }
  for (int64_t b = 0; b < nb; ++b) {
    prefetch_packed_block(g0, b);
    prefetch_packed_block(g1, b);
    const Q4Block16 k0 = load_q4_packed(g0, b), k1 = load_q4_packed(g1, b);
    for (int64_t m = m0; m < m1; ++m) {
      const int64_t i = m * nb + b;
      const int8_t* xq = act.blocks[i].qs;
      const __m512i start = _mm512_set1_epi32(act.minus_sums8[i]);
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
}

}  // namespace

PackedKernels avx512_packed_kernels() {
  return {&packed16_q4_0, &packed32_q4_0};
}

}  // namespace parspec::q8tiles
