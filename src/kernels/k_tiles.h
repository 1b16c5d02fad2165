#pragma once
// The Q4_K and Q6_K tile kernels for CPUs with a u8 × s8 dot-product
// instruction (vpdpbusd): written once over a vector width V and compiled per
// ISA in its own translation unit, like q8_tiles.h: 8 weight rows in 256-bit
// registers with AVX-VNNI (kquants_vnni.cpp) or AVX-512 VL (a leftover tile in
// kquants_avx512.cpp), 16 rows in 512-bit registers with AVX-512
// (kquants_avx512.cpp). matmul.cpp keeps its AVX2 kernels (maddubs/madd).
//
// Lane r of every vector is weight row r of the tile. Per (row, activation
// row, super-block) the kernels compute the same exact int32 sums as the AVX2
// tiles and dot_q4_K_q8_K_ref / dot_q6_K_q8_K_ref (only the order of exact
// integer additions differs), then combine them in f32 with the same
// operations in the same order (see q4_K_rows / q6_K_rows), so every ISA gives
// bit-identical results and a row's result never depends on M or the tile.
//
// Everything here has internal linkage: each translation unit keeps its own
// copy, compiled with its own instruction set.
#include <immintrin.h>

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <type_traits>
#include <utility>
#include <vector>

#include "kernels/q8_tiles.h"
#include "kernels/quant.h"

namespace parspec::ktiles {

// Activation rows quantized to Q8_K.
struct K8Activations {
  int64_t blocks_per_row = 0;
  std::vector<BlockQ8_K> blocks;   // rows × blocks_per_row
  std::vector<int32_t> min_pairs;  // per block 4 dwords: int16 pairs of 32-element sums (Q4_K mins)
};

// L weight rows (row pointers; rows past the end repeat a valid row) against
// activation rows [m0, m1): out[(m - m0) * L + r] = result for row r.
using KTile8 = void (*)(const uint8_t* const rows[8], size_t row_stride, int64_t nb,
                        const K8Activations& act, int64_t m0, int64_t m1, float* out);
using KTile16 = void (*)(const uint8_t* const rows[16], size_t row_stride, int64_t nb,
                         const K8Activations& act, int64_t m0, int64_t m1, float* out);

// A group of 16 Q4_K or Q6_K rows repacked at load (repack::KGroup,
// repack::K6Group) against activation rows [m0, m1): out[(m - m0) * 16 + r].
using KPacked = void (*)(const uint8_t* group, int64_t nb, const K8Activations& act, int64_t m0,
                         int64_t m1, float* out);

struct KTileKernels {
  KTile8 q4_K = nullptr;  // null: the AVX2 kernels of matmul.cpp
  KTile8 q6_K = nullptr;
  KTile16 q4_K_16 = nullptr;  // null: no 16-row kernels, tiles go one by one
  KTile16 q6_K_16 = nullptr;
  KPacked q4_K_packed = nullptr;  // every ISA has these two
  KPacked q6_K_packed = nullptr;
};

// The AVX2 build of the repacked kernels (kquants_avx2.cpp; q4_K_packed and
// q6_K_packed only).
KTileKernels avx2_k_tile_kernels();
// The AVX-VNNI build (kquants_vnni.cpp); call only where the CPU has AVX-VNNI.
KTileKernels vnni_k_tile_kernels();
// The AVX-512 F/BW/VL/VNNI build (kquants_avx512.cpp); only where the CPU has those.
KTileKernels avx512_k_tile_kernels();

// ------------------------------------------------------------ 256-bit ops ----
//
// V supplies, for its vector width (kRows lanes of 32 bits):
//   I, F: integer and float vectors; zero(), set1(), bcast(p) (the dword at p
//   in every lane), add/sub/mullo/madd16/dpbusd (acc + Σ of four u8 × s8
//   products per lane), and/or/srli16/slli16/srli32/slli32/srai32, cvt (int32
//   to f32), mul/fmadd/fmsub, loadf/storef;
//   transpose16(rows, at, out[4]): out[d] lane r = dword d of the 16 bytes at
//   rows[r] + at; f16_low/f16_high: f32 of the f16 in the low/high half of each
//   lane; f16_rows(rows, at): f32 of the f16 at rows[r] + at; load_lanes(p):
//   the kRows dwords at p; f16_lanes(p): f32 of the kRows f16 at p; (16 lanes
//   only) load_split(lo, hi): 8 dwords from each;
// Dpbusd is the 256-bit vpdpbusd of the translation unit (VEX or EVEX encoded).
template <class Dpbusd>
struct Vec256 {
  static constexpr int kRows = 8;
  // At most this many activation rows per pass: their int32 sums, the block's
  // 8 weight vectors and the constants fit the 16 ymm registers (or nearly).
  static constexpr int kMaxM = 4;
  using I = __m256i;
  using F = __m256;
  static I zero() { return _mm256_setzero_si256(); }
  static F zerof() { return _mm256_setzero_ps(); }
  static I set1(int32_t v) { return _mm256_set1_epi32(v); }
  static I set1_8(char v) { return _mm256_set1_epi8(v); }
  static F set1f(float v) { return _mm256_set1_ps(v); }
  static I bcast(const int8_t* p) { return q8tiles::broadcast_i32(p); }
  static I add(I a, I b) { return _mm256_add_epi32(a, b); }
  static I sub(I a, I b) { return _mm256_sub_epi32(a, b); }
  static I mullo(I a, I b) { return _mm256_mullo_epi32(a, b); }
  static I madd16(I a, I b) { return _mm256_madd_epi16(a, b); }
  static I dpbusd(I acc, I u, I s) { return Dpbusd::dot(acc, u, s); }
  static I and_(I a, I b) { return _mm256_and_si256(a, b); }
  static I or_(I a, I b) { return _mm256_or_si256(a, b); }
  static I srli16(I a, int n) { return _mm256_srli_epi16(a, n); }
  static I slli16(I a, int n) { return _mm256_slli_epi16(a, n); }
  static I srli32(I a, int n) { return _mm256_srli_epi32(a, n); }
  static I slli32(I a, int n) { return _mm256_slli_epi32(a, n); }
  static I srai32(I a, int n) { return _mm256_srai_epi32(a, n); }
  static I srai16(I a, int n) { return _mm256_srai_epi16(a, n); }
  static F cvt(I a) { return _mm256_cvtepi32_ps(a); }
  static F addf(F a, F b) { return _mm256_add_ps(a, b); }
  static F mul(F a, F b) { return _mm256_mul_ps(a, b); }
  static F fmadd(F a, F b, F c) { return _mm256_fmadd_ps(a, b, c); }
  static F fmsub(F a, F b, F c) { return _mm256_fmsub_ps(a, b, c); }
  static F loadf(const float* p) { return _mm256_loadu_ps(p); }
  static void storef(float* p, F v) { _mm256_storeu_ps(p, v); }
  static I load_lanes(const uint8_t* p) {
    return _mm256_loadu_si256(reinterpret_cast<const __m256i*>(p));
  }
  PARSPEC_KERNEL_INLINE static void transpose16(const uint8_t* const rows[kRows], int64_t at,
                                                I out[4]) {
    I pairs[4];
    for (int r = 0; r < 4; ++r) pairs[r] = q8tiles::load_row_pair(rows[r] + at, rows[r + 4] + at);
    q8tiles::transpose_8x4(pairs, out);
  }
  static F f16_low(I v) {
    const I mask = _mm256_set1_epi32(0xffff);
    const I low = _mm256_and_si256(v, mask);
    return _mm256_cvtph_ps(
        _mm_packus_epi32(_mm256_castsi256_si128(low), _mm256_extracti128_si256(low, 1)));
  }
  static F f16_high(I v) { return f16_low(_mm256_srli_epi32(v, 16)); }
  static F f16_rows(const uint8_t* const rows[kRows], int64_t at) {
    return q8tiles::load_row_scales(rows, at);
  }
  static F f16_lanes(const uint8_t* p) {
    return _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p)));
  }
};

// ------------------------------------------------------------- kernels ----

// Where q4_K_rows and q6_K_rows read their weights: load4(b, at, out) puts
// dword k of the 16 bytes at byte `at` of block b into out[k] (lane = row);
// prefetch(b) is called once per block before its loads; for q6_K_rows, d(b,
// at) is the f32 of the f16 at byte `at` of block b (the block's d).
//
// Row-major rows of Block: a transpose in registers per 16 bytes.
template <class V, class Block>
struct RowMajorSource {
  const uint8_t* const* rows;
  size_t row_stride;
  int64_t nb;
  PARSPEC_KERNEL_INLINE void load4(int64_t b, int64_t at, typename V::I out[4]) const {
    V::transpose16(rows, b * static_cast<int64_t>(sizeof(Block)) + at, out);
  }
  PARSPEC_KERNEL_INLINE typename V::F d(int64_t b, int64_t at) const {
    return V::f16_rows(rows, b * static_cast<int64_t>(sizeof(Block)) + at);
  }
  PARSPEC_KERNEL_INLINE void prefetch(int64_t b) const;
};

// Bytes ahead of the block in use that a repacked Q4_K group's stream is
// prefetched: Q4_0's distance (q8_tiles.h), measured there.
constexpr int64_t kPackedKPrefetchBytes = 8192;

// A repacked group (repack::KGroup): the dwords are the lanes already, one
// load per line; 8-lane vectors take half `half` of each line (rows 8·half..).
template <class V>
struct PackedSource {
  repack::KGroup group;
  int half;
  PARSPEC_KERNEL_INLINE typename V::I load_line(int64_t i) const {
    if (i == 0 && group.lead() != 0) {
      if constexpr (V::kRows == 16)
        return V::load_split(group.dword(0, 0), group.dword(0, 8));
      else
        return V::load_lanes(group.dword(0, 8 * half));
    }
    return V::load_lanes(group.line(i) + 4 * V::kRows * half);
  }
  PARSPEC_KERNEL_INLINE void load4(int64_t b, int64_t at, typename V::I out[4]) const {
    const int64_t i = b * repack::KGroup::kLinesPerBlock + at / 4;
    for (int k = 0; k < 4; ++k) out[k] = load_line(i + k);
  }
  PARSPEC_KERNEL_INLINE void prefetch(int64_t b) const {
    const uint8_t* at = group.line(b * repack::KGroup::kLinesPerBlock) + kPackedKPrefetchBytes;
    for (int64_t l = 0; l < repack::KGroup::kLinesPerBlock; ++l)
      _mm_prefetch(reinterpret_cast<const char*>(at + 64 * l), _MM_HINT_T0);
  }
};

// A repacked Q6_K group (repack::K6Group): one load per line, as PackedSource.
template <class V>
struct PackedQ6Source {
  repack::K6Group group;
  int half;
  PARSPEC_KERNEL_INLINE void load4(int64_t b, int64_t at, typename V::I out[4]) const {
    const uint8_t* first = group.line(b, at / 4) + 4 * V::kRows * half;
    for (int k = 0; k < 4; ++k) out[k] = V::load_lanes(first + 64 * k);
  }
  PARSPEC_KERNEL_INLINE typename V::F d(int64_t b, int64_t) const {
    return V::f16_lanes(group.d(b) + 2 * V::kRows * half);
  }
  PARSPEC_KERNEL_INLINE void prefetch(int64_t b) const {
    const uint8_t* at = group.block(b) + kPackedKPrefetchBytes;
    for (int64_t l = 0; l <= repack::K6Group::kLinesPerBlock; ++l)
      _mm_prefetch(reinterpret_cast<const char*>(at + 64 * l), _MM_HINT_T0);
  }
};

// Prefetches the block `distance` blocks ahead in each row of the tile, past
// the rows' end the first blocks of the next tile (kRows rows on): one stream
// a fixed distance ahead. Q4_K uses distance nb (the same block of the next
// tile, as the AVX2 tiles do); Q6_K, whose 16-row tiles are 27 KiB at n = 2048,
// streamed at 10-16 GB/s that way (a whole tile ahead pulled into L1) and at
// 19-21 GB/s 4 blocks ahead (build/kernel_throughput 2048 49152 q6_K).
template <class V>
PARSPEC_KERNEL_INLINE void prefetch_ahead(const uint8_t* const rows[V::kRows], size_t row_stride,
                                          int64_t nb, int64_t b, int64_t bytes, int64_t distance) {
  const int64_t ahead = b + distance;
  const size_t offset = ahead < nb
                            ? static_cast<size_t>(ahead * bytes)
                            : V::kRows * row_stride + static_cast<size_t>((ahead - nb) * bytes);
  for (int r = 0; r < V::kRows; ++r)
    for (int64_t line = 0; line < bytes; line += 64)
      _mm_prefetch(reinterpret_cast<const char*>(rows[r] + offset + line), _MM_HINT_T0);
}

// Q4_K row-major tiles prefetch the same block of the next tile (distance
// nb), Q6_K ones 4 blocks ahead (see prefetch_ahead).
template <class V, class Block>
PARSPEC_KERNEL_INLINE void RowMajorSource<V, Block>::prefetch(int64_t b) const {
  prefetch_ahead<V>(rows, row_stride, nb, b, sizeof(Block),
                    std::is_same_v<Block, BlockQ6_K> ? 4 : nb);
}

// From int16 lanes even = (b0, b2) and odd = (b1, b3) of each dword: the
// pairs (b0, b1) and (b2, b3).
template <class V>
inline void word_pairs(typename V::I even, typename V::I odd, typename V::I out[2]) {
  const typename V::I low_word = V::set1(0xffff);
  out[0] = V::or_(V::and_(even, low_word), V::slli32(odd, 16));
  out[1] = V::or_(V::srli32(even, 16), V::and_(odd, V::set1(static_cast<int32_t>(0xffff0000u))));
}

// Q4_K: per row and block, sum_qx = Σ_j sc_j·Σ q·x and sum_min = Σ_j mn_j·Σ x
// over the 8 sub-blocks of 32 (exact int32), then
//   total = total + fmsub(xd·d, f32(sum_qx), (xd·dmin)·f32(sum_min))
// in block order (total starts at 0): the AVX2 tile's and the scalar
// reference's expression. MR activation rows at once, their sums in registers:
// out[j * ldo + r] for activation row m0 + j.
template <class V, int MR, class Source>
void q4_K_rows(const Source& src, int64_t nb, const K8Activations& act, int64_t m0, float* out,
               int64_t ldo) {
  using I = typename V::I;
  using F = typename V::F;
  const I low4 = V::set1_8(0x0f);
  const I low6 = V::set1_8(0x3f);
  const I low2 = V::set1_8(0x03);
  F total[MR];
  for (int j = 0; j < MR; ++j) total[j] = V::zerof();
  for (int64_t b = 0; b < nb; ++b) {
    src.prefetch(b);
    // Header dwords: h[0] = d | dmin << 16, h[1..3] = the 12 packed scale bytes.
    I h[4];
    src.load4(b, 0, h);
    // The unpacking of kquants.cpp on whole dwords (4 sub-blocks per dword):
    // scales 0-3 = h1 & 63, 4-7 = (h3 & 15) | (h1 >> 6) << 4; mins likewise
    // from h2 and h3 >> 4. Byte k of sc_bytes[i] is the scale of sub-block 4i + k.
    const I sc_bytes[2] = {
        V::and_(h[1], low6),
        V::or_(V::and_(h[3], low4), V::slli16(V::and_(V::srli16(h[1], 6), low2), 4))};

    I isum[MR];
    for (int j = 0; j < MR; ++j) isum[j] = V::zero();
    for (int g = 0; g < 4; ++g) {
      // Group g: 32 bytes per row; low nibbles are sub-block 2g, high nibbles 2g + 1.
      I packed[8];
      src.load4(b, 16 + 32 * g, packed);
      src.load4(b, 32 + 32 * g, packed + 4);
      for (int half = 0; half < 2; ++half) {
        const int sub = 2 * g + half;
        const I scale = V::and_(V::srli32(sc_bytes[sub / 4], 8 * (sub % 4)), V::set1(0xff));
        I s[MR];
        for (int j = 0; j < MR; ++j) s[j] = V::zero();
        for (int d = 0; d < 8; ++d) {
          const I w = V::and_(half == 0 ? packed[d] : V::srli16(packed[d], 4), low4);
          for (int j = 0; j < MR; ++j) {
            const int8_t* xq = act.blocks[(m0 + j) * nb + b].qs + 64 * g + 32 * half + 4 * d;
            s[j] = V::dpbusd(s[j], w, V::bcast(xq));
          }
        }
        for (int j = 0; j < MR; ++j) isum[j] = V::add(isum[j], V::mullo(s[j], scale));
      }
    }
    const I mn_bytes[2] = {
        V::and_(h[2], low6),
        V::or_(V::and_(V::srli16(h[3], 4), low4), V::slli16(V::and_(V::srli16(h[2], 6), low2), 4))};
    // Min pairs (min 2i, min 2i + 1) as int16 per lane, for madd with the activations' pairs.
    I min_pairs[4];
    for (int i = 0; i < 2; ++i) {
      const I even = V::and_(mn_bytes[i], V::set1(0x00ff00ff));  // bytes 0, 2 as int16
      const I odd = V::srli16(mn_bytes[i], 8);                   // bytes 1, 3
      word_pairs<V>(even, odd, min_pairs + 2 * i);
    }
    const F wd = V::f16_low(h[0]);
    const F wdmin = V::f16_high(h[0]);
    for (int j = 0; j < MR; ++j) {
      const int64_t i = (m0 + j) * nb + b;
      const int32_t* pairs = act.min_pairs.data() + i * 4;
      I sum_min = V::madd16(min_pairs[0], V::set1(pairs[0]));
      for (int k = 1; k < 4; ++k)
        sum_min = V::add(sum_min, V::madd16(min_pairs[k], V::set1(pairs[k])));
      const F xd = V::set1f(act.blocks[i].d);
      const F d = V::mul(xd, wd);
      const F dmin = V::mul(xd, wdmin);
      const F value = V::fmsub(d, V::cvt(isum[j]), V::mul(dmin, V::cvt(sum_min)));
      total[j] = V::addf(total[j], value);
    }
  }
  for (int j = 0; j < MR; ++j) V::storef(out + j * ldo, total[j]);
}

// Q6_K: per row and block, sum_qx = Σ_k sc_k·Σ q·x − 32·Σ_k sc_k·bsums_k over
// the 16 sub-blocks of 16 (q = 0..63 unbiased; exact int32), then
//   total = fma(xd·d, f32(sum_qx), total)
// in block order: the AVX2 tile's and the scalar reference's expression.
template <class V, int MR, class Source>
void q6_K_rows(const Source& src, int64_t nb, const K8Activations& act, int64_t m0, float* out,
               int64_t ldo) {
  using I = typename V::I;
  using F = typename V::F;
  const I low4 = V::set1_8(0x0f);
  const I bits45 = V::set1_8(0x30);
  F total[MR];
  for (int j = 0; j < MR; ++j) total[j] = V::zerof();
  for (int64_t b = 0; b < nb; ++b) {
    src.prefetch(b);
    // The 16 int8 scales: byte k of sc4[i] is the scale of sub-block 4i + k.
    I sc4[4];
    src.load4(b, 192, sc4);
    I isum[MR];
    for (int j = 0; j < MR; ++j) isum[j] = V::zero();
    for (int h = 0; h < 2; ++h) {
      for (int e = 0; e < 2; ++e) {
        // Values l = 16e..16e+15 of each quarter T of half h (elements
        // 128h + 32T + l, sub-block 8h + 2T + e): low nibbles of ql[l] (T = 0, 2:
        // low/high nibble) or ql[l + 32] (T = 1, 3), top bits 2T..2T+1 of qh[l].
        I ql0[4], ql1[4], qh[4];
        src.load4(b, 64 * h + 16 * e, ql0);
        src.load4(b, 64 * h + 32 + 16 * e, ql1);
        src.load4(b, 128 + 32 * h + 16 * e, qh);
        for (int t = 0; t < 4; ++t) {
          const int k = 8 * h + 2 * t + e;
          const I scale = V::srai32(V::slli32(sc4[k / 4], 24 - 8 * (k % 4)), 24);
          I s[MR];
          for (int j = 0; j < MR; ++j) s[j] = V::zero();
          for (int d = 0; d < 4; ++d) {
            const I ql = (t & 1) ? ql1[d] : ql0[d];
            const I low = V::and_(t < 2 ? ql : V::srli16(ql, 4), low4);
            const I high = t == 0   ? V::slli16(qh[d], 4)
                           : t == 1 ? V::slli16(qh[d], 2)
                           : t == 2 ? qh[d]
                                    : V::srli16(qh[d], 2);
            const I w = V::or_(low, V::and_(high, bits45));
            for (int j = 0; j < MR; ++j) {
              const int8_t* xq =
                  act.blocks[(m0 + j) * nb + b].qs + 128 * h + 32 * t + 16 * e + 4 * d;
              s[j] = V::dpbusd(s[j], w, V::bcast(xq));
            }
          }
          for (int j = 0; j < MR; ++j) isum[j] = V::add(isum[j], V::mullo(s[j], scale));
        }
      }
    }
    // Scale pairs (2p, 2p + 1) as int16 per lane, for madd with the bsums' pairs.
    I sc_pairs[8];
    for (int i = 0; i < 4; ++i) {
      const I even = V::srai16(V::slli16(sc4[i], 8), 8);  // bytes 0, 2 as int16
      const I odd = V::srai16(sc4[i], 8);                 // bytes 1, 3
      word_pairs<V>(even, odd, sc_pairs + 2 * i);
    }
    const F wd = src.d(b, 208);
    for (int j = 0; j < MR; ++j) {
      const BlockQ8_K& xb = act.blocks[(m0 + j) * nb + b];
      int32_t bsum_pairs[8];
      std::memcpy(bsum_pairs, xb.bsums, sizeof(bsum_pairs));
      I bias = V::madd16(sc_pairs[0], V::set1(bsum_pairs[0]));
      for (int p = 1; p < 8; ++p)
        bias = V::add(bias, V::madd16(sc_pairs[p], V::set1(bsum_pairs[p])));
      const I sum_qx = V::sub(isum[j], V::slli32(bias, 5));
      const F d = V::mul(V::set1f(xb.d), wd);
      total[j] = V::fmadd(d, V::cvt(sum_qx), total[j]);
    }
  }
  for (int j = 0; j < MR; ++j) V::storef(out + j * ldo, total[j]);
}

// Activation rows [m0, m1) in passes of at most MaxM: rows(mr, m, o) takes
// rows m.. m + mr - 1 (mr an integral_constant), their results at o =
// out + (m - m0) * ldo.
template <int MaxM, class Rows>
void in_passes(int64_t m0, int64_t m1, float* out, int64_t ldo, const Rows& rows) {
  for (int64_t m = m0; m < m1; m += MaxM) {
    const int64_t n = std::min<int64_t>(MaxM, m1 - m);
    float* o = out + (m - m0) * ldo;
    [&]<int... R>(std::integer_sequence<int, R...>) {
      ((n == R + 1 ? (rows(std::integral_constant<int, R + 1>{}, m, o), true) : false) || ...);
    }
    (std::make_integer_sequence<int, MaxM>{});
  }
}

// Any number of activation rows, V::kMaxM per pass over the weights:
// out[(m - m0) * ldo + r].
template <class V, class Source>
void q4_K_passes(const Source& src, int64_t nb, const K8Activations& act, int64_t m0, int64_t m1,
                 float* out, int64_t ldo) {
  in_passes<V::kMaxM>(m0, m1, out, ldo, [&](auto mr, int64_t m, float* o) {
    q4_K_rows<V, decltype(mr)::value>(src, nb, act, m, o, ldo);
  });
}

// A row-major tile: out[(m - m0) * kRows + r].
template <class V>
void tile_q4_K(const uint8_t* const rows[V::kRows], size_t row_stride, int64_t nb,
               const K8Activations& act, int64_t m0, int64_t m1, float* out) {
  q4_K_passes<V>(RowMajorSource<V, BlockQ4_K>{rows, row_stride, nb}, nb, act, m0, m1, out,
                 V::kRows);
}

// A repacked group of 16 rows (repack::KGroup): out[(m - m0) * 16 + r]; 8-lane
// vectors take its two halves one after the other.
template <class V>
void packed_q4_K(const uint8_t* group, int64_t nb, const K8Activations& act, int64_t m0, int64_t m1,
                 float* out) {
  for (int half = 0; half < repack::kGroupRows / V::kRows; ++half)
    q4_K_passes<V>(PackedSource<V>{repack::KGroup{group, nb}, half}, nb, act, m0, m1,
                   out + half * V::kRows, repack::kGroupRows);
}

// Q6_K: 4 activation rows per pass, as the row-major tiles always took them
// (8 rows' sums and dot chains beside a block's 12 weight and 4 scale vectors
// would not fit even 32 registers): out[(m - m0) * ldo + r].
template <class V, class Source>
void q6_K_passes(const Source& src, int64_t nb, const K8Activations& act, int64_t m0, int64_t m1,
                 float* out, int64_t ldo) {
  in_passes<4>(m0, m1, out, ldo, [&](auto mr, int64_t m, float* o) {
    q6_K_rows<V, decltype(mr)::value>(src, nb, act, m, o, ldo);
  });
}

template <class V>
void tile_q6_K(const uint8_t* const rows[V::kRows], size_t row_stride, int64_t nb,
               const K8Activations& act, int64_t m0, int64_t m1, float* out) {
  q6_K_passes<V>(RowMajorSource<V, BlockQ6_K>{rows, row_stride, nb}, nb, act, m0, m1, out,
                 V::kRows);
}

// A repacked group of 16 Q6_K rows (repack::K6Group), as packed_q4_K.
template <class V>
void packed_q6_K(const uint8_t* group, int64_t nb, const K8Activations& act, int64_t m0, int64_t m1,
                 float* out) {
  for (int half = 0; half < repack::kGroupRows / V::kRows; ++half)
    q6_K_passes<V>(PackedQ6Source<V>{repack::K6Group{group, nb}, half}, nb, act, m0, m1,
                   out + half * V::kRows, repack::kGroupRows);
}

}  // namespace parspec::ktiles
