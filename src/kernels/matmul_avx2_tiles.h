#pragma once
// The AVX2 builds of the matmul tile kernels (numerics: matmul.cpp): the
// Q4_0/Q8_0 integer dot products for q8_tiles.h, the F32/F16/BF16 register
// blocks for float_tiles.h, and the 8-row Q4_K/Q6_K tiles. Internal to
// matmul.cpp, the one translation unit that includes it, so that the drivers
// (matmul_scheduling.h) inline these kernels.
#include <immintrin.h>

#include <algorithm>
#include <cstring>

#include "kernels/float_tiles.h"
#include "kernels/k_tiles.h"
#include "kernels/kquants.h"
#include "kernels/q8_tiles.h"

namespace parspec {

namespace {

using ktiles::K8Activations;
using q8tiles::broadcast_i32;
using q8tiles::kTileRows;
using q8tiles::load_row_pair;
using q8tiles::prefetch_next_tile;
using q8tiles::Q8Activations;
using q8tiles::transpose_8x4;

// ------------------------------------------------------- Q8_0/Q4_0 kernels ----

struct DotAvx2 {
  static constexpr bool kBiasedQ8 = false;
  static __m256i sum_q4(const __m256i lo[4], const __m256i hi[4], const int8_t* xq) {
    // q in 0..15: each int16 lane sums 8 pair products of ≤ 2·15·127, no overflow.
    __m256i p = _mm256_maddubs_epi16(lo[0], broadcast_i32(xq));
    p = _mm256_add_epi16(p, _mm256_maddubs_epi16(hi[0], broadcast_i32(xq + 16)));
    for (int d = 1; d < 4; ++d) {
      p = _mm256_add_epi16(p, _mm256_maddubs_epi16(lo[d], broadcast_i32(xq + 4 * d)));
      p = _mm256_add_epi16(p, _mm256_maddubs_epi16(hi[d], broadcast_i32(xq + 16 + 4 * d)));
    }
    return _mm256_madd_epi16(p, _mm256_set1_epi16(1));
  }
  static __m256i sum_q8(const __m256i magnitude[8], const __m256i w[8], const int8_t* xq) {
    // |w|·(x·sign(w)) = w·x; pair sums ≤ 2·128·127 fit int16 (x is never −128).
    const __m256i ones = _mm256_set1_epi16(1);
    __m256i s = _mm256_setzero_si256();
    for (int g = 0; g < 8; ++g) {
      const __m256i xs = _mm256_sign_epi8(broadcast_i32(xq + 4 * g), w[g]);
      s = _mm256_add_epi32(s, _mm256_madd_epi16(_mm256_maddubs_epi16(magnitude[g], xs), ones));
    }
    return s;
  }
};

constexpr q8tiles::TileKernels kAvx2Tiles{&q8tiles::tile_q4_0<DotAvx2>,
                                          &q8tiles::tile_q8_0<DotAvx2>};
constexpr q8tiles::PackedKernels kAvx2Packed{
    &q8tiles::packed_q4_0<DotAvx2>, nullptr,
    &q8tiles::packed_q8_0<DotAvx2>, nullptr,
    &q8tiles::tile_q4_0<DotAvx2>,   &q8tiles::tile_q8_0<DotAvx2>};

// ------------------------------------------------------ F32/F16/BF16 kernels ----

template <DType T>
inline __m256 load_weights8(const uint8_t* row, int64_t k) {
  if constexpr (T == DType::F32) {
    return _mm256_loadu_ps(reinterpret_cast<const float*>(row) + k);
  } else if constexpr (T == DType::F16) {
    return _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(row + 2 * k)));
  } else {
    const __m128i h = _mm_loadu_si128(reinterpret_cast<const __m128i*>(row + 2 * k));
    return _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_cvtepu16_epi32(h), 16));
  }
}

template <DType T>
inline float weight_at(const uint8_t* row, int64_t k) {
  if constexpr (T == DType::F32) {
    float v;
    std::memcpy(&v, row + 4 * k, sizeof(v));
    return v;
  } else {
    uint16_t h;
    std::memcpy(&h, row + 2 * k, sizeof(h));
    return T == DType::F16 ? fp16_to_fp32(h) : bf16_to_fp32(h);
  }
}

// 8-lane halves of the float contract's 16-lane accumulators (float_tiles.h)
// for R weight rows × C activation rows (x + c·ldx), continuing the fma chains
// in acc over weights 0..n of the rows: acc[i] holds the lanes k mod 16 in
// [h0 + 8 i, h0 + 8 i + 8), so H = 2 (h0 = 0) is the whole accumulator in one
// pass over k, H = 1 one half of it. The halves never meet before the final
// add, so a tile may run them as two passes: R × C accumulators live instead
// of 2 R × C, which lets 4 × 3 keep 12 fma chains, the 3 activation vectors
// and the converted weight vector in the 16 ymm registers. Prefetch: one
// prefetch per cache line of weights, 1 KiB ahead in each row, and (unless
// null) of the same line in the 4 rows ahead[].
template <DType T, int R, int C, int H, bool Prefetch = false>
inline void tile_float_lanes(const uint8_t* const rows[], const float* x, int64_t ldx, int64_t n,
                             int h0, __m256 (&acc)[H][R][C],
                             const uint8_t* const ahead[] = nullptr) {
  constexpr int64_t kBytes = T == DType::F32 ? 4 : 2;  // per weight
  const int64_t n16 = n & ~int64_t{15};
  for (int64_t k = h0; k < n16; k += 16) {
    if ((k - h0) % (64 / kBytes) == 0) {
      if (Prefetch) {
        for (int r = 0; r < R; ++r)
          _mm_prefetch(reinterpret_cast<const char*>(rows[r]) + kBytes * k + 1024, _MM_HINT_T0);
      }
      if (ahead != nullptr) {
        for (int r = 0; r < 4; ++r)
          _mm_prefetch(reinterpret_cast<const char*>(ahead[r]) + kBytes * k, _MM_HINT_T1);
      }
    }
    for (int i = 0; i < H; ++i) {
      __m256 xv[C];
      for (int c = 0; c < C; ++c) xv[c] = _mm256_loadu_ps(x + c * ldx + k + 8 * i);
      for (int r = 0; r < R; ++r) {
        const __m256 w = load_weights8<T>(rows[r], k + 8 * i);
        for (int c = 0; c < C; ++c) acc[i][r][c] = _mm256_fmadd_ps(w, xv[c], acc[i][r][c]);
      }
    }
  }
  // The ragged tail: these lanes of the one zero-padded 16-step (a half with
  // no element left is skipped: fma(0, 0, acc) == acc, as acc is never -0).
  for (int i = 0; i < H; ++i) {
    const int64_t k0 = n16 + h0 + 8 * i, k1 = std::min(n, k0 + 8);
    if (k0 >= k1) continue;
    alignas(32) float xt[C][8] = {};
    alignas(32) float wt[8] = {};
    for (int c = 0; c < C; ++c)
      for (int64_t k = k0; k < k1; ++k) xt[c][k - k0] = x[c * ldx + k];
    for (int r = 0; r < R; ++r) {
      for (int64_t k = k0; k < k1; ++k) wt[k - k0] = weight_at<T>(rows[r], k);
      const __m256 w = _mm256_load_ps(wt);
      for (int c = 0; c < C; ++c)
        acc[i][r][c] = _mm256_fmadd_ps(w, _mm256_load_ps(xt[c]), acc[i][r][c]);
    }
  }
}

// R weight rows × C activation rows (x: C × n), out[c * R + r]: both halves
// in one pass, then the contract's lanes 0-7 + lanes 8-15 and the one reduction.
template <DType T, int R, int C>
void tile_float(const uint8_t* const rows[], const float* x, int64_t n, float* out) {
  __m256 acc[2][R][C];
  for (int i = 0; i < 2; ++i)
    for (int r = 0; r < R; ++r)
      for (int c = 0; c < C; ++c) acc[i][r][c] = _mm256_setzero_ps();
  tile_float_lanes<T, R, C, 2>(rows, x, n, n, 0, acc);
  for (int c = 0; c < C; ++c)
    for (int r = 0; r < R; ++r)
      out[c * R + r] = float_tiles::reduce8(_mm256_add_ps(acc[0][r][c], acc[1][r][c]));
}

// The column_tile operations (float_tiles.h) on 256-bit registers: the
// halves of the contract's accumulators (tile_float_lanes), H = 1, one after
// the other, so that 4 × 3 blocks fit the 16 registers.
struct Ops256 {
  static constexpr bool kEightRows = false;
  static constexpr int kWidest = 3;

  template <DType T, int C, bool Prefetch>
  static void block(const uint8_t* const rows[], const uint8_t* const ahead[], int64_t n,
                    const float* x, int64_t ldx, float* acc) {
    constexpr int R = 4;  // weight rows
    for (int h0 = 0; h0 < 16; h0 += 8) {
      __m256 a[1][R][C];
      for (int r = 0; r < R; ++r)
        for (int c = 0; c < C; ++c)
          a[0][r][c] = _mm256_load_ps(acc + (r * float_tiles::kMaxColumns + c) * 16 + h0);
      if (h0 == 0) {  // the first half's pass prefetches for both
        tile_float_lanes<T, R, C, 1, Prefetch>(rows, x, ldx, n, h0, a, ahead);
      } else {
        tile_float_lanes<T, R, C, 1>(rows, x, ldx, n, h0, a);
      }
      for (int r = 0; r < R; ++r)
        for (int c = 0; c < C; ++c)
          _mm256_store_ps(acc + (r * float_tiles::kMaxColumns + c) * 16 + h0, a[0][r][c]);
    }
  }
};

// -------------------------------------------------------- Q4_K/Q6_K kernels ----
//
// Same scheme as Q4_0: lane r of every vector is weight row r of the tile;
// each (row, activation, super-block) yields exact int32 sums, combined in
// float per super-block with the same expressions as dot_q4_K_q8_K /
// dot_q6_K_q8_K (as GCC compiles them: see the fmsub/fma below).

using ktiles::K8Activations;
// In each dword lane, int16 pair (byte J0, byte J1) of that dword, zero-extended.
template <int J0, int J1>
inline __m256i spread_bytes(__m256i v) {
  const __m256i control = _mm256_setr_epi8(
      J0, -1, J1, -1, 4 + J0, -1, 4 + J1, -1, 8 + J0, -1, 8 + J1, -1, 12 + J0, -1, 12 + J1, -1, J0,
      -1, J1, -1, 4 + J0, -1, 4 + J1, -1, 8 + J0, -1, 8 + J1, -1, 12 + J0, -1, 12 + J1, -1);
  return _mm256_shuffle_epi8(v, control);
}

// Same, sign-extended int8 bytes.
template <int J0, int J1>
inline __m256i spread_signed_bytes(__m256i v) {
  const __m256i control = _mm256_setr_epi8(
      -1, J0, -1, J1, -1, 4 + J0, -1, 4 + J1, -1, 8 + J0, -1, 8 + J1, -1, 12 + J0, -1, 12 + J1, -1,
      J0, -1, J1, -1, 4 + J0, -1, 4 + J1, -1, 8 + J0, -1, 8 + J1, -1, 12 + J0, -1, 12 + J1);
  return _mm256_srai_epi16(_mm256_shuffle_epi8(v, control), 8);
}

// Transposes 32 bytes at `offset` of the current block of each of the 8 rows:
// out[d] lane r = bytes 4d..4d+3 of row r.
inline void transpose_rows_32(const uint8_t* const rows[kTileRows], int64_t offset,
                              __m256i out[8]) {
  __m256i pairs[4];
  for (int r = 0; r < 4; ++r) pairs[r] = load_row_pair(rows[r] + offset, rows[r + 4] + offset);
  transpose_8x4(pairs, out);
  for (int r = 0; r < 4; ++r) {
    pairs[r] = load_row_pair(rows[r] + offset + 16, rows[r + 4] + offset + 16);
  }
  transpose_8x4(pairs, out + 4);
}

inline void transpose_rows_16(const uint8_t* const rows[kTileRows], int64_t offset,
                              __m256i out[4]) {
  __m256i pairs[4];
  for (int r = 0; r < 4; ++r) pairs[r] = load_row_pair(rows[r] + offset, rows[r + 4] + offset);
  transpose_8x4(pairs, out);
}

// f32 of the f16 in the low (HIGH = false) or high half of each dword lane.
template <bool HIGH>
inline __m256 halves_to_float(__m256i v) {
  const int o = HIGH ? 2 : 0;
  const __m256i pick = _mm256_setr_epi8(o, o + 1, o + 4, o + 5, o + 8, o + 9, o + 12, o + 13, -1,
                                        -1, -1, -1, -1, -1, -1, -1, o, o + 1, o + 4, o + 5, o + 8,
                                        o + 9, o + 12, o + 13, -1, -1, -1, -1, -1, -1, -1, -1);
  const __m256i packed = _mm256_permute4x64_epi64(_mm256_shuffle_epi8(v, pick), 0x08);
  return _mm256_cvtph_ps(_mm256_castsi256_si128(packed));
}

inline void prefetch_next_tile_block(const uint8_t* const rows[kTileRows], size_t row_stride,
                                     int64_t at, int64_t bytes) {
  for (int64_t line = 0; line < bytes; line += 64) prefetch_next_tile(rows, row_stride, at + line);
}

// Σ_d maddubs(w[d], x[4d..4d+3]) over 8 dwords: int16 lanes, each ≤ 8·2·15·127 for 4-bit w.
inline __m256i dot_32(const __m256i w[8], const int8_t* x) {
  __m256i p = _mm256_maddubs_epi16(w[0], broadcast_i32(x));
  for (int d = 1; d < 8; ++d)
    p = _mm256_add_epi16(p, _mm256_maddubs_epi16(w[d], broadcast_i32(x + 4 * d)));
  return p;
}

void tile_q4_K(const uint8_t* const rows[kTileRows], size_t row_stride, int64_t nb,
               const K8Activations& act, int64_t m0, int64_t m1, float* total, int32_t* isum) {
  const __m256i low_mask = _mm256_set1_epi8(0x0f);
  const __m256i m6 = _mm256_set1_epi8(63);
  const __m256i top2 = _mm256_set1_epi8(0x30);
  for (int64_t m = m0; m < m1; ++m) _mm256_storeu_ps(total + (m - m0) * 8, _mm256_setzero_ps());

  for (int64_t b = 0; b < nb; ++b) {
    const int64_t at = b * static_cast<int64_t>(sizeof(BlockQ4_K));
    prefetch_next_tile_block(rows, row_stride, at, sizeof(BlockQ4_K));
    // Header dwords: v[0] = d | dmin << 16, v[1..3] = the 12 packed scale bytes.
    __m256i v[4];
    transpose_rows_16(rows, at, v);
    const __m256 wd = halves_to_float<false>(v[0]);
    const __m256 wdmin = halves_to_float<true>(v[0]);
    // sc[j]: scale of sub-block j as an int16 pair per lane; mins[i]: (min 2i, min 2i+1).
    __m256i sc[8], mins[4];
    sc[0] = _mm256_and_si256(spread_bytes<0, 0>(v[1]), m6);
    sc[1] = _mm256_and_si256(spread_bytes<1, 1>(v[1]), m6);
    sc[2] = _mm256_and_si256(spread_bytes<2, 2>(v[1]), m6);
    sc[3] = _mm256_and_si256(spread_bytes<3, 3>(v[1]), m6);
    sc[4] = _mm256_or_si256(_mm256_and_si256(spread_bytes<0, 0>(v[3]), low_mask),
                            _mm256_and_si256(_mm256_srli_epi16(spread_bytes<0, 0>(v[1]), 2), top2));
    sc[5] = _mm256_or_si256(_mm256_and_si256(spread_bytes<1, 1>(v[3]), low_mask),
                            _mm256_and_si256(_mm256_srli_epi16(spread_bytes<1, 1>(v[1]), 2), top2));
    sc[6] = _mm256_or_si256(_mm256_and_si256(spread_bytes<2, 2>(v[3]), low_mask),
                            _mm256_and_si256(_mm256_srli_epi16(spread_bytes<2, 2>(v[1]), 2), top2));
    sc[7] = _mm256_or_si256(_mm256_and_si256(spread_bytes<3, 3>(v[3]), low_mask),
                            _mm256_and_si256(_mm256_srli_epi16(spread_bytes<3, 3>(v[1]), 2), top2));
    mins[0] = _mm256_and_si256(spread_bytes<0, 1>(v[2]), m6);
    mins[1] = _mm256_and_si256(spread_bytes<2, 3>(v[2]), m6);
    mins[2] =
        _mm256_or_si256(_mm256_srli_epi16(spread_bytes<0, 1>(v[3]), 4),
                        _mm256_and_si256(_mm256_srli_epi16(spread_bytes<0, 1>(v[2]), 2), top2));
    mins[3] =
        _mm256_or_si256(_mm256_srli_epi16(spread_bytes<2, 3>(v[3]), 4),
                        _mm256_and_si256(_mm256_srli_epi16(spread_bytes<2, 3>(v[2]), 2), top2));

    for (int64_t m = m0; m < m1; ++m)
      _mm256_storeu_si256(reinterpret_cast<__m256i*>(isum + (m - m0) * 8), _mm256_setzero_si256());
    for (int g = 0; g < 4; ++g) {
      // Group g: 32 bytes; low nibbles are sub-block 2g, high nibbles 2g + 1.
      __m256i packed[8], w[8];
      transpose_rows_32(rows, at + 16 + 32 * g, packed);
      for (int half = 0; half < 2; ++half) {
        for (int d = 0; d < 8; ++d) {
          w[d] =
              _mm256_and_si256(half == 0 ? packed[d] : _mm256_srli_epi16(packed[d], 4), low_mask);
        }
        const __m256i scale = sc[2 * g + half];
        for (int64_t m = m0; m < m1; ++m) {
          const int8_t* xq = act.blocks[m * nb + b].qs + 64 * g + 32 * half;
          __m256i* s = reinterpret_cast<__m256i*>(isum + (m - m0) * 8);
          _mm256_storeu_si256(
              s, _mm256_add_epi32(_mm256_loadu_si256(s), _mm256_madd_epi16(dot_32(w, xq), scale)));
        }
      }
    }
    for (int64_t m = m0; m < m1; ++m) {
      const int64_t i = m * nb + b;
      const int32_t* pairs = act.min_pairs.data() + i * 4;
      __m256i sum_min = _mm256_madd_epi16(mins[0], _mm256_set1_epi32(pairs[0]));
      for (int k = 1; k < 4; ++k) {
        sum_min =
            _mm256_add_epi32(sum_min, _mm256_madd_epi16(mins[k], _mm256_set1_epi32(pairs[k])));
      }
      const __m256 xd = _mm256_set1_ps(act.blocks[i].d);
      const __m256 d = _mm256_mul_ps(xd, wd);
      const __m256 dmin = _mm256_mul_ps(xd, wdmin);
      const __m256i sum_qx =
          _mm256_loadu_si256(reinterpret_cast<const __m256i*>(isum + (m - m0) * 8));
      const __m256 value = _mm256_fmsub_ps(d, _mm256_cvtepi32_ps(sum_qx),
                                           _mm256_mul_ps(dmin, _mm256_cvtepi32_ps(sum_min)));
      float* t = total + (m - m0) * 8;
      _mm256_storeu_ps(t, _mm256_add_ps(_mm256_loadu_ps(t), value));
    }
  }
}

// Q6_K values 32T..32T+31 of a half super-block (0..63, lane = row) from its
// transposed low-nibble bytes ql[0] (bytes 0..31), ql[1] (32..63) and high bits qh.
template <int T>
inline void q6_K_values(const __m256i ql[2][8], const __m256i qh[8], __m256i w[8]) {
  const __m256i low_mask = _mm256_set1_epi8(0x0f);
  const __m256i top2 = _mm256_set1_epi8(0x30);
  for (int d = 0; d < 8; ++d) {
    const __m256i src = ql[T & 1][d];
    const __m256i low = _mm256_and_si256(T < 2 ? src : _mm256_srli_epi16(src, 4), low_mask);
    const __m256i high = T == 0   ? _mm256_slli_epi16(qh[d], 4)
                         : T == 1 ? _mm256_slli_epi16(qh[d], 2)
                         : T == 2 ? qh[d]
                                  : _mm256_srli_epi16(qh[d], 2);
    w[d] = _mm256_or_si256(low, _mm256_and_si256(high, top2));
  }
}

// Adds Σ sc·q·x over values 32T..32T+31 of a half super-block (two
// sub-blocks of 16) to isum for activations [m0, m1). `scales` is the
// transposed scale dword holding those two sub-blocks' scales.
template <int T>
inline void q6_K_quarter(const __m256i ql[2][8], const __m256i qh[8], __m256i scales,
                         const K8Activations& act, int64_t nb, int64_t b, int64_t offset,
                         int64_t m0, int64_t m1, int32_t* isum) {
  __m256i w[8];
  q6_K_values<T>(ql, qh, w);
  constexpr int j = 2 * (T % 2);
  const __m256i sc_lo = spread_signed_bytes<j, j>(scales);
  const __m256i sc_hi = spread_signed_bytes<j + 1, j + 1>(scales);
  for (int64_t m = m0; m < m1; ++m) {
    const int8_t* xq = act.blocks[m * nb + b].qs + offset + 32 * T;
    // Pair sums ≤ 2·63·127: two maddubs fit int16, then scale.
    __m256i acc = _mm256_setzero_si256();
    for (int d = 0; d < 8; d += 2) {
      const __m256i p =
          _mm256_add_epi16(_mm256_maddubs_epi16(w[d], broadcast_i32(xq + 4 * d)),
                           _mm256_maddubs_epi16(w[d + 1], broadcast_i32(xq + 4 * d + 4)));
      acc = _mm256_add_epi32(acc, _mm256_madd_epi16(p, d < 4 ? sc_lo : sc_hi));
    }
    __m256i* s = reinterpret_cast<__m256i*>(isum + (m - m0) * 8);
    _mm256_storeu_si256(s, _mm256_add_epi32(_mm256_loadu_si256(s), acc));
  }
}

void tile_q6_K(const uint8_t* const rows[kTileRows], size_t row_stride, int64_t nb,
               const K8Activations& act, int64_t m0, int64_t m1, float* total, int32_t* isum) {
  for (int64_t m = m0; m < m1; ++m) _mm256_storeu_ps(total + (m - m0) * 8, _mm256_setzero_ps());

  for (int64_t b = 0; b < nb; ++b) {
    const int64_t at = b * static_cast<int64_t>(sizeof(BlockQ6_K));
    prefetch_next_tile_block(rows, row_stride, at, sizeof(BlockQ6_K));
    // The 16 int8 scales (4 dwords) and, from 16 bytes ending at the block's
    // end, the f16 d in the high half of the last dword.
    __m256i s[4], tail[4];
    transpose_rows_16(rows, at + 192, s);
    transpose_rows_16(rows, at + 194, tail);
    const __m256 wd = halves_to_float<true>(tail[3]);
    for (int64_t m = m0; m < m1; ++m)
      _mm256_storeu_si256(reinterpret_cast<__m256i*>(isum + (m - m0) * 8), _mm256_setzero_si256());
    for (int h = 0; h < 2; ++h) {
      // Half h: elements 128h..128h+127, scales 8h..8h+7 (dwords s[2h], s[2h + 1]).
      __m256i ql[2][8], qh[8];
      transpose_rows_32(rows, at + 64 * h, ql[0]);
      transpose_rows_32(rows, at + 64 * h + 32, ql[1]);
      transpose_rows_32(rows, at + 128 + 32 * h, qh);
      q6_K_quarter<0>(ql, qh, s[2 * h], act, nb, b, 128 * h, m0, m1, isum);
      q6_K_quarter<1>(ql, qh, s[2 * h], act, nb, b, 128 * h, m0, m1, isum);
      q6_K_quarter<2>(ql, qh, s[2 * h + 1], act, nb, b, 128 * h, m0, m1, isum);
      q6_K_quarter<3>(ql, qh, s[2 * h + 1], act, nb, b, 128 * h, m0, m1, isum);
    }
    // sc_pairs[i]: (scale 2i, scale 2i + 1) as int16 per lane.
    __m256i sc_pairs[8];
    for (int q = 0; q < 4; ++q) {
      sc_pairs[2 * q] = spread_signed_bytes<0, 1>(s[q]);
      sc_pairs[2 * q + 1] = spread_signed_bytes<2, 3>(s[q]);
    }
    for (int64_t m = m0; m < m1; ++m) {
      const int64_t i = m * nb + b;
      const BlockQ8_K& xb = act.blocks[i];
      // Σ sc·(q − 32)·x = Σ sc·q·x − 32·Σ_k sc_k·bsums[k].
      int32_t bsum_pairs[8];
      std::memcpy(bsum_pairs, xb.bsums, sizeof(bsum_pairs));
      __m256i bias = _mm256_madd_epi16(sc_pairs[0], _mm256_set1_epi32(bsum_pairs[0]));
      for (int k = 1; k < 8; ++k) {
        bias = _mm256_add_epi32(bias,
                                _mm256_madd_epi16(sc_pairs[k], _mm256_set1_epi32(bsum_pairs[k])));
      }
      const __m256i sum_qx = _mm256_sub_epi32(
          _mm256_loadu_si256(reinterpret_cast<const __m256i*>(isum + (m - m0) * 8)),
          _mm256_slli_epi32(bias, 5));
      const __m256 d = _mm256_mul_ps(_mm256_set1_ps(xb.d), wd);
      float* t = total + (m - m0) * 8;
      _mm256_storeu_ps(t, _mm256_fmadd_ps(d, _mm256_cvtepi32_ps(sum_qx), _mm256_loadu_ps(t)));
    }
  }
}

}  // namespace

}  // namespace parspec
