// The Q4_0/Q8_0 tile kernels built for AVX-512 F/BW/VL/VNNI (this file alone is
// compiled with those flags; matmul.cpp calls it only when the CPU has them).
//
// A tile is 16 weight rows, one per 32-bit lane of a 512-bit register, so one
// broadcast activation dword feeds 16 rows and each vpdpbusd does twice the
// work of the 256-bit kernels. Per lane the operations are those of
// q8_tiles.h, in the same order: the exact int32 block sum, then
// acc = fma(float(isum), dw * dx, acc) block by block, so results are
// bit-identical to the AVX2 and AVX-VNNI builds.
// GCC 12 warns that the undefined registers its own AVX-512 insert/extract
// intrinsics start from (_mm*_undefined_*) are "used uninitialized" (GCC bug
// 105593); every lane of the results here is written.
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#pragma GCC diagnostic ignored "-Wuninitialized"
#include <algorithm>

#include "kernels/float_tiles.h"
#include "kernels/q8_tiles.h"
#include "kernels/q8_tiles_avx512.h"

namespace parspec::q8tiles {
namespace {

// The 8-row kernels for a leftover tile: vpdpbusd on 256 bits (AVX512-VL).
struct DotVnni256 {
  static __m256i sum_q4(const __m256i lo[4], const __m256i hi[4], const int8_t* xq) {
    __m256i s = _mm256_setzero_si256();
    for (int d = 0; d < 4; ++d) {
      s = _mm256_dpbusd_epi32(s, lo[d], broadcast_i32(xq + 4 * d));
      s = _mm256_dpbusd_epi32(s, hi[d], broadcast_i32(xq + 16 + 4 * d));
    }
    return s;
  }
  static constexpr bool kBiasedQ8 = true;
  static __m256i sum_q8(const __m256i biased[8], const __m256i[8], const int8_t* xq) {
    // Σ (w + 128)·x; the tile subtracts 128·Σ x.
    __m256i s = _mm256_setzero_si256();
    for (int g = 0; g < 8; ++g) s = _mm256_dpbusd_epi32(s, biased[g], broadcast_i32(xq + 4 * g));
    return s;
  }
};

inline __m512i join(__m256i lo, __m256i hi) {
  return _mm512_inserti64x4(_mm512_castsi256_si512(lo), hi, 1);
}

// Dwords [offset, offset + 16) of the current block of 16 rows, transposed:
// out[d] lane r = dword d of row r (d = 0..3).
inline void transpose16x4(const uint8_t* const rows[kTileRows16], int64_t offset, __m512i out[4]) {
  __m256i pairs[4], lo[4], hi[4];
  for (int r = 0; r < 4; ++r) pairs[r] = load_row_pair(rows[r] + offset, rows[r + 4] + offset);
  transpose_8x4(pairs, lo);
  for (int r = 0; r < 4; ++r) pairs[r] = load_row_pair(rows[r + 8] + offset, rows[r + 12] + offset);
  transpose_8x4(pairs, hi);
  for (int d = 0; d < 4; ++d) out[d] = join(lo[d], hi[d]);
}

inline __m512 load_row_scales16(const uint8_t* const rows[kTileRows16], int64_t at) {
  const __m256 lo = load_row_scales(rows, at), hi = load_row_scales(rows + 8, at);
  return _mm512_castpd_ps(_mm512_insertf64x4(
      _mm512_insertf64x4(_mm512_setzero_pd(), _mm256_castps_pd(lo), 0), _mm256_castps_pd(hi), 1));
}

inline void prefetch_next_tile16(const uint8_t* const rows[kTileRows16], size_t row_stride,
                                 int64_t at) {
  const size_t ahead = kTileRows16 * row_stride;
  for (int r = 0; r < kTileRows16; ++r)
    _mm_prefetch(reinterpret_cast<const char*>(rows[r] + at + ahead), _MM_HINT_T0);
}

struct Q8Block16 {
  // w + 128 as unsigned bytes: vpdpbusd multiplies u8 × s8, and
  // Σ (w + 128)·x − 128·Σ x = Σ w·x exactly, with no sign fix-up per row.
  static constexpr int64_t kBytes = sizeof(BlockQ8_0);
  __m512i w[8];
  __m512 dw;
  __m512i part(int g) const { return w[g]; }
  static int32_t start(const ActView& act, int64_t i) { return act.minus_sums128[i]; }
  __m512 apply(const ActView& act, int64_t i, __m512 acc) const {
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

inline Q4Block16 load_q4_block(const uint8_t* const rows[kTileRows16], int64_t at) {
  const __m512i low_mask = _mm512_set1_epi8(0x0f);
  Q4Block16 k;
  __m512i packed[4];
  transpose16x4(rows, at + 2, packed);
  for (int d = 0; d < 4; ++d) {
    k.lo[d] = _mm512_and_si512(packed[d], low_mask);
    k.hi[d] = _mm512_and_si512(_mm512_srli_epi16(packed[d], 4), low_mask);
  }
  k.dw = load_row_scales16(rows, at);
  return k;
}

inline Q8Block16 load_q8_block(const uint8_t* const rows[kTileRows16], int64_t at) {
  const __m512i bias = _mm512_set1_epi8(static_cast<char>(0x80));
  Q8Block16 k;
  transpose16x4(rows, at + 2, k.w);
  transpose16x4(rows, at + 18, k.w + 4);
  for (int g = 0; g < 8; ++g) k.w[g] = _mm512_xor_si512(k.w[g], bias);
  k.dw = load_row_scales16(rows, at);
  return k;
}

// MR > 0: exactly MR activation rows (up to 8: a verification chain),
// accumulated in registers (through memory every block would wait on a
// store-to-load forward). MR = 0: any number, accumulated in acc. Same operations per lane
// either way.
template <class Block, Block (*Load)(const uint8_t* const*, int64_t), int MR>
void tile16(const uint8_t* const rows[kTileRows16], size_t row_stride, int64_t nb,
            const Q8Activations& activations, int64_t m0, int64_t m1, float* acc) {
  const ActView act(activations);
  __m512 regs[MR > 0 ? MR : 1];
  for (int j = 0; j < MR; ++j) regs[j] = _mm512_setzero_ps();
  if (MR == 0)
    for (int64_t m = m0; m < m1; ++m) _mm512_storeu_ps(acc + (m - m0) * 16, _mm512_setzero_ps());
  for (int64_t b = 0; b < nb; ++b) {
    const int64_t at = b * Block::kBytes;
    prefetch_next_tile16(rows, row_stride, at);
    const Block k = Load(rows, at);
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

template <class Block, Block (*Load)(const uint8_t* const*, int64_t)>
void tile16_any(const uint8_t* const rows[kTileRows16], size_t row_stride, int64_t nb,
                const Q8Activations& act, int64_t m0, int64_t m1, float* acc) {
  switch (m1 - m0) {
    case 1:
      return tile16<Block, Load, 1>(rows, row_stride, nb, act, m0, m1, acc);
    case 2:
      return tile16<Block, Load, 2>(rows, row_stride, nb, act, m0, m1, acc);
    case 3:
      return tile16<Block, Load, 3>(rows, row_stride, nb, act, m0, m1, acc);
    case 4:
      return tile16<Block, Load, 4>(rows, row_stride, nb, act, m0, m1, acc);
    case 5:
      return tile16<Block, Load, 5>(rows, row_stride, nb, act, m0, m1, acc);
    case 6:
      return tile16<Block, Load, 6>(rows, row_stride, nb, act, m0, m1, acc);
    case 7:
      return tile16<Block, Load, 7>(rows, row_stride, nb, act, m0, m1, acc);
    case 8:
      return tile16<Block, Load, 8>(rows, row_stride, nb, act, m0, m1, acc);
    default:
      return tile16<Block, Load, 0>(rows, row_stride, nb, act, m0, m1, acc);
  }
}

// 32 weight rows (two 16-row blocks) against any number of activation rows,
// accumulated in acc (32 per row): each broadcast activation dword feeds both
// blocks. A core loads two 512-bit vectors per cycle, broadcasts included, so
// with 16 rows the eight broadcasts, the scale and the accumulator of every
// row and block bound a prompt's matmuls; here they are shared by twice the
// work. Per lane the same integer sum and the same fma as tile16.
template <class Block, Block (*Load)(const uint8_t* const*, int64_t)>
void tile32(const uint8_t* const rows[kTileRows32], size_t row_stride, int64_t nb,
            const Q8Activations& activations, int64_t m0, int64_t m1, float* acc) {
  const ActView act(activations);
  for (int64_t m = m0; m < m1; ++m) {
    _mm512_storeu_ps(acc + (m - m0) * 32, _mm512_setzero_ps());
    _mm512_storeu_ps(acc + (m - m0) * 32 + 16, _mm512_setzero_ps());
  }
  for (int64_t b = 0; b < nb; ++b) {
    const int64_t at = b * Block::kBytes;
    const size_t ahead = kTileRows32 * row_stride;
    for (int r = 0; r < kTileRows32; ++r)
      _mm_prefetch(reinterpret_cast<const char*>(rows[r] + at + ahead), _MM_HINT_T0);
    const Block k0 = Load(rows, at), k1 = Load(rows + kTileRows16, at);
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
}

void tile32_q4_0(const uint8_t* const rows[kTileRows32], size_t row_stride, int64_t nb,
                 const Q8Activations& act, int64_t m0, int64_t m1, float* acc) {
  tile32<Q4Block16, &load_q4_block>(rows, row_stride, nb, act, m0, m1, acc);
}

void tile32_q8_0(const uint8_t* const rows[kTileRows32], size_t row_stride, int64_t nb,
                 const Q8Activations& act, int64_t m0, int64_t m1, float* acc) {
  tile32<Q8Block16, &load_q8_block>(rows, row_stride, nb, act, m0, m1, acc);
}

void tile16_q4_0(const uint8_t* const rows[kTileRows16], size_t row_stride, int64_t nb,
                 const Q8Activations& act, int64_t m0, int64_t m1, float* acc) {
  tile16_any<Q4Block16, &load_q4_block>(rows, row_stride, nb, act, m0, m1, acc);
}

void tile16_q8_0(const uint8_t* const rows[kTileRows16], size_t row_stride, int64_t nb,
                 const Q8Activations& act, int64_t m0, int64_t m1, float* acc) {
  tile16_any<Q8Block16, &load_q8_block>(rows, row_stride, nb, act, m0, m1, acc);
}

}  // namespace

TileKernels avx512_tile_kernels() {
  return {&tile_q4_0<DotVnni256>, &tile_q8_0<DotVnni256>, &tile16_q4_0,
          &tile16_q8_0,           &tile32_q4_0,           &tile32_q8_0};
}

}  // namespace parspec::q8tiles

// ------------------------------------------------------ F32/F16/BF16 tiles ----

namespace parspec::float_tiles {
namespace {

// Weights k..k+15 of a row as f32 (all 16 lanes of one register).
template <DType T>
inline __m512 load_weights16(const uint8_t* row, int64_t k) {
  if constexpr (T == DType::F32) {
    return _mm512_loadu_ps(reinterpret_cast<const float*>(row) + k);
  } else {
    const __m256i h = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(row + 2 * k));
    if constexpr (T == DType::F16) return _mm512_cvtph_ps(h);
    return _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(h), 16));
  }
}

// The same for the ragged tail: lanes selected by `mask`, zero elsewhere.
template <DType T>
inline __m512 load_weights16_tail(const uint8_t* row, int64_t k, __mmask16 mask) {
  if constexpr (T == DType::F32) {
    return _mm512_maskz_loadu_ps(mask, reinterpret_cast<const float*>(row) + k);
  } else {
    const __m256i h = _mm256_maskz_loadu_epi16(mask, row + 2 * k);
    if constexpr (T == DType::F16) return _mm512_cvtph_ps(h);
    return _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(h), 16));
  }
}

// One prefetch per cache line of weights, 1 KiB ahead in each row: with 4-8
// rows streaming at once the hardware prefetcher alone left a one-token
// forward further from the bandwidth roofline.
constexpr int64_t kPrefetchBytes = 1024;

// The column_tile operations (float_tiles.h) on 512-bit registers.
struct Ops512 {
  static constexpr bool kEightRows = true;
  static constexpr int kWidest = 6;

  template <DType T, int R, int C, bool Prefetch>
  static void block(const uint8_t* const rows[], const uint8_t* const ahead[], int64_t n,
                    const float* x, int64_t ldx, float* acc) {
    __m512 a[R][C];
    for (int r = 0; r < R; ++r)
      for (int c = 0; c < C; ++c) a[r][c] = _mm512_load_ps(acc + (r * kMaxColumns + c) * 16);
    constexpr int64_t kBytes = T == DType::F32 ? 4 : 2;  // per weight
    const int64_t whole = n & ~int64_t{15};
    for (int64_t k = 0; k < whole; k += 16) {
      if (k % (64 / kBytes) == 0) {
        if (Prefetch) {
          for (int r = 0; r < R; ++r)
            _mm_prefetch(reinterpret_cast<const char*>(rows[r]) + kBytes * k + kPrefetchBytes,
                         _MM_HINT_T0);
        }
        if (ahead != nullptr) {
          for (int r = 0; r < 4; ++r)
            _mm_prefetch(reinterpret_cast<const char*>(ahead[r]) + kBytes * k, _MM_HINT_T1);
        }
      }
      __m512 xv[C];
      for (int c = 0; c < C; ++c) xv[c] = _mm512_loadu_ps(x + c * ldx + k);
      for (int r = 0; r < R; ++r) {
        const __m512 w = load_weights16<T>(rows[r], k);
        for (int c = 0; c < C; ++c) a[r][c] = _mm512_fmadd_ps(w, xv[c], a[r][c]);
      }
    }
    if (whole < n) {
      const auto mask = static_cast<__mmask16>((1u << (n - whole)) - 1);
      __m512 xv[C];
      for (int c = 0; c < C; ++c) xv[c] = _mm512_maskz_loadu_ps(mask, x + c * ldx + whole);
      for (int r = 0; r < R; ++r) {
        const __m512 w = load_weights16_tail<T>(rows[r], whole, mask);
        for (int c = 0; c < C; ++c) a[r][c] = _mm512_fmadd_ps(w, xv[c], a[r][c]);
      }
    }
    for (int r = 0; r < R; ++r)
      for (int c = 0; c < C; ++c) _mm512_store_ps(acc + (r * kMaxColumns + c) * 16, a[r][c]);
  }
};

}  // namespace

void avx512_tile(DType type, const uint8_t* const rows[kTileRows], const uint8_t* const next[],
                 int valid, const float* x, int64_t M, int64_t n, float* y, int64_t ldy) {
  switch (type) {
    case DType::F32:
      return column_tile<Ops512, DType::F32>(rows, next, valid, x, M, n, y, ldy);
    case DType::F16:
      return column_tile<Ops512, DType::F16>(rows, next, valid, x, M, n, y, ldy);
    default:
      return column_tile<Ops512, DType::BF16>(rows, next, valid, x, M, n, y, ldy);
  }
}

}  // namespace parspec::float_tiles
