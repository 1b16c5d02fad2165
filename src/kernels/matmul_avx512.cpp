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

#include "kernels/float_pairs.h"
#include "kernels/q8_tiles.h"

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

inline __m512i broadcast_x(const int8_t* p) {
  int32_t v;
  std::memcpy(&v, p, sizeof(v));
  return _mm512_set1_epi32(v);
}

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

// Block b's contribution to activation row m: acc = fma(float(isum), dw·dx, acc).
struct Q4Block16 {
  static constexpr int64_t kBytes = sizeof(BlockQ4_0);
  __m512i lo[4], hi[4];
  __m512 dw;
  __m512 apply(const Q8Activations& act, int64_t i, __m512 acc) const {
    const int8_t* xq = act.blocks[i].qs;
    __m512i s = _mm512_setzero_si512();
    for (int d = 0; d < 4; ++d) {
      s = _mm512_dpbusd_epi32(s, lo[d], broadcast_x(xq + 4 * d));
      s = _mm512_dpbusd_epi32(s, hi[d], broadcast_x(xq + 16 + 4 * d));
    }
    // Σ (q − 8)·x = Σ q·x − 8·Σ x.
    const __m512i isum = _mm512_sub_epi32(s, _mm512_set1_epi32(act.sums8[i]));
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
  __m512 apply(const Q8Activations& act, int64_t i, __m512 acc) const {
    const int8_t* xq = act.blocks[i].qs;
    __m512i s = _mm512_setzero_si512();
    for (int g = 0; g < 8; ++g) s = _mm512_dpbusd_epi32(s, w[g], broadcast_x(xq + 4 * g));
    // sums8 = 8·Σ x, so 128·Σ x = 16·sums8.
    const __m512i isum = _mm512_sub_epi32(s, _mm512_set1_epi32(16 * act.sums8[i]));
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

// MR > 0: exactly MR activation rows, accumulated in registers (a decode step
// or a short chain; through memory every block would wait on a store-to-load
// forward). MR = 0: any number, accumulated in acc. Same operations per lane
// either way.
template <class Block, Block (*Load)(const uint8_t* const*, int64_t), int MR>
void tile16(const uint8_t* const rows[kTileRows16], size_t row_stride, int64_t nb,
            const Q8Activations& act, int64_t m0, int64_t m1, float* acc) {
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
    default:
      return tile16<Block, Load, 0>(rows, row_stride, nb, act, m0, m1, acc);
  }
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
  return {&tile_q4_0<DotVnni256>, &tile_q8_0<DotVnni256>, &tile16_q4_0, &tile16_q8_0};
}

}  // namespace parspec::q8tiles

// ------------------------------------------------------- F16/BF16 pairs ----

namespace parspec::float_pairs {
namespace {

constexpr bool kF16 = true, kBF16 = false;

// 8 weights (halves at `h`) converted to f32 in both 256-bit halves.
template <bool F16>
inline __m512 weights_twice(const uint8_t* h) {
  const __m256i v =
      _mm256_broadcastsi128_si256(_mm_loadu_si128(reinterpret_cast<const __m128i*>(h)));
  if constexpr (F16) {
    return _mm512_cvtph_ps(v);
  } else {
    return _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(v), 16));
  }
}

// The AVX2 kernels' horizontal reduction (matmul.cpp reduce8), on one half.
inline float reduce8(__m256 v) {
  __m128 s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
  s = _mm_add_ps(s, _mm_movehl_ps(s, s));
  s = _mm_add_ss(s, _mm_movehdup_ps(s));
  return _mm_cvtss_f32(s);
}

template <bool F16, int P>
void rows4(const uint8_t* const rows[4], const float* xp, int64_t n, float* out) {
  const int64_t steps = (n + 7) / 8, full = n / 8;
  __m512 acc[4][P];
  for (int r = 0; r < 4; ++r)
    for (int q = 0; q < P; ++q) acc[r][q] = _mm512_setzero_ps();
  for (int64_t s = 0; s < full; ++s) {
    __m512 x[P];
    for (int q = 0; q < P; ++q) x[q] = _mm512_loadu_ps(xp + (q * steps + s) * 16);
    for (int r = 0; r < 4; ++r) {
      const __m512 w = weights_twice<F16>(rows[r] + 16 * s);
      for (int q = 0; q < P; ++q) acc[r][q] = _mm512_fmadd_ps(w, x[q], acc[r][q]);
    }
  }
  if (full < steps) {
    // The ragged tail as one zero-padded step (the packed activations are zero there).
    __m512 x[P];
    for (int q = 0; q < P; ++q) x[q] = _mm512_loadu_ps(xp + (q * steps + full) * 16);
    for (int r = 0; r < 4; ++r) {
      alignas(16) uint8_t tail[16] = {};
      std::memcpy(tail, rows[r] + 16 * full, static_cast<size_t>(2 * (n - 8 * full)));
      const __m512 w = weights_twice<F16>(tail);
      for (int q = 0; q < P; ++q) acc[r][q] = _mm512_fmadd_ps(w, x[q], acc[r][q]);
    }
  }
  for (int q = 0; q < P; ++q) {
    for (int r = 0; r < 4; ++r) {
      const __m256d halves_hi = _mm512_extractf64x4_pd(_mm512_castps_pd(acc[r][q]), 1);
      out[(2 * q) * 4 + r] = reduce8(_mm512_castps512_ps256(acc[r][q]));
      out[(2 * q + 1) * 4 + r] = reduce8(_mm256_castpd_ps(halves_hi));
    }
  }
}

}  // namespace

void pack_pairs(const float* x, int64_t M, int64_t n, float* packed) {
  const int64_t steps = (n + 7) / 8;
  for (int64_t q = 0; q < (M + 1) / 2; ++q) {
    for (int h = 0; h < 2; ++h) {
      const float* row = x + std::min(2 * q + h, M - 1) * n;
      for (int64_t s = 0; s < steps; ++s) {
        float* dst = packed + (q * steps + s) * 16 + 8 * h;
        const int64_t valid = std::min<int64_t>(8, n - 8 * s);
        for (int64_t j = 0; j < 8; ++j) dst[j] = j < valid ? row[8 * s + j] : 0.0f;
      }
    }
  }
}

void f16_rows4(const uint8_t* const rows[4], const float* xp, int64_t n, int pairs, float* out) {
  if (pairs == 2) return rows4<kF16, 2>(rows, xp, n, out);
  rows4<kF16, 1>(rows, xp, n, out);
}

void bf16_rows4(const uint8_t* const rows[4], const float* xp, int64_t n, int pairs, float* out) {
  if (pairs == 2) return rows4<kBF16, 2>(rows, xp, n, out);
  rows4<kBF16, 1>(rows, xp, n, out);
}

}  // namespace parspec::float_pairs
