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
#include <cstring>
#include <utility>

#include "kernels/float_tiles.h"
#include "kernels/lanes512.h"
#include "kernels/q8_tiles.h"
#include "kernels/q8_tiles_avx512.h"

namespace parspec::q8tiles {
namespace {

// The 8-row kernels for a leftover tile: vpdpbusd on 256 bits (AVX512-VL).
struct DotVnni256 {
  PARSPEC_KERNEL_INLINE static __m256i sum_q4(const __m256i lo[4], const __m256i hi[4],
                                              const int8_t* xq) {
    __m256i s = _mm256_setzero_si256();
    for (int d = 0; d < 4; ++d) {
      s = _mm256_dpbusd_epi32(s, lo[d], broadcast_i32(xq + 4 * d));
      s = _mm256_dpbusd_epi32(s, hi[d], broadcast_i32(xq + 16 + 4 * d));
    }
    return s;
  }
  static constexpr bool kBiasedQ8 = true;
  PARSPEC_KERNEL_INLINE static __m256i sum_q8(const __m256i biased[8], const __m256i[8],
                                              const int8_t* xq) {
    // Σ (w + 128)·x; the tile subtracts 128·Σ x.
    __m256i s = _mm256_setzero_si256();
    for (int g = 0; g < 8; ++g) s = _mm256_dpbusd_epi32(s, biased[g], broadcast_i32(xq + 4 * g));
    return s;
  }
};

PARSPEC_KERNEL_INLINE __m512i join(__m256i lo, __m256i hi) {
  return _mm512_inserti64x4(_mm512_castsi256_si512(lo), hi, 1);
}

// Dwords [offset, offset + 16) of the current block of 16 rows, transposed:
// out[d] lane r = dword d of row r (d = 0..3).
PARSPEC_KERNEL_INLINE void transpose16x4(const uint8_t* const rows[kTileRows16], int64_t offset,
                                         __m512i out[4]) {
  __m256i pairs[4], lo[4], hi[4];
  for (int r = 0; r < 4; ++r) pairs[r] = load_row_pair(rows[r] + offset, rows[r + 4] + offset);
  transpose_8x4(pairs, lo);
  for (int r = 0; r < 4; ++r) pairs[r] = load_row_pair(rows[r + 8] + offset, rows[r + 12] + offset);
  transpose_8x4(pairs, hi);
  for (int d = 0; d < 4; ++d) out[d] = join(lo[d], hi[d]);
}

PARSPEC_KERNEL_INLINE __m512 load_row_scales16(const uint8_t* const rows[kTileRows16], int64_t at) {
  const __m256 lo = load_row_scales(rows, at), hi = load_row_scales(rows + 8, at);
  return _mm512_castpd_ps(_mm512_insertf64x4(
      _mm512_insertf64x4(_mm512_setzero_pd(), _mm256_castps_pd(lo), 0), _mm256_castps_pd(hi), 1));
}

PARSPEC_KERNEL_INLINE void prefetch_next_tile16(const uint8_t* const rows[kTileRows16],
                                                size_t row_stride, int64_t at) {
  const size_t ahead = kTileRows16 * row_stride;
  for (int r = 0; r < kTileRows16; ++r)
    _mm_prefetch(reinterpret_cast<const char*>(rows[r] + at + ahead), _MM_HINT_T0);
}

PARSPEC_KERNEL_INLINE Q4Block16 load_q4_block(const uint8_t* const rows[kTileRows16], int64_t at) {
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

PARSPEC_KERNEL_INLINE Q8Block16 load_q8_block(const uint8_t* const rows[kTileRows16], int64_t at) {
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
  const bool in_registers = with_register_rows(m1 - m0, [&](auto mr) {
    tile16<Block, Load, decltype(mr)::value>(rows, row_stride, nb, act, m0, m1, acc);
  });
  if (!in_registers) tile16<Block, Load, 0>(rows, row_stride, nb, act, m0, m1, acc);
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
    apply_block_pair(k0, k1, act, nb, b, m0, m1, acc);
  }
}

// Full tiles (rows `stride` apart): the rows are four pointers plus
// multiples of 4 strides, so a block loop keeps every address in registers
// (through the rows[] array, 16 pointers spilled and cost more instructions
// than the arithmetic). A row quad holds rows j, 4 + j, 8 + j, 12 + j, 16
// bytes each, one per 128-bit lane.
PARSPEC_KERNEL_INLINE __m512i load_row_quad(const uint8_t* p, size_t s4) {
  return lanes512::load_quad(p, p + s4, p + 2 * s4, p + 3 * s4);
}

// The same offset in the 16 rows of the tile after this one (rows are stored
// back to back, `ahead` = 16 strides).
PARSPEC_KERNEL_INLINE void prefetch_next_quads(const uint8_t* const p[4], size_t s4, size_t ahead) {
  for (int j = 0; j < 4; ++j)
    for (int k = 0; k < 4; ++k)
      _mm_prefetch(reinterpret_cast<const char*>(p[j] + k * s4 + ahead), _MM_HINT_T0);
}

// Lane 4k + j of the result = Σ of the four dwords in 128-bit lane k of z[j].
PARSPEC_KERNEL_INLINE __m512i fold_quads(const __m512i z[4]) {
  const __m512i u0 =
      _mm512_add_epi32(_mm512_unpacklo_epi32(z[0], z[1]), _mm512_unpackhi_epi32(z[0], z[1]));
  const __m512i u1 =
      _mm512_add_epi32(_mm512_unpacklo_epi32(z[2], z[3]), _mm512_unpackhi_epi32(z[2], z[3]));
  return _mm512_add_epi32(_mm512_unpacklo_epi64(u0, u1), _mm512_unpackhi_epi64(u0, u1));
}

PARSPEC_KERNEL_INLINE int load_u16(const uint8_t* p) {
  uint16_t v;
  std::memcpy(&v, p, sizeof(v));
  return v;
}

// The f16 scales of rows 0..15 (row 4k + j at p[j] + k·s4) as floats.
PARSPEC_KERNEL_INLINE __m512 load_quad_scales(const uint8_t* const p[4], size_t s4) {
  uint64_t q[4];
  for (int k = 0; k < 4; ++k) {
    const size_t o = k * s4;
    q[k] = static_cast<uint64_t>(load_u16(p[0] + o)) |
           (static_cast<uint64_t>(load_u16(p[1] + o)) << 16) |
           (static_cast<uint64_t>(load_u16(p[2] + o)) << 32) |
           (static_cast<uint64_t>(load_u16(p[3] + o)) << 48);
  }
  const __m128i lo = _mm_set_epi64x(static_cast<int64_t>(q[1]), static_cast<int64_t>(q[0]));
  const __m128i hi = _mm_set_epi64x(static_cast<int64_t>(q[3]), static_cast<int64_t>(q[2]));
  return _mm512_cvtph_ps(_mm256_inserti128_si256(_mm256_castsi128_si256(lo), hi, 1));
}

// Q4_0 against one activation row with no transposition: in quad j each
// lane holds a block's 32 quants, so the activation's 16 low and 16 high
// quants are one 128-bit broadcast each and vpdpbusd leaves four partial sums
// per row; fold_quads adds them (exact int32: any order gives the contract's
// sum) into lane 4k + j = row 4k + j. About a third of the instructions per
// block of the transposing tile16, which a decode step was bound by.
void tile16_q4_decode(const uint8_t* row0, size_t stride, int64_t nb, const ActView& act, int64_t m,
                      float* acc) {
  const __m512i low_mask = _mm512_set1_epi8(0x0f);
  const size_t s4 = 4 * stride, ahead = 16 * stride;
  const uint8_t* p[4] = {row0, row0 + stride, row0 + 2 * stride, row0 + 3 * stride};
  __m512 sum = _mm512_setzero_ps();
  for (int64_t b = 0; b < nb; ++b) {
    // One prefetch per row every other block (36 bytes < a cache line, so
    // every line of the next tile's rows is requested). Measured against
    // two tiles ahead, _MM_HINT_T1 and none: this is the fastest.
    if ((b & 1) == 0) prefetch_next_quads(p, s4, ahead);
    const int64_t i = m * nb + b;
    const int8_t* xq = act.blocks[i].qs;
    const __m512i xlo =
        _mm512_broadcast_i32x4(_mm_loadu_si128(reinterpret_cast<const __m128i*>(xq)));
    const __m512i xhi =
        _mm512_broadcast_i32x4(_mm_loadu_si128(reinterpret_cast<const __m128i*>(xq + 16)));
    __m512i z[4];
    for (int j = 0; j < 4; ++j) {
      const __m512i q = load_row_quad(p[j] + 2, s4);
      const __m512i lo = _mm512_and_si512(q, low_mask);
      const __m512i hi = _mm512_and_si512(_mm512_srli_epi16(q, 4), low_mask);
      z[j] = _mm512_dpbusd_epi32(_mm512_dpbusd_epi32(_mm512_setzero_si512(), lo, xlo), hi, xhi);
    }
    // Σ (q − 8)·x = Σ q·x − 8·Σ x.
    const __m512i isum = _mm512_add_epi32(fold_quads(z), _mm512_set1_epi32(act.minus_sums8[i]));
    const __m512 scale = _mm512_mul_ps(load_quad_scales(p, s4), _mm512_set1_ps(act.scales[i]));
    sum = _mm512_fmadd_ps(_mm512_cvtepi32_ps(isum), scale, sum);
    for (int j = 0; j < 4; ++j) p[j] += sizeof(BlockQ4_0);
  }
  _mm512_storeu_ps(acc, sum);
}

// The same 16 rows transposed as tile16 wants them (out[d] lane r = dword d
// of row r, d = 0..3), from four row quads: 8 unpacks instead of the 28
// shuffles of transpose16x4.
PARSPEC_KERNEL_INLINE void transpose_quads(const uint8_t* const p[4], size_t s4, int64_t offset,
                                           __m512i out[4]) {
  __m512i z[4];
  for (int j = 0; j < 4; ++j) z[j] = load_row_quad(p[j] + offset, s4);
  lanes512::transpose_quads(z, out);
}

PARSPEC_KERNEL_INLINE Q4Block16 load_q4_quads(const uint8_t* const p[4], size_t s4) {
  const __m512i low_mask = _mm512_set1_epi8(0x0f);
  Q4Block16 k;
  __m512i packed[4];
  transpose_quads(p, s4, 2, packed);
  for (int d = 0; d < 4; ++d) {
    k.lo[d] = _mm512_and_si512(packed[d], low_mask);
    k.hi[d] = _mm512_and_si512(_mm512_srli_epi16(packed[d], 4), low_mask);
  }
  k.dw = load_quad_scales(p, s4);
  return k;
}

PARSPEC_KERNEL_INLINE Q8Block16 load_q8_quads(const uint8_t* const p[4], size_t s4) {
  const __m512i bias = _mm512_set1_epi8(static_cast<char>(0x80));
  Q8Block16 k;
  transpose_quads(p, s4, 2, k.w);
  transpose_quads(p, s4, 18, k.w + 4);
  for (int g = 0; g < 8; ++g) k.w[g] = _mm512_xor_si512(k.w[g], bias);
  k.dw = load_quad_scales(p, s4);
  return k;
}

// tile16 for a full tile (rows `stride` apart) with MR activation rows in
// registers: the same per-lane operations, rows addressed as four pointers
// plus multiples of 4 strides (nothing spills), one prefetch per row per
// cache line's worth of blocks.
template <class Block, Block (*Load)(const uint8_t* const*, size_t), int MR>
void tile16_strided(const uint8_t* row0, size_t stride, int64_t nb, const ActView& act, int64_t m0,
                    float* acc) {
  const size_t s4 = 4 * stride, ahead = 16 * stride;
  const uint8_t* p[4] = {row0, row0 + stride, row0 + 2 * stride, row0 + 3 * stride};
  // Blocks per prefetch: consecutive prefetches of a row stay under 64 bytes apart.
  constexpr int64_t kEvery = 64 / Block::kBytes;
  __m512 regs[MR];
  for (int m = 0; m < MR; ++m) regs[m] = _mm512_setzero_ps();
  for (int64_t b = 0; b < nb; ++b) {
    if (b % kEvery == 0) prefetch_next_quads(p, s4, ahead);
    const Block k = Load(p, s4);
    for (int m = 0; m < MR; ++m) regs[m] = k.apply(act, (m0 + m) * nb + b, regs[m]);
    for (int j = 0; j < 4; ++j) p[j] += Block::kBytes;
  }
  for (int m = 0; m < MR; ++m) _mm512_storeu_ps(acc + m * 16, regs[m]);
}

template <class Block, Block (*Load)(const uint8_t* const*, size_t)>
bool tile16_strided_any(const uint8_t* row0, size_t stride, int64_t nb, const Q8Activations& act,
                        int64_t m0, int64_t m1, float* acc) {
  const ActView view(act);
  return with_register_rows(m1 - m0, [&](auto mr) {
    tile16_strided<Block, Load, decltype(mr)::value>(row0, stride, nb, view, m0, acc);
  });
}

// Rows a full tile's way apart (the last, partial tile repeats its last row).
PARSPEC_KERNEL_INLINE bool rows_regular(const uint8_t* const rows[kTileRows16], size_t stride) {
  for (int r = 1; r < kTileRows16; ++r)
    if (rows[r] != rows[0] + r * stride) return false;
  return true;
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
  if (rows_regular(rows, row_stride)) {
    // A decode step: the quads folded without a transposition (measured
    // with bench/kernel_throughput: 33 -> 41 GB/s in cache; from 2 rows on
    // the fold per activation row costs more than the transposition it saves).
    if (m1 - m0 == 1) return tile16_q4_decode(rows[0], row_stride, nb, ActView(act), m0, acc);
    if (tile16_strided_any<Q4Block16, &load_q4_quads>(rows[0], row_stride, nb, act, m0, m1, acc))
      return;
  }
  tile16_any<Q4Block16, &load_q4_block>(rows, row_stride, nb, act, m0, m1, acc);
}

void tile16_q8_0(const uint8_t* const rows[kTileRows16], size_t row_stride, int64_t nb,
                 const Q8Activations& act, int64_t m0, int64_t m1, float* acc) {
  if (rows_regular(rows, row_stride) &&
      tile16_strided_any<Q8Block16, &load_q8_quads>(rows[0], row_stride, nb, act, m0, m1, acc))
    return;
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
PARSPEC_KERNEL_INLINE __m512 load_weights16(const uint8_t* row, int64_t k) {
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
PARSPEC_KERNEL_INLINE __m512 load_weights16_tail(const uint8_t* row, int64_t k, __mmask16 mask) {
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
// forward further from the bandwidth roofline. (The decode path also tried
// 512 and 2048 bytes, an L2 hint, and an extra L2 prefetch a tile ahead: none
// beat 1 KiB into L1 on the 1B F16 target; docs/performance.md.)
constexpr int64_t kPrefetchBytes = 1024;

PARSPEC_KERNEL_INLINE void prefetch_line(const uint8_t* p) {
  _mm_prefetch(reinterpret_cast<const char*>(p), _MM_HINT_T0);
}

// Weights k..k+15 of R rows × C activation rows (x + c·ldx): one fma each,
// continuing the accumulators a.
template <DType T, int R, int C>
PARSPEC_KERNEL_INLINE void fma_step(const uint8_t* const rows[], const float* x, int64_t ldx,
                                    int64_t k, __m512 (&a)[R][C]) {
  __m512 xv[C];
  for (int c = 0; c < C; ++c) xv[c] = _mm512_loadu_ps(x + c * ldx + k);
  for (int r = 0; r < R; ++r) {
    const __m512 w = load_weights16<T>(rows[r], k);
    for (int c = 0; c < C; ++c) a[r][c] = _mm512_fmadd_ps(w, xv[c], a[r][c]);
  }
}

// The same for the ragged tail k = whole..n-1 (< 16 weights), zero padded.
template <DType T, int R, int C>
PARSPEC_KERNEL_INLINE void fma_tail(const uint8_t* const rows[], const float* x, int64_t ldx,
                                    int64_t whole, int64_t n, __m512 (&a)[R][C]) {
  const auto mask = static_cast<__mmask16>((1u << (n - whole)) - 1);
  __m512 xv[C];
  for (int c = 0; c < C; ++c) xv[c] = _mm512_maskz_loadu_ps(mask, x + c * ldx + whole);
  for (int r = 0; r < R; ++r) {
    const __m512 w = load_weights16_tail<T>(rows[r], whole, mask);
    for (int c = 0; c < C; ++c) a[r][c] = _mm512_fmadd_ps(w, xv[c], a[r][c]);
  }
}

// The column_tile operations (float_tiles.h) on 512-bit registers.
struct Ops512 {
  static constexpr bool kEightRows = true;
  static constexpr int kWidest = 6;

  // All 8 weight rows × C ≤ 3 activation rows (decode and short verification
  // forwards), accumulated in registers and reduced straight into y. The
  // prefetch runs kPrefetchBytes ahead in each row and, past a row's end, on
  // into the same row of the next tile (`next`, unless null): with a fixed
  // distance and no `next`, the first KiB of every row but one (a quarter of
  // a 2048-wide F16 row) was left to the hardware prefetcher, and a
  // one-token forward of the 1B F16 target ran at ~24 GB/s where one core
  // streams ~35.
  template <DType T, int C>  // (not inlined: one function to profile per C)
  [[gnu::noinline]] static void eight_rows(const uint8_t* const rows[], const uint8_t* const next[],
                                           int valid, int64_t n, const float* x, float* y,
                                           int64_t ldy) {
    constexpr int R = kTileRows;
    constexpr int64_t kBytes = T == DType::F32 ? 4 : 2;  // per weight
    constexpr int64_t kLine = 64 / kBytes;               // weights per cache line
    // Zeros the compiler cannot see: with constant zeros GCC zeroed a[][] in
    // memory (rep stos) on every tile.
    __m512 zero = _mm512_setzero_ps();
    asm("" : "+v"(zero));
    __m512 a[R][C];
    for (int r = 0; r < R; ++r)
      for (int c = 0; c < C; ++c) a[r][c] = zero;
    const int64_t whole = n & ~int64_t{15};
    const int64_t row_bytes = n * kBytes;
    // At most a tile ahead: the same offset in the next tile's row.
    const int64_t ahead = std::min(kPrefetchBytes, row_bytes);
    // From this k on (a whole line) the prefetch lies past the row's end.
    const int64_t own = (row_bytes - ahead + 63) / 64 * kLine;
    for (int64_t k = 0; k < whole; k += 16) {
      if (k % kLine == 0) {  // once per cache line of each row
        const bool in_row = k < own;
        const uint8_t* const* prefetched = in_row ? rows : next;
        if (prefetched != nullptr) {
          const int64_t at = kBytes * k + (in_row ? ahead : ahead - row_bytes);
          for (int r = 0; r < R; ++r) prefetch_line(prefetched[r] + at);
        }
      }
      fma_step<T, R, C>(rows, x, n, k, a);
    }
    if (whole < n) fma_tail<T, R, C>(rows, x, n, whole, n, a);
    for (int c = 0; c < C; ++c) {
      float out[R];  // all R (constant indices keep a[][] in registers)
      for (int r = 0; r < R; ++r) {
        const __m512 v = a[r][c];
        const __m256 lo = _mm512_castps512_ps256(v);
        const __m256 hi = _mm256_castpd_ps(_mm512_extractf64x4_pd(_mm512_castps_pd(v), 1));
        out[r] = reduce8(_mm256_add_ps(lo, hi));
      }
      std::memcpy(y + c * ldy, out, static_cast<size_t>(valid) * sizeof(float));
    }
  }

  template <DType T, int C, bool Prefetch>
  static void block(const uint8_t* const rows[], const uint8_t* const ahead[], int64_t n,
                    const float* x, int64_t ldx, float* acc) {
    constexpr int R = 4;  // weight rows
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
      fma_step<T, R, C>(rows, x, ldx, k, a);
    }
    if (whole < n) fma_tail<T, R, C>(rows, x, ldx, whole, n, a);
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
