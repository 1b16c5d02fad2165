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
// - F32/F16/BF16 weights: f32 activations; an 8-lane accumulator where lane j
//   sums k ≡ j (mod 8) with fma in k order (the ragged tail as one zero-padded
//   step), then one fixed horizontal reduction.
// - Q4_K/Q6_K weights: activations quantized per row to Q8_K; one call of the
//   (deterministic) kquants dot product per output.
// Threads split the output rows in tiles of 8; a dot product is never split.
#include "kernels/matmul.h"

#include <immintrin.h>

#include <algorithm>
#include <cstring>
#include <vector>

#include "core/error.h"
#include "kernels/kquants.h"

namespace parspec {

namespace {

constexpr int kTileRows = 8;  // output rows per tile, one per SIMD lane in the Q8_0/Q4_0 kernels
constexpr int64_t kChunkRows = 64;  // activation rows applied per pass over a weight tile

// ------------------------------------------------------------ activations ----

// Activation rows quantized to Q8_0, with per-block values the kernels need.
struct Q8Activations {
  int64_t blocks_per_row = 0;
  std::vector<BlockQ8_0> blocks;  // rows × blocks_per_row
  std::vector<float> scales;      // f32 value of each block's f16 scale
  std::vector<int32_t> sums8;     // 8 × Σ quants of each block (Q4_0 offset correction)
};

void quantize_activations_q8_0(Worker& worker, const float* x, int64_t M, int64_t n_in,
                               Q8Activations& out) {
  const int64_t nb = n_in / kQK;
  out.blocks_per_row = nb;
  out.blocks.resize(static_cast<size_t>(M * nb));
  out.scales.resize(static_cast<size_t>(M * nb));
  out.sums8.resize(static_cast<size_t>(M * nb));
  auto quantize_rows = [&](int64_t begin, int64_t end) {
    const __m256i ones = _mm256_set1_epi16(1);
    for (int64_t m = begin; m < end; ++m) {
      BlockQ8_0* blocks = out.blocks.data() + m * nb;
      quantize_row(DType::Q8_0, x + m * n_in, blocks, n_in);
      for (int64_t b = 0; b < nb; ++b) {
        out.scales[m * nb + b] = fp16_to_fp32(blocks[b].d);
        const __m256i q = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(blocks[b].qs));
        const __m256i s16 = _mm256_maddubs_epi16(_mm256_set1_epi8(1), q);
        const __m256i s32 = _mm256_madd_epi16(s16, ones);
        __m128i s = _mm_add_epi32(_mm256_castsi256_si128(s32), _mm256_extracti128_si256(s32, 1));
        s = _mm_add_epi32(s, _mm_unpackhi_epi64(s, s));
        s = _mm_add_epi32(s, _mm_shuffle_epi32(s, 1));
        out.sums8[m * nb + b] = 8 * _mm_cvtsi128_si32(s);
      }
    }
  };
  // Splitting small batches costs more in synchronization than it saves.
  if (M * n_in >= 16384 && M > 1 && worker.n_threads() > 1) {
    worker.parallel_for(M, quantize_rows);
  } else {
    quantize_rows(0, M);
  }
}

// ------------------------------------------------------- Q8_0/Q4_0 kernels ----

inline __m256i broadcast_i32(const int8_t* p) {
  int32_t v;
  std::memcpy(&v, p, sizeof(v));
  return _mm256_set1_epi32(v);
}

// Transposes four 256-bit rows-pairs [r | r+4] (r = 0..3) of four dwords per
// 128-bit half so that out[d] holds dword d of rows 0..7, lane = row.
inline void transpose_8x4(const __m256i in[4], __m256i out[4]) {
  const __m256i t0 = _mm256_unpacklo_epi32(in[0], in[1]);
  const __m256i t1 = _mm256_unpackhi_epi32(in[0], in[1]);
  const __m256i t2 = _mm256_unpacklo_epi32(in[2], in[3]);
  const __m256i t3 = _mm256_unpackhi_epi32(in[2], in[3]);
  out[0] = _mm256_unpacklo_epi64(t0, t2);
  out[1] = _mm256_unpackhi_epi64(t0, t2);
  out[2] = _mm256_unpacklo_epi64(t1, t3);
  out[3] = _mm256_unpackhi_epi64(t1, t3);
}

inline __m256i load_row_pair(const uint8_t* lo, const uint8_t* hi) {
  const __m128i a = _mm_loadu_si128(reinterpret_cast<const __m128i*>(lo));
  const __m128i b = _mm_loadu_si128(reinterpret_cast<const __m128i*>(hi));
  return _mm256_inserti128_si256(_mm256_castsi128_si256(a), b, 1);
}

// Prefetches block `at` of the same rows in the next tile (rows are stored
// back to back, so that is kTileRows row strides ahead): while this tile
// computes, the next one streams in. Measured: cold-cache Q4_0 single-row
// throughput 7 -> 10+ GB/s.
inline void prefetch_next_tile(const uint8_t* const rows[kTileRows], size_t row_stride,
                               int64_t at) {
  const size_t ahead = kTileRows * row_stride;
  for (int r = 0; r < kTileRows; ++r) {
    _mm_prefetch(reinterpret_cast<const char*>(rows[r] + at + ahead), _MM_HINT_T0);
  }
}

// f32 values of the f16 scales found at the start of the block of each of the 8 rows.
inline __m256 gather_scales(const uint8_t* base, __m256i row_offsets) {
  const __m256i words = _mm256_i32gather_epi32(reinterpret_cast<const int*>(base), row_offsets, 1);
  const __m256i pick = _mm256_setr_epi8(0, 1, 4, 5, 8, 9, 12, 13, -1, -1, -1, -1, -1, -1, -1, -1, 0,
                                        1, 4, 5, 8, 9, 12, 13, -1, -1, -1, -1, -1, -1, -1, -1);
  const __m256i packed = _mm256_permute4x64_epi64(_mm256_shuffle_epi8(words, pick), 0x08);
  return _mm256_cvtph_ps(_mm256_castsi256_si128(packed));
}

// A tile of 8 weight rows (row pointers; rows past the end repeat a valid row)
// against activation rows [m0, m1): acc[(m - m0) * 8 + r] = result for row r.
void tile_q4_0(const uint8_t* const rows[kTileRows], size_t row_stride, int64_t nb,
               const Q8Activations& act, int64_t m0, int64_t m1, float* acc) {
  const __m256i low_mask = _mm256_set1_epi8(0x0f);
  const __m256i ones = _mm256_set1_epi16(1);
  alignas(32) int32_t offs[kTileRows];
  for (int r = 0; r < kTileRows; ++r) offs[r] = static_cast<int32_t>(rows[r] - rows[0]);
  const __m256i offsets = _mm256_load_si256(reinterpret_cast<const __m256i*>(offs));
  for (int64_t m = m0; m < m1; ++m) _mm256_storeu_ps(acc + (m - m0) * 8, _mm256_setzero_ps());

  for (int64_t b = 0; b < nb; ++b) {
    const int64_t at = b * static_cast<int64_t>(sizeof(BlockQ4_0));
    prefetch_next_tile(rows, row_stride, at);
    __m256i pairs[4], packed[4];
    for (int r = 0; r < 4; ++r) pairs[r] = load_row_pair(rows[r] + at + 2, rows[r + 4] + at + 2);
    transpose_8x4(pairs, packed);
    // Lane r of lo[d] holds elements 4d..4d+3 of row r, hi[d] elements 16+4d..16+4d+3, as 0..15.
    __m256i lo[4], hi[4];
    for (int d = 0; d < 4; ++d) {
      lo[d] = _mm256_and_si256(packed[d], low_mask);
      hi[d] = _mm256_and_si256(_mm256_srli_epi16(packed[d], 4), low_mask);
    }
    const __m256 dw = gather_scales(rows[0] + at, offsets);

    for (int64_t m = m0; m < m1; ++m) {
      const int64_t i = m * nb + b;
      const int8_t* xq = act.blocks[i].qs;
      // Σ q·x with q in 0..15: each int16 lane sums 8 pair products of ≤ 2·15·127, no overflow.
      __m256i p = _mm256_maddubs_epi16(lo[0], broadcast_i32(xq));
      p = _mm256_add_epi16(p, _mm256_maddubs_epi16(hi[0], broadcast_i32(xq + 16)));
      p = _mm256_add_epi16(p, _mm256_maddubs_epi16(lo[1], broadcast_i32(xq + 4)));
      p = _mm256_add_epi16(p, _mm256_maddubs_epi16(hi[1], broadcast_i32(xq + 20)));
      p = _mm256_add_epi16(p, _mm256_maddubs_epi16(lo[2], broadcast_i32(xq + 8)));
      p = _mm256_add_epi16(p, _mm256_maddubs_epi16(hi[2], broadcast_i32(xq + 24)));
      p = _mm256_add_epi16(p, _mm256_maddubs_epi16(lo[3], broadcast_i32(xq + 12)));
      p = _mm256_add_epi16(p, _mm256_maddubs_epi16(hi[3], broadcast_i32(xq + 28)));
      // Σ (q − 8)·x = Σ q·x − 8·Σ x.
      const __m256i isum =
          _mm256_sub_epi32(_mm256_madd_epi16(p, ones), _mm256_set1_epi32(act.sums8[i]));
      const __m256 scale = _mm256_mul_ps(dw, _mm256_set1_ps(act.scales[i]));
      float* a = acc + (m - m0) * 8;
      _mm256_storeu_ps(a, _mm256_fmadd_ps(_mm256_cvtepi32_ps(isum), scale, _mm256_loadu_ps(a)));
    }
  }
}

void tile_q8_0(const uint8_t* const rows[kTileRows], size_t row_stride, int64_t nb,
               const Q8Activations& act, int64_t m0, int64_t m1, float* acc) {
  const __m256i ones = _mm256_set1_epi16(1);
  alignas(32) int32_t offs[kTileRows];
  for (int r = 0; r < kTileRows; ++r) offs[r] = static_cast<int32_t>(rows[r] - rows[0]);
  const __m256i offsets = _mm256_load_si256(reinterpret_cast<const __m256i*>(offs));
  for (int64_t m = m0; m < m1; ++m) _mm256_storeu_ps(acc + (m - m0) * 8, _mm256_setzero_ps());

  for (int64_t b = 0; b < nb; ++b) {
    const int64_t at = b * static_cast<int64_t>(sizeof(BlockQ8_0));
    prefetch_next_tile(rows, row_stride, at);
    __m256i pairs[4], w[8], magnitude[8];
    for (int r = 0; r < 4; ++r) pairs[r] = load_row_pair(rows[r] + at + 2, rows[r + 4] + at + 2);
    transpose_8x4(pairs, w);
    for (int r = 0; r < 4; ++r) pairs[r] = load_row_pair(rows[r] + at + 18, rows[r + 4] + at + 18);
    transpose_8x4(pairs, w + 4);
    // Lane r of w[g] holds elements 4g..4g+3 of row r.
    for (int g = 0; g < 8; ++g) magnitude[g] = _mm256_abs_epi8(w[g]);
    const __m256 dw = gather_scales(rows[0] + at, offsets);

    for (int64_t m = m0; m < m1; ++m) {
      const int64_t i = m * nb + b;
      const int8_t* xq = act.blocks[i].qs;
      // |w|·(x·sign(w)) = w·x; pair sums ≤ 2·128·127 fit int16 (x is never −128).
      __m256i isum = _mm256_setzero_si256();
      for (int g = 0; g < 8; ++g) {
        const __m256i xs = _mm256_sign_epi8(broadcast_i32(xq + 4 * g), w[g]);
        isum =
            _mm256_add_epi32(isum, _mm256_madd_epi16(_mm256_maddubs_epi16(magnitude[g], xs), ones));
      }
      const __m256 scale = _mm256_mul_ps(dw, _mm256_set1_ps(act.scales[i]));
      float* a = acc + (m - m0) * 8;
      _mm256_storeu_ps(a, _mm256_fmadd_ps(_mm256_cvtepi32_ps(isum), scale, _mm256_loadu_ps(a)));
    }
  }
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

// The one horizontal reduction every float path uses.
inline float reduce8(__m256 v) {
  __m128 s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
  s = _mm_add_ps(s, _mm_movehl_ps(s, s));
  s = _mm_add_ss(s, _mm_movehdup_ps(s));
  return _mm_cvtss_f32(s);
}

// R weight rows × C activation rows; out[c * R + r]. Each (r, c) pair runs the
// same sequence of fmas whatever R and C are.
template <DType T, int R, int C>
void tile_float(const uint8_t* const rows[], const float* const xs[], int64_t n, float* out) {
  __m256 acc[R][C];
  for (int r = 0; r < R; ++r)
    for (int c = 0; c < C; ++c) acc[r][c] = _mm256_setzero_ps();
  const int64_t n8 = n & ~int64_t{7};
  for (int64_t k = 0; k < n8; k += 8) {
    __m256 x[C];
    for (int c = 0; c < C; ++c) x[c] = _mm256_loadu_ps(xs[c] + k);
    for (int r = 0; r < R; ++r) {
      const __m256 w = load_weights8<T>(rows[r], k);
      for (int c = 0; c < C; ++c) acc[r][c] = _mm256_fmadd_ps(w, x[c], acc[r][c]);
    }
  }
  if (n8 < n) {
    alignas(32) float xt[C][8] = {};
    alignas(32) float wt[8] = {};
    for (int c = 0; c < C; ++c)
      for (int64_t k = n8; k < n; ++k) xt[c][k - n8] = xs[c][k];
    for (int r = 0; r < R; ++r) {
      for (int64_t k = n8; k < n; ++k) wt[k - n8] = weight_at<T>(rows[r], k);
      const __m256 w = _mm256_load_ps(wt);
      for (int c = 0; c < C; ++c) acc[r][c] = _mm256_fmadd_ps(w, _mm256_load_ps(xt[c]), acc[r][c]);
    }
  }
  for (int c = 0; c < C; ++c)
    for (int r = 0; r < R; ++r) out[c * R + r] = reduce8(acc[r][c]);
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

void store_tile(const Problem& p, int64_t t, int64_t m0, int64_t m1, const float* acc) {
  const int64_t o0 = t * kTileRows;
  const int64_t valid = std::min<int64_t>(kTileRows, p.w.n_out - o0);
  for (int64_t m = m0; m < m1; ++m) {
    std::memcpy(p.y + m * p.w.n_out + o0, acc + (m - m0) * kTileRows,
                static_cast<size_t>(valid) * sizeof(float));
  }
}

void run_q8_tiles(const Problem& p, const Q8Activations& act, int64_t t0, int64_t t1) {
  thread_local std::vector<float> acc;
  acc.resize(static_cast<size_t>(kChunkRows * kTileRows));
  const int64_t nb = p.w.n_in / kQK;
  for (int64_t t = t0; t < t1; ++t) {
    const uint8_t* rows[kTileRows];
    tile_rows(p, t, rows);
    for (int64_t m0 = 0; m0 < p.M; m0 += kChunkRows) {
      const int64_t m1 = std::min(p.M, m0 + kChunkRows);
      if (p.w.type == DType::Q4_0) {
        tile_q4_0(rows, p.row_stride, nb, act, m0, m1, acc.data());
      } else {
        tile_q8_0(rows, p.row_stride, nb, act, m0, m1, acc.data());
      }
      store_tile(p, t, m0, m1, acc.data());
    }
  }
}

template <DType T>
void run_float_tiles(const Problem& p, int64_t t0, int64_t t1) {
  const int64_t n = p.w.n_in;
  for (int64_t t = t0; t < t1; ++t) {
    const uint8_t* rows[kTileRows];
    tile_rows(p, t, rows);
    float out[kTileRows * 3];
    const int64_t o0 = t * kTileRows;
    const int64_t valid = std::min<int64_t>(kTileRows, p.w.n_out - o0);
    if (p.M == 1) {
      const float* xs[1] = {p.x};
      tile_float<T, 8, 1>(rows, xs, n, out);
      std::memcpy(p.y + o0, out, static_cast<size_t>(valid) * sizeof(float));
      continue;
    }
    for (int half = 0; half < 2; ++half) {
      const int r0 = 4 * half;
      if (r0 >= valid) break;
      const int64_t count = std::min<int64_t>(4, valid - r0);
      int64_t m = 0;
      auto store = [&](int c_count) {
        for (int c = 0; c < c_count; ++c)
          std::memcpy(p.y + (m + c) * p.w.n_out + o0 + r0, out + 4 * c,
                      static_cast<size_t>(count) * sizeof(float));
      };
      for (; m + 3 <= p.M; m += 3) {
        const float* xs[3] = {p.x + m * n, p.x + (m + 1) * n, p.x + (m + 2) * n};
        tile_float<T, 4, 3>(rows + r0, xs, n, out);
        store(3);
      }
      if (p.M - m == 2) {
        const float* xs[2] = {p.x + m * n, p.x + (m + 1) * n};
        tile_float<T, 4, 2>(rows + r0, xs, n, out);
        store(2);
      } else if (p.M - m == 1) {
        const float* xs[1] = {p.x + m * n};
        tile_float<T, 4, 1>(rows + r0, xs, n, out);
        store(1);
      }
    }
  }
}

void run_kquant_tiles(const Problem& p, const void* act, size_t act_row_bytes, int64_t t0,
                      int64_t t1) {
  const int64_t n = p.w.n_in;
  for (int64_t t = t0; t < t1; ++t) {
    const int64_t o0 = t * kTileRows;
    const int64_t o1 = std::min(p.w.n_out, o0 + kTileRows);
    for (int64_t m = 0; m < p.M; ++m) {
      const auto* xq = reinterpret_cast<const BlockQ8_K*>(static_cast<const uint8_t*>(act) +
                                                          static_cast<size_t>(m) * act_row_bytes);
      for (int64_t o = o0; o < o1; ++o) {
        const uint8_t* row = p.w.data + static_cast<size_t>(o) * p.row_stride;
        p.y[m * p.w.n_out + o] =
            p.w.type == DType::Q4_K ? dot_q4_K_q8_K(n, reinterpret_cast<const BlockQ4_K*>(row), xq)
                                    : dot_q6_K_q8_K(n, reinterpret_cast<const BlockQ6_K*>(row), xq);
      }
    }
  }
}

void check_shapes(const WeightMatrix& w, const float* x, int64_t M, const float* y) {
  check(is_weight_type(static_cast<uint32_t>(w.type)), "matmul: unsupported weight type ",
        static_cast<uint32_t>(w.type));
  check(w.n_in >= 0 && w.n_out >= 0 && M >= 0, "matmul: negative shape");
  check(w.n_in % type_info(w.type).block_elems == 0, "matmul: ", type_info(w.type).name,
        " rows of ", w.n_in, " elements are not a whole number of blocks");
  check(M == 0 || w.n_out == 0 ||
            ((w.n_in == 0 || (w.data != nullptr && x != nullptr)) && y != nullptr),
        "matmul: null buffer");
}

}  // namespace

void matmul(Worker& worker, const WeightMatrix& w, const float* x, int64_t M, float* y) {
  check_shapes(w, x, M, y);
  if (M == 0 || w.n_out == 0) return;
  const Problem p{w, row_bytes(w.type, w.n_in), x, M, y};
  const int64_t n_tiles = (w.n_out + kTileRows - 1) / kTileRows;
  auto for_tiles = [&](auto&& body) {
    worker.run([&](int index, int count) {
      int64_t t0, t1;
      Worker::split(n_tiles, index, count, t0, t1);
      if (t0 < t1) body(t0, t1);
    });
  };

  switch (w.type) {
    case DType::Q8_0:
    case DType::Q4_0: {
      // Lambdas name thread_locals directly (no capture), so the worker
      // threads need a plain reference to the caller's buffer.
      thread_local Q8Activations caller_act;
      Q8Activations& act = caller_act;
      quantize_activations_q8_0(worker, x, M, w.n_in, act);
      for_tiles([&](int64_t t0, int64_t t1) { run_q8_tiles(p, act, t0, t1); });
      return;
    }
    case DType::Q4_K:
    case DType::Q6_K: {
      thread_local std::vector<uint8_t> caller_act;
      std::vector<uint8_t>& act = caller_act;
      const size_t act_row = row_bytes(DType::Q8_K, w.n_in);
      act.resize(act_row * static_cast<size_t>(M));
      auto quantize_rows = [&](int64_t begin, int64_t end) {
        for (int64_t m = begin; m < end; ++m) {
          quantize_row_q8_K(
              x + m * w.n_in,
              reinterpret_cast<BlockQ8_K*>(act.data() + static_cast<size_t>(m) * act_row), w.n_in);
        }
      };
      if (M > 1 && worker.n_threads() > 1) {
        worker.parallel_for(M, quantize_rows);
      } else {
        quantize_rows(0, M);
      }
      for_tiles([&](int64_t t0, int64_t t1) { run_kquant_tiles(p, act.data(), act_row, t0, t1); });
      return;
    }
    case DType::F32:
      for_tiles([&](int64_t t0, int64_t t1) { run_float_tiles<DType::F32>(p, t0, t1); });
      return;
    case DType::F16:
      for_tiles([&](int64_t t0, int64_t t1) { run_float_tiles<DType::F16>(p, t0, t1); });
      return;
    case DType::BF16:
      for_tiles([&](int64_t t0, int64_t t1) { run_float_tiles<DType::BF16>(p, t0, t1); });
      return;
    case DType::Q8_K:
      break;
  }
  fail("matmul: unsupported weight type ", type_info(w.type).name);
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
    for (int64_t o = 0; o < w.n_out; ++o) {
      dequantize_row(w.type, w.data + static_cast<size_t>(o) * stride, wrow.data(), n);
      double sum = 0.0;
      for (int64_t k = 0; k < n; ++k) sum += static_cast<double>(wrow[k]) * xv[k];
      y[m * w.n_out + o] = static_cast<float>(sum);
    }
  }
}

}  // namespace parspec
