#pragma once
// The Q4_0 and Q8_0 tile kernels of matmul.cpp. They are written once over the
// step that sums four u8 × s8 products per int32 lane, and compiled twice:
// with AVX2 (maddubs + madd) in matmul.cpp and with AVX-VNNI (vpdpbusd) in
// matmul_vnni.cpp, chosen at run time. Both steps yield the same exact int32
// sums (the AVX2 int16 intermediates never saturate, see the bounds below), so
// the two builds are bit-identical and batch invariance is unaffected.
//
// Everything here has internal linkage: each translation unit keeps its own
// copy, compiled with its own instruction set.
#include <immintrin.h>

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <vector>

#include "core/worker.h"
#include "kernels/quant.h"
#include "kernels/repack.h"

// The kernels' helpers are always inlined: GCC stops inlining once a
// translation unit grows past its budget, and a called transpose or block
// load halves a kernel's speed (measured: Q8_0 decode 45 -> 26 GB/s).
#define PARSPEC_KERNEL_INLINE inline __attribute__((always_inline))

namespace parspec::q8tiles {

constexpr int kTileRows = 8;  // output rows per tile, one per SIMD lane in the Q8_0/Q4_0 kernels

// Activation rows quantized to Q8_0, with per-block values the kernels need.
struct Q8Activations {
  int64_t blocks_per_row = 0;
  std::vector<BlockQ8_0> blocks;  // rows × blocks_per_row
  std::vector<float> scales;      // f32 value of each block's f16 scale
  std::vector<int32_t> sums8;     // 8 × Σ quants of each block (Q4_0 offset correction)
  // −8 × Σ quants and −128 × Σ quants: where the AVX-512 tiles start each
  // block's Q4_0 / biased Q8_0 integer sum, instead of subtracting at the end.
  std::vector<int32_t> minus_sums8, minus_sums128;
  // The same rows in pairs (2p, 2p + 1; an odd last row paired with itself),
  // for the AVX-512 repacked tiles of kMinPairRows..kMaxRegisterRows rows: each
  // block's quants interleaved by dword (4 bytes of row 2p, then 4 of 2p + 1),
  // its two scales and −8·Σ quants side by side, so one 64-bit broadcast
  // feeds both rows. Filled only where wanted (pair_blocks empty otherwise).
  std::vector<int8_t> pair_blocks;        // [pair][block][64]
  std::vector<float> pair_scales;         // [pair][block][2]
  std::vector<int32_t> pair_minus_sums8;  // [pair][block][2]
};

// Quantizes M activation rows of n_in values into `out` (resized to fit): each
// row's blocks as quantize_row(DType::Q8_0) writes them, each block's scale and
// sums, and with `pairs` the pair layout too; on as many of the worker's
// threads as the work is worth, with the active ISA's build (same bytes).
void quantize_activations(Worker& worker, const float* x, int64_t M, int64_t n_in, bool pairs,
                          Q8Activations& out);

// Quantizes activation rows [row0, row1) of x (M rows of n_in) into `out`,
// whose arrays the caller has sized for all M rows: each row's blocks as
// quantize_row(DType::Q8_0) writes them, and each block's scale and sums.
// With `pairs` (row0 even) also the pair layout of the pairs those rows make,
// an odd last row (row1 == M) paired with itself. The AVX2 build (matmul.cpp)
// and the AVX-512 one (activations_avx512.cpp) write the same bytes.
void quantize_activation_rows_avx2(const float* x, int64_t n_in, int64_t M, int64_t row0,
                                   int64_t row1, bool pairs, Q8Activations& out);
void quantize_activation_rows_avx512(const float* x, int64_t n_in, int64_t M, int64_t row0,
                                     int64_t row1, bool pairs, Q8Activations& out);

// What both builds share: quantize_block(x, block) quantizes 32 values into
// block (d and qs) and returns the sum of its quants.
template <class QuantizeBlock>
PARSPEC_KERNEL_INLINE void quantize_activation_rows(const float* x, int64_t n_in, int64_t M,
                                                    int64_t row0, int64_t row1, bool pairs,
                                                    Q8Activations& out,
                                                    QuantizeBlock quantize_block) {
  const int64_t nb = n_in / kQK;
  for (int64_t m = row0; m < row1; ++m) {
    for (int64_t b = 0; b < nb; ++b) {
      const int64_t i = m * nb + b;
      const int32_t sum = quantize_block(x + m * n_in + b * kQK, out.blocks[i]);
      out.scales[i] = _cvtsh_ss(out.blocks[i].d);  // = fp16_to_fp32 (QuantFp16 tests)
      out.sums8[i] = 8 * sum;
      out.minus_sums8[i] = -8 * sum;
      out.minus_sums128[i] = -128 * sum;
    }
  }
  if (!pairs) return;
  for (int64_t p = row0 / 2; p < (row1 + 1) / 2; ++p) {
    const int64_t rows[2] = {2 * p, std::min(2 * p + 1, M - 1)};
    for (int64_t b = 0; b < nb; ++b) {
      const int64_t i0 = rows[0] * nb + b, i1 = rows[1] * nb + b;
      const __m256i a = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(out.blocks[i0].qs));
      const __m256i c = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(out.blocks[i1].qs));
      // Dwords a0 c0 a1 c1 | a4 c4 a5 c5 and a2 c2 a3 c3 | a6 c6 a7 c7, then in order.
      const __m256i lo = _mm256_unpacklo_epi32(a, c), hi = _mm256_unpackhi_epi32(a, c);
      auto* dst = reinterpret_cast<__m256i*>(out.pair_blocks.data() + (p * nb + b) * 64);
      _mm256_storeu_si256(dst, _mm256_permute2x128_si256(lo, hi, 0x20));
      _mm256_storeu_si256(dst + 1, _mm256_permute2x128_si256(lo, hi, 0x31));
      const int64_t j = (p * nb + b) * 2;
      out.pair_scales[j] = out.scales[i0];
      out.pair_scales[j + 1] = out.scales[i1];
      out.pair_minus_sums8[j] = out.minus_sums8[i0];
      out.pair_minus_sums8[j + 1] = out.minus_sums8[i1];
    }
  }
}

// A tile of 8 weight rows (row pointers; rows past the end repeat a valid row)
// against activation rows [m0, m1): acc[(m - m0) * 8 + r] = result for row r.
using TileKernel = void (*)(const uint8_t* const rows[kTileRows], size_t row_stride, int64_t nb,
                            const Q8Activations& act, int64_t m0, int64_t m1, float* acc);

// The same over 16 weight rows (two tiles): acc[(m - m0) * 16 + r].
constexpr int kTileRows16 = 2 * kTileRows;
using TileKernel16 = void (*)(const uint8_t* const rows[kTileRows16], size_t row_stride, int64_t nb,
                              const Q8Activations& act, int64_t m0, int64_t m1, float* acc);

// And over 32 weight rows (four tiles), for batches of more than kMaxRegisterRows
// activation rows: acc[(m - m0) * 32 + r].
constexpr int kTileRows32 = 4 * kTileRows;
constexpr int64_t kMaxRegisterRows =
    8;  // the 16-row kernels keep up to this many rows in registers
// From this many activation rows on (up to kMaxRegisterRows) matmul_many lays
// them out in pairs for the AVX-512 repacked tiles (measured: M = 8 +11% in
// cache; M = 2-5 as fast or slower than one row per register).
constexpr int64_t kMinPairRows = 6;
using TileKernel32 = void (*)(const uint8_t* const rows[kTileRows32], size_t row_stride, int64_t nb,
                              const Q8Activations& act, int64_t m0, int64_t m1, float* acc);

// A group of 16 Q4_0 or Q8_0 rows repacked at load (kernels/repack.h) against
// activation rows [m0, m1): acc[(m - m0) * 16 + r].
using PackedKernel = void (*)(const uint8_t* group, int64_t nb, const Q8Activations& act,
                              int64_t m0, int64_t m1, float* acc);
// Two such groups at once (32 rows), for batches of more than kMaxRegisterRows
// activation rows: acc[(m - m0) * 32 + r], group0's rows first.
using PackedKernel32 = void (*)(const uint8_t* group0, const uint8_t* group1, int64_t nb,
                                const Q8Activations& act, int64_t m0, int64_t m1, float* acc);

struct TileKernels {
  TileKernel q4_0 = nullptr;
  TileKernel q8_0 = nullptr;
  TileKernel16 q4_0_16 = nullptr;  // null: no 16-row kernels, tiles go one by one
  TileKernel16 q8_0_16 = nullptr;
  TileKernel32 q4_0_32 = nullptr;  // null: no 32-row kernels
  TileKernel32 q8_0_32 = nullptr;
};

// The kernels of repacked Q4_0 and Q8_0 groups: a table of their own beside
// the row-major tiles'.
struct PackedKernels {
  PackedKernel q4_0 = nullptr;       // every ISA has one
  PackedKernel32 q4_0_32 = nullptr;  // null: groups go one by one
  PackedKernel q8_0 = nullptr;       // every ISA has one
  PackedKernel32 q8_0_32 = nullptr;  // null: groups go one by one
  // The row-major rows after the last group.
  TileKernel rows_q4_0 = nullptr, rows_q8_0 = nullptr;
};

// The AVX-VNNI build (matmul_vnni.cpp); call only where the CPU has AVX-VNNI.
TileKernels vnni_tile_kernels();
PackedKernels vnni_packed_kernels();
// The AVX-512 F/BW/VL/VNNI build (matmul_avx512.cpp, matmul_packed_avx512.cpp);
// only where the CPU has those.
TileKernels avx512_tile_kernels();
PackedKernels avx512_packed_kernels();

static PARSPEC_KERNEL_INLINE __m256i broadcast_i32(const int8_t* p) {
  int32_t v;
  std::memcpy(&v, p, sizeof(v));
  return _mm256_set1_epi32(v);
}

// Transposes four 256-bit rows-pairs [r | r+4] (r = 0..3) of four dwords per
// 128-bit half so that out[d] holds dword d of rows 0..7, lane = row.
static PARSPEC_KERNEL_INLINE void transpose_8x4(const __m256i in[4], __m256i out[4]) {
  const __m256i t0 = _mm256_unpacklo_epi32(in[0], in[1]);
  const __m256i t1 = _mm256_unpackhi_epi32(in[0], in[1]);
  const __m256i t2 = _mm256_unpacklo_epi32(in[2], in[3]);
  const __m256i t3 = _mm256_unpackhi_epi32(in[2], in[3]);
  out[0] = _mm256_unpacklo_epi64(t0, t2);
  out[1] = _mm256_unpackhi_epi64(t0, t2);
  out[2] = _mm256_unpacklo_epi64(t1, t3);
  out[3] = _mm256_unpackhi_epi64(t1, t3);
}

static PARSPEC_KERNEL_INLINE __m256i load_row_pair(const uint8_t* lo, const uint8_t* hi) {
  const __m128i a = _mm_loadu_si128(reinterpret_cast<const __m128i*>(lo));
  const __m128i b = _mm_loadu_si128(reinterpret_cast<const __m128i*>(hi));
  return _mm256_inserti128_si256(_mm256_castsi128_si256(a), b, 1);
}

// Prefetches block `at` of the same rows in the next tile (rows are stored
// back to back, so that is kTileRows row strides ahead): while this tile
// computes, the next one streams in. Measured: cold-cache Q4_0 single-row
// throughput 7 -> 10+ GB/s.
static PARSPEC_KERNEL_INLINE void prefetch_next_tile(const uint8_t* const rows[kTileRows],
                                                     size_t row_stride, int64_t at) {
  const size_t ahead = kTileRows * row_stride;
  for (int r = 0; r < kTileRows; ++r) {
    _mm_prefetch(reinterpret_cast<const char*>(rows[r] + at + ahead), _MM_HINT_T0);
  }
}

// f32 values of the f16 scales at offset `at` of the 8 rows. Scalar loads
// packed into one vector: as fast as a gather here, and gathers are slow on
// CPUs with the gather-data-sampling microcode fix.
static PARSPEC_KERNEL_INLINE __m256 load_row_scales(const uint8_t* const rows[kTileRows],
                                                    int64_t at) {
  uint64_t lo = 0, hi = 0;
  for (int r = 0; r < 4; ++r) {
    uint16_t a, b;
    std::memcpy(&a, rows[r] + at, sizeof(a));
    std::memcpy(&b, rows[r + 4] + at, sizeof(b));
    lo |= static_cast<uint64_t>(a) << (16 * r);
    hi |= static_cast<uint64_t>(b) << (16 * r);
  }
  return _mm256_cvtph_ps(_mm_set_epi64x(static_cast<int64_t>(hi), static_cast<int64_t>(lo)));
}

// Bytes ahead of the block in use that a repacked group's stream is
// prefetched: far enough that a kernel slowed by a batch's activation rows
// still has its lines in flight (measured on Zen 5, 1B Q4_0 at 1 and 2
// threads: 2-16 KiB alike for decode, L(4) 15 -> 12 ms from 2 to 8 KiB; the
// hardware prefetcher alone left a batch of 8 at half the in-cache speed).
constexpr int64_t kPackedPrefetchBytes = 8192;

// Prefetches, kPackedPrefetchBytes ahead, the lines of a repacked group
// that block b reads (its scales' line and its quant lines); past the
// group's end the stream goes on into the next group, which is the next one
// a thread computes. (The whole line range from the block's scales would miss
// the second block of a pair, whose quants lie past its partner's.)
// Hint: _MM_HINT_T0, or _MM_HINT_NTA in the AVX-512 kernels where one
// activation row is all the kernel keeps beside the stream (decode) and the
// CPU gains by it (decode_prefetch_nta(), kernels/isa.h): the weights, read
// once per forward, then leave L2 and L3 to what is used again (activations,
// the KV cache, the serial steps' buffers; the likely reason, not verified).
// With more rows the activations can outgrow L1, and lines prefetched past L2
// could be gone before they are used.
template <_mm_hint Hint = _MM_HINT_T0>
static PARSPEC_KERNEL_INLINE void prefetch_packed_block(const repack::Group& group, int64_t b) {
  _mm_prefetch(reinterpret_cast<const char*>(group.scales(b) + kPackedPrefetchBytes), Hint);
  const uint8_t* quants = group.quants(b) + kPackedPrefetchBytes;
  for (int64_t line = 0; line < group.quant_bytes; line += 64)
    _mm_prefetch(reinterpret_cast<const char*>(quants + line), Hint);
}

// f32 values of 8 contiguous f16 scales (a repacked group's, kernels/repack.h).
static PARSPEC_KERNEL_INLINE __m256 load_packed_scales(const uint8_t* scales) {
  return _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(scales)));
}

// Dot supplies the integer sums of one block, per lane (= weight row):
//   Dot::sum_q4(lo, hi, xq): Σ q·x, lo[d]/hi[d] holding Q4_0 quants 4d.. / 16+4d.. as 0..15;
//   Dot::sum_q8(u, w, xq): with Dot::kBiasedQ8 false, Σ w·x from u = |w| and the signed
//   quants w; with it true, Σ (w + 128)·x from u = w + 128 as unsigned bytes (one u8 × s8
//   instruction per four bytes, no per-row sign fix-up), and the tile subtracts 128·Σ x.
// One block of 8 weight rows, ready to apply to any activation row:
// acc = fma(float(isum), dw·dx, acc), per lane.
template <class Dot>
struct Q4Block {
  static constexpr int64_t kBytes = sizeof(BlockQ4_0);
  static constexpr int64_t kQuantBytes = repack::quant_bytes(DType::Q4_0);
  // Lane r of lo[d] holds elements 4d..4d+3 of row r, hi[d] elements 16+4d..16+4d+3, as 0..15.
  __m256i lo[4], hi[4];
  __m256 dw;
  PARSPEC_KERNEL_INLINE static Q4Block load(const uint8_t* const rows[kTileRows], int64_t at) {
    const __m256i low_mask = _mm256_set1_epi8(0x0f);
    Q4Block k;
    __m256i pairs[4], packed[4];
    for (int r = 0; r < 4; ++r) pairs[r] = load_row_pair(rows[r] + at + 2, rows[r + 4] + at + 2);
    transpose_8x4(pairs, packed);
    for (int d = 0; d < 4; ++d) {
      k.lo[d] = _mm256_and_si256(packed[d], low_mask);
      k.hi[d] = _mm256_and_si256(_mm256_srli_epi16(packed[d], 4), low_mask);
    }
    k.dw = load_row_scales(rows, at);
    return k;
  }
  // From a repacked group (kernels/repack.h): half `part` (rows 8·part..8·part+7) of block b.
  PARSPEC_KERNEL_INLINE static Q4Block load_packed(const repack::Group& group, int64_t b,
                                                   int part) {
    const __m256i low_mask = _mm256_set1_epi8(0x0f);
    const uint8_t* quants = group.quants(b) + 32 * part;
    Q4Block k;
    for (int d = 0; d < 4; ++d) {
      const __m256i packed = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(quants + 64 * d));
      k.lo[d] = _mm256_and_si256(packed, low_mask);
      k.hi[d] = _mm256_and_si256(_mm256_srli_epi16(packed, 4), low_mask);
    }
    k.dw = load_packed_scales(group.scales(b) + 16 * part);
    return k;
  }
  PARSPEC_KERNEL_INLINE __m256 apply(const Q8Activations& act, int64_t i, __m256 acc) const {
    // Σ (q − 8)·x = Σ q·x − 8·Σ x.
    const __m256i isum =
        _mm256_sub_epi32(Dot::sum_q4(lo, hi, act.blocks[i].qs), _mm256_set1_epi32(act.sums8[i]));
    const __m256 scale = _mm256_mul_ps(dw, _mm256_set1_ps(act.scales[i]));
    return _mm256_fmadd_ps(_mm256_cvtepi32_ps(isum), scale, acc);
  }
};

template <class Dot>
struct Q8Block {
  static constexpr int64_t kBytes = sizeof(BlockQ8_0);
  static constexpr int64_t kQuantBytes = repack::quant_bytes(DType::Q8_0);
  // Lane r of w[g] holds elements 4g..4g+3 of row r; u[g] is |w| or w + 128 (Dot::kBiasedQ8).
  __m256i w[8], u[8];
  __m256 dw;
  PARSPEC_KERNEL_INLINE static Q8Block load(const uint8_t* const rows[kTileRows], int64_t at) {
    Q8Block k;
    __m256i pairs[4];
    for (int r = 0; r < 4; ++r) pairs[r] = load_row_pair(rows[r] + at + 2, rows[r + 4] + at + 2);
    transpose_8x4(pairs, k.w);
    for (int r = 0; r < 4; ++r) pairs[r] = load_row_pair(rows[r] + at + 18, rows[r + 4] + at + 18);
    transpose_8x4(pairs, k.w + 4);
    for (int g = 0; g < 8; ++g) {
      k.u[g] = Dot::kBiasedQ8 ? _mm256_xor_si256(k.w[g], _mm256_set1_epi8(-128))
                              : _mm256_abs_epi8(k.w[g]);
    }
    k.dw = load_row_scales(rows, at);
    return k;
  }
  // From a repacked group (kernels/repack.h): half `part` (rows 8·part..8·part+7) of block b.
  PARSPEC_KERNEL_INLINE static Q8Block load_packed(const repack::Group& group, int64_t b,
                                                   int part) {
    const uint8_t* quants = group.quants(b) + 32 * part;
    Q8Block k;
    for (int g = 0; g < 8; ++g) {
      k.w[g] = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(quants + 64 * g));
      k.u[g] = Dot::kBiasedQ8 ? _mm256_xor_si256(k.w[g], _mm256_set1_epi8(-128))
                              : _mm256_abs_epi8(k.w[g]);
    }
    k.dw = load_packed_scales(group.scales(b) + 16 * part);
    return k;
  }
  PARSPEC_KERNEL_INLINE __m256 apply(const Q8Activations& act, int64_t i, __m256 acc) const {
    __m256i isum = Dot::sum_q8(u, w, act.blocks[i].qs);
    // sums8 = 8·Σ x, so 128·Σ x = 16·sums8.
    if (Dot::kBiasedQ8) isum = _mm256_sub_epi32(isum, _mm256_set1_epi32(16 * act.sums8[i]));
    const __m256 scale = _mm256_mul_ps(dw, _mm256_set1_ps(act.scales[i]));
    return _mm256_fmadd_ps(_mm256_cvtepi32_ps(isum), scale, acc);
  }
};

// MR > 0: exactly MR activation rows, accumulated in registers (a decode step
// or a short chain; through memory every block would wait on a store-to-load
// forward). MR = 0: any number, accumulated in acc. Same operations per lane
// either way.
template <class Block, int MR>
static void tile_rows_of(const uint8_t* const rows[kTileRows], size_t row_stride, int64_t nb,
                         const Q8Activations& act, int64_t m0, int64_t m1, float* acc) {
  __m256 regs[MR > 0 ? MR : 1];
  for (int j = 0; j < MR; ++j) regs[j] = _mm256_setzero_ps();
  if (MR == 0)
    for (int64_t m = m0; m < m1; ++m) _mm256_storeu_ps(acc + (m - m0) * 8, _mm256_setzero_ps());
  for (int64_t b = 0; b < nb; ++b) {
    const int64_t at = b * Block::kBytes;
    prefetch_next_tile(rows, row_stride, at);
    const Block k = Block::load(rows, at);
    if constexpr (MR > 0) {
      for (int j = 0; j < MR; ++j) regs[j] = k.apply(act, (m0 + j) * nb + b, regs[j]);
    } else {
      for (int64_t m = m0; m < m1; ++m) {
        float* a = acc + (m - m0) * 8;
        _mm256_storeu_ps(a, k.apply(act, m * nb + b, _mm256_loadu_ps(a)));
      }
    }
  }
  for (int j = 0; j < MR; ++j) _mm256_storeu_ps(acc + j * 8, regs[j]);
}

// The same over a repacked group of 16 rows (kernels/repack.h): one sequential
// stream, each block's two halves of 8 lanes (rows 0-7, 8-15) read from the
// same 64-byte lines; acc rows are 16 wide. A loop of its own, not one shared
// with tile_rows_of: sharing even an inlined helper changed the code the
// compiler emits for the row-major Q8_0 tiles, which must stay as they were.
template <class Block, int MR>
static void packed_rows_of(const uint8_t* group, int64_t nb, const Q8Activations& act, int64_t m0,
                           int64_t m1, float* acc) {
  constexpr int64_t kWidth = 2 * kTileRows;
  const repack::Group g{group, nb, Block::kQuantBytes};
  __m256 regs[2][MR > 0 ? MR : 1];
  for (int p = 0; p < 2; ++p)
    for (int j = 0; j < MR; ++j) regs[p][j] = _mm256_setzero_ps();
  if (MR == 0)
    for (int64_t m = m0; m < m1; ++m)
      for (int p = 0; p < 2; ++p)
        _mm256_storeu_ps(acc + (m - m0) * kWidth + 8 * p, _mm256_setzero_ps());
  for (int64_t b = 0; b < nb; ++b) {
    prefetch_packed_block(g, b);
    for (int p = 0; p < 2; ++p) {
      const Block k = Block::load_packed(g, b, p);
      if constexpr (MR > 0) {
        for (int j = 0; j < MR; ++j) regs[p][j] = k.apply(act, (m0 + j) * nb + b, regs[p][j]);
      } else {
        for (int64_t m = m0; m < m1; ++m) {
          float* a = acc + (m - m0) * kWidth + 8 * p;
          _mm256_storeu_ps(a, k.apply(act, m * nb + b, _mm256_loadu_ps(a)));
        }
      }
    }
  }
  for (int j = 0; j < MR; ++j)
    for (int p = 0; p < 2; ++p) _mm256_storeu_ps(acc + j * kWidth + 8 * p, regs[p][j]);
}

template <class Block>
static void tile_any(const uint8_t* const rows[kTileRows], size_t row_stride, int64_t nb,
                     const Q8Activations& act, int64_t m0, int64_t m1, float* acc) {
  switch (m1 - m0) {
    case 1:
      return tile_rows_of<Block, 1>(rows, row_stride, nb, act, m0, m1, acc);
    case 2:
      return tile_rows_of<Block, 2>(rows, row_stride, nb, act, m0, m1, acc);
    case 3:
      return tile_rows_of<Block, 3>(rows, row_stride, nb, act, m0, m1, acc);
    case 4:
      return tile_rows_of<Block, 4>(rows, row_stride, nb, act, m0, m1, acc);
    default:
      return tile_rows_of<Block, 0>(rows, row_stride, nb, act, m0, m1, acc);
  }
}

template <class Block>
static void packed_any(const uint8_t* group, int64_t nb, const Q8Activations& act, int64_t m0,
                       int64_t m1, float* acc) {
  switch (m1 - m0) {
    case 1:
      return packed_rows_of<Block, 1>(group, nb, act, m0, m1, acc);
    case 2:
      return packed_rows_of<Block, 2>(group, nb, act, m0, m1, acc);
    case 3:
      return packed_rows_of<Block, 3>(group, nb, act, m0, m1, acc);
    case 4:
      return packed_rows_of<Block, 4>(group, nb, act, m0, m1, acc);
    default:
      return packed_rows_of<Block, 0>(group, nb, act, m0, m1, acc);
  }
}

template <class Dot>
static void packed_q4_0(const uint8_t* group, int64_t nb, const Q8Activations& act, int64_t m0,
                        int64_t m1, float* acc) {
  packed_any<Q4Block<Dot>>(group, nb, act, m0, m1, acc);
}

template <class Dot>
static void packed_q8_0(const uint8_t* group, int64_t nb, const Q8Activations& act, int64_t m0,
                        int64_t m1, float* acc) {
  packed_any<Q8Block<Dot>>(group, nb, act, m0, m1, acc);
}

template <class Dot>
static void tile_q4_0(const uint8_t* const rows[kTileRows], size_t row_stride, int64_t nb,
                      const Q8Activations& act, int64_t m0, int64_t m1, float* acc) {
  tile_any<Q4Block<Dot>>(rows, row_stride, nb, act, m0, m1, acc);
}

template <class Dot>
static void tile_q8_0(const uint8_t* const rows[kTileRows], size_t row_stride, int64_t nb,
                      const Q8Activations& act, int64_t m0, int64_t m1, float* acc) {
  tile_any<Q8Block<Dot>>(rows, row_stride, nb, act, m0, m1, acc);
}

}  // namespace parspec::q8tiles
