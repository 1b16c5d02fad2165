// Batched matmul y = x · Wᵀ for every weight type.
//
// Numerics (the definition every code path follows exactly, which is what
// makes results batch invariant):
// - Q8_0/Q4_0 weights: each activation row is quantized to Q8_0 on its own.
//   For output (m, o): acc = 0; for each block b in order,
//   acc = fma(float(isum_b), dw_b * dx_b, acc), where isum_b is the exact
//   integer dot product of the block's quants (Q4_0 quants minus 8) and
//   dw_b, dx_b are the f32 values of the f16 block scales. Every kernel
//   computes exactly this per SIMD lane, so tile shape, M, the other rows and
//   the thread count cannot change a bit.
// - F32/F16/BF16 weights: f32 activations; a 16-lane accumulator where lane j
//   sums k ≡ j (mod 16) with fma in k order (the ragged tail as one
//   zero-padded step), lanes 0-7 + lanes 8-15, then one fixed horizontal
//   reduction (float_tiles.h).
// - Q4_K/Q6_K weights: activations quantized per row to Q8_K; per super-block
//   exact int32 sums (scaled quants · x, and the min/bias terms), combined in
//   f32 in super-block order with fixed expressions: the same ones
//   dot_q4_K_q8_K / dot_q6_K_q8_K evaluate (bit-identical today), but 8 rows
//   (AVX2, AVX-VNNI) or 16 (AVX-512, kernels/k_tiles.h) and a batch of
//   activations at a time.
// Threads split the output rows in tiles of 8 (a repacked Q4_0/Q8_0/Q4_K/Q6_K matrix,
// kernels/repack.h: in groups of 16 first); a dot product is never split.
#include "kernels/matmul.h"

#include <immintrin.h>

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <vector>

#include "core/error.h"
#include "kernels/float_tiles.h"
#include "kernels/isa.h"
#include "kernels/k_tiles.h"
#include "kernels/kquants.h"
#include "kernels/q8_tiles.h"
#include "kernels/repack.h"

namespace parspec {

namespace {

using q8tiles::broadcast_i32;
using q8tiles::kTileRows;
using q8tiles::load_row_pair;
using q8tiles::prefetch_next_tile;
using q8tiles::Q8Activations;
using q8tiles::transpose_8x4;
constexpr int64_t kChunkRows = 64;  // activation rows applied per pass over a weight tile

// ------------------------------------------------------------ activations ----

// One thread's cost of a Q8_0 activation element (quantized, with its block's
// sums and pair layout), for the thread count: measured 0.27 ns with AVX-512
// and 0.39 with AVX2 on Zen 5 (the AVX2 build as fast as the code before it).
constexpr double kQuantizeQ8_0NsPerElement = 0.35;

// Quantizes Q8_K activation rows on as many threads as their size is worth
// (~1 ns per element on one thread, measured).
template <class Body>
void parallel_rows(Worker& worker, int64_t M, int64_t n_in, const Body& body) {
  const int threads = worker.threads_for(static_cast<double>(M * n_in));
  worker.parallel_chunks(M, std::max<int64_t>(1, M / (4 * threads)), threads, body);
}

}  // namespace

void q8tiles::quantize_activation_rows_avx2(const float* x, int64_t n_in, int64_t M, int64_t row0,
                                            int64_t row1, bool pairs, Q8Activations& out) {
  q8tiles::quantize_activation_rows(x, n_in, M, row0, row1, pairs, out, quantize_block_q8_0);
}

void q8tiles::quantize_activations(Worker& worker, const float* x, int64_t M, int64_t n_in,
                                   bool pairs, Q8Activations& out) {
  const int64_t nb = n_in / kQK, blocks = M * nb;
  out.blocks_per_row = nb;
  out.blocks.resize(static_cast<size_t>(blocks));
  out.scales.resize(static_cast<size_t>(blocks));
  out.sums8.resize(static_cast<size_t>(blocks));
  out.minus_sums8.resize(static_cast<size_t>(blocks));
  out.minus_sums128.resize(static_cast<size_t>(blocks));
  const int64_t pair_blocks = pairs ? (M + 1) / 2 * nb : 0;
  out.pair_blocks.resize(static_cast<size_t>(pair_blocks * 64));
  out.pair_scales.resize(static_cast<size_t>(pair_blocks * 2));
  out.pair_minus_sums8.resize(static_cast<size_t>(pair_blocks * 2));
  const auto rows = active_isa() == Isa::kAvx512 ? &q8tiles::quantize_activation_rows_avx512
                                                 : &q8tiles::quantize_activation_rows_avx2;
  // Units of one row, or of a pair where the pair layout is wanted.
  const int64_t unit = pairs ? 2 : 1, units = (M + unit - 1) / unit;
  const int threads = worker.threads_for(kQuantizeQ8_0NsPerElement * static_cast<double>(M * n_in));
  worker.parallel_chunks(units, std::max<int64_t>(1, units / (4 * threads)), threads,
                         [&](int64_t u0, int64_t u1) {
                           rows(x, n_in, M, u0 * unit, std::min(M, u1 * unit), pairs, out);
                         });
}

namespace {

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

// The kernel table of the ISA in use (kernels/isa.h), one argument per ISA.
template <class Table>
const Table& for_active_isa(const Table& avx2, const Table& vnni, const Table& avx512) {
  switch (active_isa()) {
    case Isa::kAvxVnni:
      return vnni;
    case Isa::kAvx512:
      return avx512;
    case Isa::kAvx2:
      break;
  }
  return avx2;
}

// The tile kernels of the ISA in use (kernels/isa.h).
const q8tiles::TileKernels& active_tiles() {
  static const q8tiles::TileKernels vnni =
      cpu_supports(Isa::kAvxVnni) ? q8tiles::vnni_tile_kernels() : q8tiles::TileKernels{};
  static const q8tiles::TileKernels avx512 =
      cpu_supports(Isa::kAvx512) ? q8tiles::avx512_tile_kernels() : q8tiles::TileKernels{};
  return for_active_isa(kAvx2Tiles, vnni, avx512);
}

// The repacked Q4_0/Q8_0 kernels of the ISA in use, with its row-major 8-row
// tiles for the rows after the last group. Not through active_tiles(): a
// second caller changed how the compiler inlines it into the Q8_0 driver.
const q8tiles::PackedKernels& active_packed() {
  auto with_rows = [](q8tiles::PackedKernels k, const q8tiles::TileKernels& tiles) {
    k.rows_q4_0 = tiles.q4_0;
    k.rows_q8_0 = tiles.q8_0;
    return k;
  };
  static const q8tiles::PackedKernels vnni =
      cpu_supports(Isa::kAvxVnni)
          ? with_rows(q8tiles::vnni_packed_kernels(), q8tiles::vnni_tile_kernels())
          : q8tiles::PackedKernels{};
  static const q8tiles::PackedKernels avx512 =
      cpu_supports(Isa::kAvx512)
          ? with_rows(q8tiles::avx512_packed_kernels(), q8tiles::avx512_tile_kernels())
          : q8tiles::PackedKernels{};
  return for_active_isa(kAvx2Packed, vnni, avx512);
}

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

void quantize_activations_q8_K(Worker& worker, const float* x, int64_t M, int64_t n_in,
                               K8Activations& out) {
  const int64_t nb = n_in / kQKK;
  out.blocks_per_row = nb;
  out.blocks.resize(static_cast<size_t>(M * nb));
  out.min_pairs.resize(static_cast<size_t>(M * nb * 4));
  auto quantize_rows = [&](int64_t begin, int64_t end) {
    for (int64_t m = begin; m < end; ++m) {
      BlockQ8_K* blocks = out.blocks.data() + m * nb;
      quantize_row_q8_K(x + m * n_in, blocks, n_in);
      for (int64_t b = 0; b < nb; ++b) {
        int32_t* pairs = out.min_pairs.data() + (m * nb + b) * 4;
        for (int i = 0; i < 4; ++i) {
          // Sums of 32 quants fit int16 (|Σ| ≤ 32·127).
          const int lo = blocks[b].bsums[4 * i] + blocks[b].bsums[4 * i + 1];
          const int hi = blocks[b].bsums[4 * i + 2] + blocks[b].bsums[4 * i + 3];
          pairs[i] = static_cast<int32_t>(static_cast<uint32_t>(static_cast<uint16_t>(lo)) |
                                          (static_cast<uint32_t>(static_cast<uint16_t>(hi)) << 16));
        }
      }
    }
  };
  parallel_rows(worker, M, n_in, quantize_rows);
}

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

// ------------------------------------------------------------- drivers ----

struct Problem {
  const WeightMatrix& w;
  size_t row_stride;
  const float* x;
  int64_t M;
  float* y;
};

// Row pointers of tile t; rows past n_out repeat the last row (their results are dropped).
void tile_rows(const Problem& p, int64_t t, const uint8_t* rows[kTileRows]) {
  for (int r = 0; r < kTileRows; ++r) {
    const int64_t o = std::min(t * kTileRows + r, p.w.n_out - 1);
    rows[r] = p.w.data + static_cast<size_t>(o) * p.row_stride;
  }
}

// acc holds kTileRows results per activation row, `acc_stride` apart.
void store_tile(const Problem& p, int64_t t, int64_t m0, int64_t m1, const float* acc,
                int64_t acc_stride = kTileRows) {
  const int64_t o0 = t * kTileRows;
  if (o0 >= p.w.n_out) return;
  const int64_t valid = std::min<int64_t>(kTileRows, p.w.n_out - o0);
  for (int64_t m = m0; m < m1; ++m) {
    float* dst = p.y + m * p.w.n_out + o0;
    const float* src = acc + (m - m0) * acc_stride;
    if (valid == kTileRows) {  // a constant size: vector moves, not a loop of 8-byte ones
      std::memcpy(dst, src, sizeof(float) * kTileRows);
    } else {
      std::memcpy(dst, src, static_cast<size_t>(valid) * sizeof(float));
    }
  }
}

// Tiles [t, t1): pairs through the 16-row kernel where there is one (acc rows
// 16 wide), the rest one by one through the 8-row kernel; activation rows in
// chunks of kChunkRows. Shared by the Q8_0/Q4_0 and the Q4_K/Q6_K tiles.
template <class Act, class Tile16, class Tile8>
void run_tile_pairs_then_singles(const Problem& p, const Act& act, int64_t nb, int64_t t,
                                 int64_t t1, Tile16 tile16, Tile8 tile, float* acc) {
  for (; tile16 != nullptr && t + 1 < t1; t += 2) {
    const uint8_t* rows[2 * kTileRows];
    tile_rows(p, t, rows);
    tile_rows(p, t + 1, rows + kTileRows);
    for (int64_t m0 = 0; m0 < p.M; m0 += kChunkRows) {
      const int64_t m1 = std::min(p.M, m0 + kChunkRows);
      tile16(rows, p.row_stride, nb, act, m0, m1, acc);
      store_tile(p, t, m0, m1, acc, 2 * kTileRows);
      store_tile(p, t + 1, m0, m1, acc + kTileRows, 2 * kTileRows);
    }
  }
  for (; t < t1; ++t) {
    const uint8_t* rows[kTileRows];
    tile_rows(p, t, rows);
    for (int64_t m0 = 0; m0 < p.M; m0 += kChunkRows) {
      const int64_t m1 = std::min(p.M, m0 + kChunkRows);
      tile(rows, p.row_stride, nb, act, m0, m1, acc);
      store_tile(p, t, m0, m1, acc);
    }
  }
}

void run_q8_tiles(const Problem& p, const Q8Activations& act, int64_t t0, int64_t t1) {
  const q8tiles::TileKernels& kernels = active_tiles();
  const bool q4 = p.w.type == DType::Q4_0;
  const q8tiles::TileKernel tile = q4 ? kernels.q4_0 : kernels.q8_0;
  const q8tiles::TileKernel16 tile16 = q4 ? kernels.q4_0_16 : kernels.q8_0_16;
  const q8tiles::TileKernel32 tile32 =
      p.M > q8tiles::kMaxRegisterRows ? (q4 ? kernels.q4_0_32 : kernels.q8_0_32) : nullptr;
  thread_local std::vector<float> acc;
  acc.resize(static_cast<size_t>(kChunkRows * q8tiles::kTileRows32));
  const int64_t nb = p.w.n_in / kQK;
  int64_t t = t0;
  // Groups of four tiles for large batches; acc rows are 32 wide.
  for (; tile32 != nullptr && t + 3 < t1; t += 4) {
    const uint8_t* rows[q8tiles::kTileRows32];
    for (int i = 0; i < 4; ++i) tile_rows(p, t + i, rows + i * kTileRows);
    for (int64_t m0 = 0; m0 < p.M; m0 += kChunkRows) {
      const int64_t m1 = std::min(p.M, m0 + kChunkRows);
      tile32(rows, p.row_stride, nb, act, m0, m1, acc.data());
      for (int i = 0; i < 4; ++i)
        store_tile(p, t + i, m0, m1, acc.data() + i * kTileRows, q8tiles::kTileRows32);
    }
  }
  run_tile_pairs_then_singles(p, act, nb, t, t1, tile16, tile, acc.data());
}

// A repacked Q4_0/Q8_0/Q4_K/Q6_K matrix (kernels/repack.h) counts its whole groups of 16
// rows as tiles 0..groups-1, then the 8-row tiles of the row-major rows after
// them; any other matrix its 8-row tiles.
int64_t packed_groups(const WeightMatrix& w) {
  return w.repacked ? w.n_out / repack::kGroupRows : 0;
}

int64_t tile_count(const WeightMatrix& w) {
  const int64_t groups = packed_groups(w);
  return groups + (w.n_out - groups * repack::kGroupRows + kTileRows - 1) / kTileRows;
}

// Tiles [t0, t1) of a repacked Q4_0 or Q8_0 matrix: its groups in pairs
// through the 32-row kernel for large batches, the rest one by one
// (activation rows in chunks of kChunkRows), then the row-major rows after
// the last group. Not through run_q8_tiles: a second caller changed how the
// compiler inlines it.
void run_packed_tiles(const Problem& p, const Q8Activations& act, int64_t t0, int64_t t1) {
  const q8tiles::PackedKernels& kernels = active_packed();
  const bool q4 = p.w.type == DType::Q4_0;
  const q8tiles::PackedKernel single = q4 ? kernels.q4_0 : kernels.q8_0;
  const q8tiles::PackedKernel32 pair =
      p.M > q8tiles::kMaxRegisterRows ? (q4 ? kernels.q4_0_32 : kernels.q8_0_32) : nullptr;
  const int64_t groups = packed_groups(p.w);
  const size_t bytes = repack::group_bytes(p.w.type, p.w.n_in);
  const int64_t nb = p.w.n_in / kQK;
  thread_local std::vector<float> acc;
  acc.resize(static_cast<size_t>(kChunkRows * q8tiles::kTileRows32));
  // Group g holds tiles 2g and 2g + 1 of the row-major numbering.
  for (int64_t g = t0; g < std::min(t1, groups);) {
    const int64_t count = pair != nullptr && g + 1 < std::min(t1, groups) ? 2 : 1;
    const uint8_t* data = p.w.data + static_cast<size_t>(g) * bytes;
    const int64_t width = count * repack::kGroupRows;
    for (int64_t m0 = 0; m0 < p.M; m0 += kChunkRows) {
      const int64_t m1 = std::min(p.M, m0 + kChunkRows);
      if (count == 2) {
        pair(data, data + bytes, nb, act, m0, m1, acc.data());
      } else {
        single(data, nb, act, m0, m1, acc.data());
      }
      for (int64_t i = 0; i < 2 * count; ++i)
        store_tile(p, 2 * g + i, m0, m1, acc.data() + i * kTileRows, width);
    }
    g += count;
  }
  // The row-major tiles after the groups (at most two): numbered on from 2 · groups.
  t0 = std::max(t0, groups) + groups;
  t1 += groups;
  if (t0 < t1)
    run_tile_pairs_then_singles(p, act, nb, t0, t1, q8tiles::TileKernel16{nullptr},
                                q4 ? kernels.rows_q4_0 : kernels.rows_q8_0, acc.data());
}

template <DType T>
void run_float_tiles(const Problem& p, int64_t t0, int64_t t1) {
  const int64_t n = p.w.n_in;
  const int64_t n_tiles = (p.w.n_out + kTileRows - 1) / kTileRows;
  const bool avx512 = active_isa() == Isa::kAvx512;
  // Large batches (prefill) in blocks of activation rows small enough to stay
  // in L2 (~512 KiB) while every weight tile of the chunk passes over them;
  // without blocking, each tile streamed all M rows from memory.
  const int64_t block =
      std::clamp<int64_t>((int64_t{128} << 10) / std::max<int64_t>(n, 1) / 6 * 6, 6, 48);
  for (int64_t m0 = 0; m0 < p.M; m0 += block) {
    const int64_t rows_here = std::min(block, p.M - m0);
    const float* x = p.x + m0 * n;
    for (int64_t t = t0; t < t1; ++t) {
      // This tile's rows, then the next one's (to prefetch; past the end of
      // this job's range too, where it is most often this thread's next job).
      const uint8_t* rows[2 * kTileRows];
      tile_rows(p, t, rows);
      const bool has_next = t + 1 < n_tiles;
      if (has_next) tile_rows(p, t + 1, rows + kTileRows);
      const uint8_t* const* next = has_next ? rows + kTileRows : nullptr;
      const int64_t o0 = t * kTileRows;
      const int valid = static_cast<int>(std::min<int64_t>(kTileRows, p.w.n_out - o0));
      float* y = p.y + m0 * p.w.n_out + o0;
      if (avx512) {
        float_tiles::avx512_tile(T, rows, next, valid, x, rows_here, n, y, p.w.n_out);
      } else if (rows_here > 1) {
        float_tiles::column_tile<Ops256, T>(rows, next, valid, x, rows_here, n, y, p.w.n_out);
      } else {
        // 4 rows × both halves in one pass: 8 chains, contiguous loads
        float out[4];
        for (int r0 = 0; r0 < valid; r0 += 4) {
          tile_float<T, 4, 1>(rows + r0, x, n, out);
          std::memcpy(y + r0, out, static_cast<size_t>(std::min(4, valid - r0)) * sizeof(float));
        }
      }
    }
  }
}

// The vpdpbusd builds of the Q4_K/Q6_K tiles (kernels/k_tiles.h) for the ISA
// in use; under avx2 only the repacked Q4_K kernel (row-major: the kernels above).
const ktiles::KTileKernels& active_k_tiles() {
  static const ktiles::KTileKernels avx2 = ktiles::avx2_k_tile_kernels();
  static const ktiles::KTileKernels vnni =
      cpu_supports(Isa::kAvxVnni) ? ktiles::vnni_k_tile_kernels() : avx2;
  static const ktiles::KTileKernels avx512 =
      cpu_supports(Isa::kAvx512) ? ktiles::avx512_k_tile_kernels() : avx2;
  return for_active_isa(avx2, vnni, avx512);
}

// Pairs of tiles through the 16-row kernel where there is one, the rest one by one.
void run_k_tiles_dpbusd(const Problem& p, const K8Activations& act, int64_t t0, int64_t t1,
                        const ktiles::KTileKernels& kernels) {
  const bool q4 = p.w.type == DType::Q4_K;
  const ktiles::KTile8 tile = q4 ? kernels.q4_K : kernels.q6_K;
  const ktiles::KTile16 tile16 = q4 ? kernels.q4_K_16 : kernels.q6_K_16;
  thread_local std::vector<float> acc;
  acc.resize(static_cast<size_t>(kChunkRows * 2 * kTileRows));
  const int64_t nb = p.w.n_in / kQKK;
  run_tile_pairs_then_singles(p, act, nb, t0, t1, tile16, tile, acc.data());
}

void run_k_tiles(const Problem& p, const K8Activations& act, int64_t t0, int64_t t1);

// Tiles [t0, t1) of a repacked Q4_K or Q6_K matrix: its groups (activation rows in
// chunks of kChunkRows), then the row-major rows after the last group.
void run_packed_k_tiles(const Problem& p, const K8Activations& act, int64_t t0, int64_t t1) {
  const ktiles::KPacked kernel =
      p.w.type == DType::Q4_K ? active_k_tiles().q4_K_packed : active_k_tiles().q6_K_packed;
  const int64_t groups = packed_groups(p.w);
  const size_t bytes = repack::group_bytes(p.w.type, p.w.n_in);
  const int64_t nb = p.w.n_in / kQKK;
  thread_local std::vector<float> acc;
  acc.resize(static_cast<size_t>(kChunkRows * repack::kGroupRows));
  for (int64_t g = t0; g < std::min(t1, groups); ++g) {
    const uint8_t* data = p.w.data + static_cast<size_t>(g) * bytes;
    for (int64_t m0 = 0; m0 < p.M; m0 += kChunkRows) {
      const int64_t m1 = std::min(p.M, m0 + kChunkRows);
      kernel(data, nb, act, m0, m1, acc.data());
      for (int64_t i = 0; i < 2; ++i)
        store_tile(p, 2 * g + i, m0, m1, acc.data() + i * kTileRows, repack::kGroupRows);
    }
  }
  // The row-major tiles after the groups (at most two): numbered on from 2 · groups.
  t0 = std::max(t0, groups) + groups;
  t1 += groups;
  if (t0 < t1) run_k_tiles(p, act, t0, t1);
}

void run_k_tiles(const Problem& p, const K8Activations& act, int64_t t0, int64_t t1) {
  const ktiles::KTileKernels& kernels = active_k_tiles();
  // The 8-row AVX-VNNI tiles pass over the weights once per 4 activation rows;
  // from M = 8 on the AVX2 tiles (one pass for all) were as fast or faster
  // (bench/kernel_throughput), so they take those batches: same results.
  if (kernels.q4_K != nullptr && (kernels.q4_K_16 != nullptr || p.M <= 4))
    return run_k_tiles_dpbusd(p, act, t0, t1, kernels);
  thread_local std::vector<float> total;
  thread_local std::vector<int32_t> isum;
  total.resize(static_cast<size_t>(kChunkRows * kTileRows));
  isum.resize(static_cast<size_t>(kChunkRows * kTileRows));
  const int64_t nb = p.w.n_in / kQKK;
  for (int64_t t = t0; t < t1; ++t) {
    const uint8_t* rows[kTileRows];
    tile_rows(p, t, rows);
    for (int64_t m0 = 0; m0 < p.M; m0 += kChunkRows) {
      const int64_t m1 = std::min(p.M, m0 + kChunkRows);
      if (p.w.type == DType::Q4_K) {
        tile_q4_K(rows, p.row_stride, nb, act, m0, m1, total.data(), isum.data());
      } else {
        tile_q6_K(rows, p.row_stride, nb, act, m0, m1, total.data(), isum.data());
      }
      store_tile(p, t, m0, m1, total.data());
    }
  }
}

void check_shapes(const WeightMatrix& w, const float* x, int64_t M, const float* y) {
  check(is_weight_type(static_cast<uint32_t>(w.type)), "matmul: unsupported weight type ",
        static_cast<uint32_t>(w.type));
  check(w.type != DType::Q8_K, "matmul: unsupported weight type ", type_info(w.type).name);
  check(w.n_in >= 0 && w.n_out >= 0 && M >= 0, "matmul: negative shape");
  check(w.n_in % type_info(w.type).block_elems == 0, "matmul: ", type_info(w.type).name,
        " rows of ", w.n_in, " elements are not a whole number of blocks");
  check(!w.repacked || repack::repackable(w.type), "matmul: ", type_info(w.type).name,
        " weights are never repacked");
  check(M == 0 || w.n_out == 0 ||
            ((w.n_in == 0 || (w.data != nullptr && x != nullptr)) && y != nullptr),
        "matmul: null buffer");
}

}  // namespace

// Time (ns) one thread needs for a matmul, as far as splitting it is concerned:
// weight bytes at the speed of a cache-resident F16 row (the fastest case,
// measured ~32 bytes/ns on one Zen 5 core, so a job is only split when even
// then it is worth it), plus, per extra activation row, a share of that.
double matmul_work_ns(const WeightMatrix& w, int64_t M) {
  constexpr double kBytesPerNs = 32, kExtraRowShare = 0.15;
  const double bytes = static_cast<double>(row_bytes(w.type, w.n_in)) * w.n_out;
  return bytes / kBytesPerNs * (1 + kExtraRowShare * static_cast<double>(M - 1));
}

void matmul_many(Worker& worker, std::span<const MatmulPart> parts, const float* x, int64_t M) {
  if (parts.empty()) return;
  const int64_t n_in = parts[0].w->n_in;
  bool need_q8_0 = false, need_q8_K = false;
  std::vector<Problem> problems;
  std::vector<int64_t> first_tile;  // global index of each part's first tile, then the total
  int64_t n_tiles = 0;
  double work_ns = 0;
  for (const MatmulPart& part : parts) {
    const WeightMatrix& w = *part.w;
    check_shapes(w, x, M, part.y);
    check(w.n_in == n_in, "matmul_many: inputs of ", n_in, " and ", w.n_in, " elements");
    need_q8_0 |= w.type == DType::Q8_0 || w.type == DType::Q4_0;
    need_q8_K |= w.type == DType::Q4_K || w.type == DType::Q6_K;
    problems.push_back(Problem{w, row_bytes(w.type, w.n_in), x, M, part.y});
    first_tile.push_back(n_tiles);
    n_tiles += M == 0 ? 0 : tile_count(w);
    work_ns += matmul_work_ns(w, M);
  }
  first_tile.push_back(n_tiles);
  if (n_tiles == 0) return;

  // Activations quantized once for every part that reads them. Lambdas name
  // thread_locals directly (no capture), so the worker threads need plain
  // references to the caller's buffers.
  thread_local Q8Activations caller_q8_0;
  thread_local K8Activations caller_q8_K;
  Q8Activations& q8_0 = caller_q8_0;
  K8Activations& q8_K = caller_q8_K;
  // Repacked Q4_0/Q8_0 on AVX-512 reads a short batch's rows in pairs.
  const bool want_pairs = M >= q8tiles::kMinPairRows && M <= q8tiles::kMaxRegisterRows &&
                          active_isa() == Isa::kAvx512 &&
                          std::any_of(parts.begin(), parts.end(),
                                      [](const MatmulPart& part) { return part.w->repacked; });
  if (need_q8_0) q8tiles::quantize_activations(worker, x, M, n_in, want_pairs, q8_0);
  if (need_q8_K) quantize_activations_q8_K(worker, x, M, n_in, q8_K);

  auto run_tiles = [&](const Problem& p, int64_t t0, int64_t t1) {
    switch (p.w.type) {
      case DType::Q4_0:
      case DType::Q8_0:
        if (p.w.repacked) return run_packed_tiles(p, q8_0, t0, t1);
        return run_q8_tiles(p, q8_0, t0, t1);
      case DType::Q4_K:
      case DType::Q6_K:
        if (p.w.repacked) return run_packed_k_tiles(p, q8_K, t0, t1);
        return run_k_tiles(p, q8_K, t0, t1);
      case DType::F32:
        return run_float_tiles<DType::F32>(p, t0, t1);
      case DType::F16:
        return run_float_tiles<DType::F16>(p, t0, t1);
      case DType::BF16:
        return run_float_tiles<DType::BF16>(p, t0, t1);
      case DType::Q8_K:
        break;
    }
  };
  // One job over the tiles of every part: one wake-up and one wait in all.
  const int threads = worker.threads_for(work_ns);
  // Chunks of at least ~4 us (claiming one costs ~0.1 us) and about 8 per
  // thread, so that a descheduled thread's share is taken by the others.
  const int64_t min_grain =
      static_cast<int64_t>(4000.0 * static_cast<double>(n_tiles) / std::max(work_ns, 1.0)) + 1;
  const int64_t grain = std::max(min_grain, n_tiles / (8 * static_cast<int64_t>(threads)));
  worker.parallel_chunks(n_tiles, grain, threads, [&](int64_t g0, int64_t g1) {
    for (size_t i = 0; i < problems.size(); ++i) {
      const int64_t t0 = std::max(g0, first_tile[i]), t1 = std::min(g1, first_tile[i + 1]);
      if (t0 < t1) run_tiles(problems[i], t0 - first_tile[i], t1 - first_tile[i]);
    }
  });
}

void matmul(Worker& worker, const WeightMatrix& w, const float* x, int64_t M, float* y) {
  check_shapes(w, x, M, y);
  const MatmulPart part{&w, y};
  matmul_many(worker, std::span(&part, 1), x, M);
}

bool matmul_use_vnni(bool enable) {
  return set_active_isa(enable ? Isa::kAvxVnni : Isa::kAvx2);
}

bool matmul_vnni_active() {
  return active_isa() != Isa::kAvx2;
}

void matmul_reference(const WeightMatrix& w, const float* x, int64_t M, float* y) {
  check_shapes(w, x, M, y);
  const int64_t n = w.n_in;
  const size_t stride = row_bytes(w.type, n);
  std::vector<float> wrow(static_cast<size_t>(n));
  std::vector<double> xv(static_cast<size_t>(n));
  for (int64_t m = 0; m < M; ++m) {
    const float* xm = x + m * n;
    // Activation values as the fast path sees them, exactly (in double).
    if (w.type == DType::Q8_0 || w.type == DType::Q4_0) {
      std::vector<BlockQ8_0> q(static_cast<size_t>(n / kQK));
      quantize_row(DType::Q8_0, xm, q.data(), n);
      for (int64_t k = 0; k < n; ++k) {
        xv[k] = static_cast<double>(fp16_to_fp32(q[k / kQK].d)) * q[k / kQK].qs[k % kQK];
      }
    } else if (w.type == DType::Q4_K || w.type == DType::Q6_K) {
      std::vector<BlockQ8_K> q(static_cast<size_t>(n / kQKK));
      quantize_row_q8_K(xm, q.data(), n);
      for (int64_t k = 0; k < n; ++k) {
        xv[k] = static_cast<double>(q[k / kQKK].d) * q[k / kQKK].qs[k % kQKK];
      }
    } else {
      for (int64_t k = 0; k < n; ++k) xv[k] = xm[k];
    }
    std::vector<uint8_t> unpacked(w.repacked ? stride : 0);
    for (int64_t o = 0; o < w.n_out; ++o) {
      const uint8_t* row = w.data + static_cast<size_t>(o) * stride;
      if (w.repacked) {
        repack::unpack_row(w.type, n, w.n_out, w.data, o, unpacked.data());
        row = unpacked.data();
      }
      dequantize_row(w.type, row, wrow.data(), n);
      double sum = 0.0;
      for (int64_t k = 0; k < n; ++k) sum += static_cast<double>(wrow[k]) * xv[k];
      y[m * w.n_out + o] = static_cast<float>(sum);
    }
  }
}

}  // namespace parspec
