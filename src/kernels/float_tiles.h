#pragma once
// F32/F16/BF16 weight tiles: 8 weight rows against a batch of f32 activation
// rows. One numerics contract on every ISA (which is what keeps results batch
// invariant and bit-identical across PARSPEC_ISA): for output (m, o), a
// 16-lane accumulator where lane j sums w[k]·x[k] for k ≡ j (mod 16) with fma
// in k order (a ragged tail as one zero-padded 16-step), folded as lanes 0-7
// + lanes 8-15, then reduced by fold8 below. An AVX-512 lane holds the whole
// 16-lane accumulator in one register; AVX2 holds it as two 8-lane halves.
#include <immintrin.h>

#include <algorithm>
#include <cstdint>

#include "kernels/quant.h"

namespace parspec::float_tiles {

constexpr int kTileRows = 8;

// The one horizontal reduction of the 8 folded lanes, shared by every path.
inline float reduce8(__m256 v) {
  __m128 s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
  s = _mm_add_ps(s, _mm_movehl_ps(s, s));
  s = _mm_add_ss(s, _mm_movehdup_ps(s));
  return _mm_cvtss_f32(s);
}

// Column groups for a batch of M ≥ 2 activation rows against 4 weight rows:
// at most `widest` per group (Ops::kWidest: 4 × 6 accumulators fit the 32
// AVX-512 registers, 4 × 3 the 16 AVX2 ones), and never a group of 1 (4 fma
// chains cannot hide the fma latency).
inline int column_group(int64_t left, int widest) {
  if (left <= widest) return static_cast<int>(left);
  if (left <= 2 * widest) return static_cast<int>((left + 1) / 2);
  return widest;
}

// ---- One driver for every ISA: batches of M ≥ 2 (verification, trees, prefill),
// and on AVX-512 the one-row decode as well (8 weight rows × 1).
constexpr int kMaxColumns = 16;  // activation rows per pass over a tile

// Ops (one per ISA) provides kWidest (above), kEightRows (whether it has
// eight_rows, below) and
//   template <DType T, int C, bool Prefetch>
//   static void block(const uint8_t* const rows[4], const uint8_t* const ahead[], int64_t n,
//                     const float* x, int64_t ldx, float* acc);
//     the contract's fmas for weights 0..n (a ragged end zero padded) of
//     the 4 rows and activation rows c < C (x + c·ldx), continuing the
//     16-lane accumulators acc + (r·kMaxColumns + c)·16; with Prefetch, one
//     software prefetch per cache line of weights, ahead in each row; unless
//     null, the same lines of the 4 rows ahead[] (the next block's) as well;
//   template <DType T, int C>  (only where kEightRows)
//   static void eight_rows(const uint8_t* const rows[8], const uint8_t* const next[], int valid,
//                          int64_t n, const float* x, float* y, int64_t ldy);
//     y[c·ldy + r] = the contract's result for all 8 rows (r < valid
//     stored) × C ≤ 3 activation rows (x: C × n), accumulators in registers;
//     `next` (or null): the next tile's 8 rows, for the prefetch.
template <class Ops, DType T, bool Prefetch>
void column_block(int c_count, const uint8_t* const rows[], const uint8_t* const ahead[], int64_t n,
                  const float* x, int64_t ldx, float* acc) {
  if constexpr (Ops::kWidest == 6) {
    switch (c_count) {
      case 4:
        return Ops::template block<T, 4, Prefetch>(rows, ahead, n, x, ldx, acc);
      case 5:
        return Ops::template block<T, 5, Prefetch>(rows, ahead, n, x, ldx, acc);
      case 6:
        return Ops::template block<T, 6, Prefetch>(rows, ahead, n, x, ldx, acc);
      default:
        break;
    }
  }
  switch (c_count) {
    case 1:
      return Ops::template block<T, 1, Prefetch>(rows, ahead, n, x, ldx, acc);
    case 2:
      return Ops::template block<T, 2, Prefetch>(rows, ahead, n, x, ldx, acc);
    default:
      return Ops::template block<T, 3, Prefetch>(rows, ahead, n, x, ldx, acc);
  }
}

// y[c * ldy + r] for activation rows c < M (1 ≤ M ≤ kMaxColumns; x: M × n)
// and weight rows r < valid of `rows`; `next` (null at the end): the rows of
// the tile that follows. With 4 weight rows at a time the accumulators live in
// memory between column groups (storing and reloading a float is exact).
template <class Ops, DType T>
void column_pass(const uint8_t* const rows[kTileRows], const uint8_t* const next[], int valid,
                 const float* x, int64_t M, int64_t n, float* y, int64_t ldy) {
  if constexpr (Ops::kEightRows) {
    if (valid > 4 && M <= 3) {
      // All 8 weight rows at once, in registers: 8 rows stream from memory
      // (2-3 rows ran at ~24 GB/s of F16 weights on one Zen 5 core with 4
      // rows, ~31 with 8: bench/kernel_throughput 2048 16384).
      switch (M) {
        case 1:
          return Ops::template eight_rows<T, 1>(rows, next, valid, n, x, y, ldy);
        case 2:
          return Ops::template eight_rows<T, 2>(rows, next, valid, n, x, y, ldy);
        default:
          return Ops::template eight_rows<T, 3>(rows, next, valid, n, x, y, ldy);
      }
    }
  }
  alignas(64) float acc[kTileRows][kMaxColumns][16];
  const int row_count = valid <= 4 ? 4 : kTileRows;
  for (int r = 0; r < row_count; ++r)
    for (int64_t c = 0; c < M; ++c)
      for (float& v : acc[r][c]) v = 0.0f;
  // 4 weight rows × column groups. The first group of each streams the
  // weights (prefetching ahead in them); the last also prefetches the next
  // 4 rows, so that memory keeps streaming while the other groups find the
  // weights in cache and while the next block has fewer streams of its own.
  for (int r0 = 0; r0 < row_count; r0 += 4) {
    const uint8_t* const* ahead = r0 + 4 < row_count ? rows + r0 + 4 : next;
    for (int64_t c0 = 0; c0 < M;) {
      const int c_count = column_group(M - c0, Ops::kWidest);
      const uint8_t* const* ahead_here = c0 + c_count == M ? ahead : nullptr;
      if (c0 == 0) {
        column_block<Ops, T, true>(c_count, rows + r0, ahead_here, n, x, n, &acc[r0][0][0]);
      } else {
        column_block<Ops, T, false>(c_count, rows + r0, ahead_here, n, x + c0 * n, n,
                                    &acc[r0][c0][0]);
      }
      c0 += c_count;
    }
  }
  for (int64_t c = 0; c < M; ++c) {
    for (int r = 0; r < valid; ++r) {
      const float* a = acc[r][c];
      y[c * ldy + r] = reduce8(_mm256_add_ps(_mm256_load_ps(a), _mm256_load_ps(a + 8)));
    }
  }
}

// The same for any M: passes of at most kMaxColumns rows, balanced (17 =
// 8 + 9), so that no pass is a single row unless M is.
template <class Ops, DType T>
void column_tile(const uint8_t* const rows[kTileRows], const uint8_t* const next[], int valid,
                 const float* x, int64_t M, int64_t n, float* y, int64_t ldy) {
  const int64_t passes = (M + kMaxColumns - 1) / kMaxColumns;
  for (int64_t m0 = 0, p = 0; p < passes; ++p) {
    const int64_t cols = (M - m0) / (passes - p);
    column_pass<Ops, T>(rows, next, valid, x + m0 * n, cols, n, y + m0 * ldy, ldy);
    m0 += cols;
  }
}

// AVX-512 (matmul_avx512.cpp; call only where the CPU has AVX-512 F/BW/VL):
// y[m * ldy + r] for activation rows m < M (x: M × n, row-major) and weight
// rows r < valid of `rows` (type F32, F16 or BF16, n elements each); `next`:
// the next tile's rows, to prefetch (or null).
void avx512_tile(DType type, const uint8_t* const rows[kTileRows], const uint8_t* const next[],
                 int valid, const float* x, int64_t M, int64_t n, float* y, int64_t ldy);

}  // namespace parspec::float_tiles
