// The repacked Q4_0/Q8_0 tile kernels (kernels/repack.h) built for AVX-512
// F/BW/VL/VNNI, in a translation unit of their own (see q8_tiles_avx512.h).
// Per lane the operations of the row-major tiles of matmul_avx512.cpp, in the
// same order, so results are bit-identical to every other path.
// GCC 12 warns about its own AVX-512 intrinsics here (see matmul_avx512.cpp).
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#pragma GCC diagnostic ignored "-Wuninitialized"
#include "kernels/isa.h"
#include "kernels/q8_tiles_avx512.h"

namespace parspec::q8tiles {
namespace {

// Block b of a repacked group: the quant vectors are the lanes already, the
// 16 scales contiguous.
PARSPEC_KERNEL_INLINE __m512 load_packed_scales16(const repack::Group& group, int64_t b) {
  return _mm512_cvtph_ps(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(group.scales(b))));
}

PARSPEC_KERNEL_INLINE Q4Block16 load_q4_packed(const repack::Group& group, int64_t b) {
  const __m512i low_mask = _mm512_set1_epi8(0x0f);
  const uint8_t* quants = group.quants(b);
  Q4Block16 k;
  for (int d = 0; d < 4; ++d) {
    const __m512i packed = _mm512_loadu_si512(quants + 64 * d);
    k.lo[d] = _mm512_and_si512(packed, low_mask);
    k.hi[d] = _mm512_and_si512(_mm512_srli_epi16(packed, 4), low_mask);
  }
  k.dw = load_packed_scales16(group, b);
  return k;
}

PARSPEC_KERNEL_INLINE Q8Block16 load_q8_packed(const repack::Group& group, int64_t b) {
  const __m512i bias = _mm512_set1_epi8(static_cast<char>(0x80));
  const uint8_t* quants = group.quants(b);
  Q8Block16 k;
  for (int g = 0; g < 8; ++g) k.w[g] = _mm512_xor_si512(_mm512_loadu_si512(quants + 64 * g), bias);
  k.dw = load_packed_scales16(group, b);
  return k;
}

// A type's block and loader, and its bytes of quants per block in a group.
struct PackedQ4 {
  using Block = Q4Block16;
  static constexpr int64_t kQuantBytes = repack::quant_bytes(DType::Q4_0);
  PARSPEC_KERNEL_INLINE static Block load(const repack::Group& g, int64_t b) {
    return load_q4_packed(g, b);
  }
  // Where a block's integer sum starts, from −8·Σ x: Σ (q − 8)·x = Σ q·x − 8·Σ x.
  PARSPEC_KERNEL_INLINE static __m512i pair_start(__m512i minus_sums8) { return minus_sums8; }
};
struct PackedQ8 {
  using Block = Q8Block16;
  static constexpr int64_t kQuantBytes = repack::quant_bytes(DType::Q8_0);
  PARSPEC_KERNEL_INLINE static Block load(const repack::Group& g, int64_t b) {
    return load_q8_packed(g, b);
  }
  // −128·Σ x = 16 · (−8·Σ x): Σ (w + 128)·x − 128·Σ x = Σ w·x.
  PARSPEC_KERNEL_INLINE static __m512i pair_start(__m512i minus_sums8) {
    return _mm512_slli_epi32(minus_sums8, 4);
  }
};

// One group of 16 rows, one sequential stream. MR > 0: exactly MR activation
// rows (up to 8: a verification chain), accumulated in registers; MR = 0: any
// number, accumulated in acc. As tile16 of matmul_avx512.cpp, without the
// transposition; its loop is written out here again on purpose: sharing it
// through one accumulator helper made GCC emit slower code for both (6-12%
// at M = 2-8 in kernel_throughput).
template <class Type, int MR, _mm_hint Hint = _MM_HINT_T0>
void packed16(const uint8_t* group, int64_t nb, const Q8Activations& activations, int64_t m0,
              int64_t m1, float* acc) {
  const ActView act(activations);
  const repack::Group g{group, nb, Type::kQuantBytes};
  __m512 regs[MR > 0 ? MR : 1];
  for (int j = 0; j < MR; ++j) regs[j] = _mm512_setzero_ps();
  if (MR == 0)
    for (int64_t m = m0; m < m1; ++m) _mm512_storeu_ps(acc + (m - m0) * 16, _mm512_setzero_ps());
  for (int64_t b = 0; b < nb; ++b) {
    prefetch_packed_block<Hint>(g, b);
    const typename Type::Block k = Type::load(g, b);
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

// packed16 with the register count of m1 - m0 rows (any count: MR = 0).
template <class Type>
void packed16_any(const uint8_t* group, int64_t nb, const Q8Activations& act, int64_t m0,
                  int64_t m1, float* acc) {
  if (m1 - m0 == 1 && decode_prefetch_nta()) {
    packed16<Type, 1, _MM_HINT_NTA>(group, nb, act, m0, m1, acc);
    return;
  }
  const bool in_registers = with_register_rows(
      m1 - m0, [&](auto mr) { packed16<Type, decltype(mr)::value>(group, nb, act, m0, m1, acc); });
  if (!in_registers) packed16<Type, 0>(group, nb, act, m0, m1, acc);
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
template <class Type, int NP>
void packed16_pairs(const uint8_t* group, int64_t nb, const Q8Activations& act, int64_t m1,
                    float* acc) {
  const repack::Group g{group, nb, Type::kQuantBytes};
  const int8_t* xq = act.pair_blocks.data();
  const float* xs = act.pair_scales.data();
  const int32_t* xm = act.pair_minus_sums8.data();
  __m512 regs[NP][2];
  for (int p = 0; p < NP; ++p) regs[p][0] = regs[p][1] = _mm512_setzero_ps();
  for (int64_t b = 0; b < nb; ++b) {
    prefetch_packed_block(g, b);
    const typename Type::Block k = Type::load(g, b);
    __m512i w[2][8];
    for (int d = 0; d < 8; ++d) {
      w[0][d] = _mm512_unpacklo_epi32(k.part(d), k.part(d));
      w[1][d] = _mm512_unpackhi_epi32(k.part(d), k.part(d));
    }
    const __m512 dw0 = _mm512_unpacklo_ps(k.dw, k.dw), dw1 = _mm512_unpackhi_ps(k.dw, k.dw);
    for (int p = 0; p < NP; ++p) {
      const int64_t i = p * nb + b;
      __m512i s0 = Type::pair_start(broadcast_pair(xm + 2 * i)), s1 = s0;
      // Two chains per half: one chain of eight waited on vpdpbusd's latency.
      __m512i t0 = _mm512_setzero_si512(), t1 = t0;
      for (int d = 0; d < 8; d += 2) {
        const __m512i x = broadcast_pair(xq + 64 * i + 8 * d);
        const __m512i y = broadcast_pair(xq + 64 * i + 8 * d + 8);
        s0 = _mm512_dpbusd_epi32(s0, w[0][d], x);
        s1 = _mm512_dpbusd_epi32(s1, w[1][d], x);
        t0 = _mm512_dpbusd_epi32(t0, w[0][d + 1], y);
        t1 = _mm512_dpbusd_epi32(t1, w[1][d + 1], y);
      }
      s0 = _mm512_add_epi32(s0, t0);
      s1 = _mm512_add_epi32(s1, t1);
      const __m512 dx = _mm512_castsi512_ps(broadcast_pair(xs + 2 * i));
      regs[p][0] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(s0), _mm512_mul_ps(dw0, dx), regs[p][0]);
      regs[p][1] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(s1), _mm512_mul_ps(dw1, dx), regs[p][1]);
    }
  }
  // Row r of pair row h: lane 4(r >> 2) + 2(r & 1) + h of half (r & 3) >> 1
  // (index + 16 selects half 1 in vpermt2ps).
  const __m512i from_pairs[2] = {
      _mm512_setr_epi32(0, 2, 16, 18, 4, 6, 20, 22, 8, 10, 24, 26, 12, 14, 28, 30),
      _mm512_setr_epi32(1, 3, 17, 19, 5, 7, 21, 23, 9, 11, 25, 27, 13, 15, 29, 31)};
  for (int p = 0; p < NP; ++p)
    for (int h = 0; h < 2 && 2 * p + h < m1; ++h)
      _mm512_storeu_ps(acc + (2 * p + h) * 16,
                       _mm512_permutex2var_ps(regs[p][0], from_pairs[h], regs[p][1]));
}

// In pairs where the activations were laid out for them (see matmul_many),
// else one row at a time.
template <class Type>
void packed16_rows(const uint8_t* group, int64_t nb, const Q8Activations& act, int64_t m0,
                   int64_t m1, float* acc) {
  if (m0 == 0 && m1 >= kMinPairRows && m1 <= kMaxRegisterRows && !act.pair_blocks.empty()) {
    static_assert(kMinPairRows == 6 && kMaxRegisterRows == 8);
    return m1 <= 6 ? packed16_pairs<Type, 3>(group, nb, act, m1, acc)
                   : packed16_pairs<Type, 4>(group, nb, act, m1, acc);
  }
  packed16_any<Type>(group, nb, act, m0, m1, acc);
}

void packed16_q4_0(const uint8_t* group, int64_t nb, const Q8Activations& act, int64_t m0,
                   int64_t m1, float* acc) {
  packed16_rows<PackedQ4>(group, nb, act, m0, m1, acc);
}

void packed16_q8_0(const uint8_t* group, int64_t nb, const Q8Activations& act, int64_t m0,
                   int64_t m1, float* acc) {
  packed16_rows<PackedQ8>(group, nb, act, m0, m1, acc);
}

// Two groups at once, for large batches: each broadcast activation dword
// feeds both (as tile32 of matmul_avx512.cpp).
template <class Type>
void packed32(const uint8_t* group0, const uint8_t* group1, int64_t nb,
              const Q8Activations& activations, int64_t m0, int64_t m1, float* acc) {
  using Block = typename Type::Block;
  const ActView act(activations);
  const repack::Group g0{group0, nb, Type::kQuantBytes}, g1{group1, nb, Type::kQuantBytes};
  for (int64_t m = m0; m < m1; ++m) {
    _mm512_storeu_ps(acc + (m - m0) * 32, _mm512_setzero_ps());
    _mm512_storeu_ps(acc + (m - m0) * 32 + 16, _mm512_setzero_ps());
  }
  for (int64_t b = 0; b < nb; ++b) {
    prefetch_packed_block(g0, b);
    prefetch_packed_block(g1, b);
    const Block k0 = Type::load(g0, b), k1 = Type::load(g1, b);
    apply_block_pair(k0, k1, act, nb, b, m0, m1, acc);
  }
}

}  // namespace

PackedKernels avx512_packed_kernels() {
  PackedKernels k;
  k.q4_0 = &packed16_q4_0;
  k.q4_0_32 = &packed32<PackedQ4>;
  k.q8_0 = &packed16_q8_0;
  k.q8_0_32 = &packed32<PackedQ8>;
  return k;
}

}  // namespace parspec::q8tiles
