// K-quant conversions and dot products. Block layouts follow the GGUF format
// exactly (see kernels/quant.h and the notes on GGUF), so files written by
// llama.cpp load and dequantize bit-for-bit.
//
// Q8_K convention used here: d = absmax / 127 and q = round(x / d), so q lies
// in [-127, 127] (symmetric; -128 never occurs). The dot products only rely on
// the stored d and qs and on bsums being the exact sums of each 16 qs, so they
// are also correct for activations quantized with llama.cpp's signed-max
// convention (q in [-128, 127]).
#include "kernels/kquants.h"

#include <immintrin.h>

#include <algorithm>
#include <cmath>
#include <cstring>

#include "core/error.h"

namespace parspec {
namespace {

// Local F16C conversions (inlined into the hot loops).
inline float half_to_float(uint16_t h) {
  return _cvtsh_ss(h);
}
inline uint16_t float_to_half(float f) {
  return static_cast<uint16_t>(_cvtss_sh(f, _MM_FROUND_TO_NEAREST_INT));
}

inline int round_to_int(float v) {
  return static_cast<int>(std::lrintf(v));
}

void check_row_length(int64_t n, const char* what) {
  check(n >= 0 && n % kQKK == 0, what, ": row length ", n, " is not a multiple of ", kQKK);
}

constexpr int kQ4SubBlocks = 8;  // sub-blocks of 32 per Q4_K super-block
constexpr int kQ4SubSize = 32;
constexpr int kQ6SubBlocks = 16;  // sub-blocks of 16 per Q6_K super-block
constexpr int kQ6SubSize = 16;

// ---- Q4_K scale packing: 8 (scale, min) pairs of 6 bits in 12 bytes ----

void unpack_q4_K_scales(const uint8_t* packed, uint8_t* sc, uint8_t* mn) {
  for (int j = 0; j < 4; ++j) {
    sc[j] = packed[j] & 63;
    mn[j] = packed[j + 4] & 63;
  }
  for (int j = 4; j < 8; ++j) {
    sc[j] = static_cast<uint8_t>((packed[j + 4] & 15) | ((packed[j - 4] >> 6) << 4));
    mn[j] = static_cast<uint8_t>((packed[j + 4] >> 4) | ((packed[j] >> 6) << 4));
  }
}

void pack_q4_K_scales(const uint8_t* sc, const uint8_t* mn, uint8_t* packed) {
  for (int j = 0; j < 4; ++j) {
    packed[j] = static_cast<uint8_t>((sc[j] & 63) | ((sc[j + 4] >> 4) << 6));
    packed[j + 4] = static_cast<uint8_t>((mn[j] & 63) | ((mn[j + 4] >> 4) << 6));
    packed[j + 8] = static_cast<uint8_t>((sc[j + 4] & 15) | ((mn[j + 4] & 15) << 4));
  }
}

// Same unpacking as above, done on 32-bit words (4 sub-blocks per word) for the
// dot product: out[0..7] = scales, out[8..15] = mins.
inline void unpack_q4_K_scales_fast(const uint8_t* packed, uint8_t out[16]) {
  uint32_t w0, w1, w2;
  std::memcpy(&w0, packed, 4);
  std::memcpy(&w1, packed + 4, 4);
  std::memcpy(&w2, packed + 8, 4);
  const uint32_t low6 = 0x3f3f3f3fu, low4 = 0x0f0f0f0fu, low2 = 0x03030303u;
  const uint32_t sc_lo = w0 & low6;
  const uint32_t sc_hi = (w2 & low4) | (((w0 >> 6) & low2) << 4);
  const uint32_t mn_lo = w1 & low6;
  const uint32_t mn_hi = ((w2 >> 4) & low4) | (((w1 >> 6) & low2) << 4);
  std::memcpy(out, &sc_lo, 4);
  std::memcpy(out + 4, &sc_hi, 4);
  std::memcpy(out + 8, &mn_lo, 4);
  std::memcpy(out + 12, &mn_hi, 4);
}

// Fits x ≈ scale·q − min (q in [0, 15], min ≥ 0) to one Q4_K sub-block by
// trying a range of step sizes and refining each by least squares.
void fit_q4_K_sub_block(const float* x, float& best_scale, float& best_min) {
  float lo = 0.0f, hi = x[0];  // the range always includes 0 (min ≥ 0)
  for (int i = 0; i < kQ4SubSize; ++i) {
    lo = std::min(lo, x[i]);
    hi = std::max(hi, x[i]);
  }
  best_scale = 0.0f;
  best_min = -lo;
  if (hi <= lo) return;  // all values equal and ≤ 0: the min alone is exact

  auto error_of = [&](float scale, float offset) {
    float err = 0.0f;
    for (int i = 0; i < kQ4SubSize; ++i) {
      const int q = std::clamp(round_to_int((x[i] - offset) / scale), 0, 15);
      const float diff = scale * static_cast<float>(q) + offset - x[i];
      err += diff * diff;
    }
    return err;
  };
  float best_err = error_of((hi - lo) / 15.0f, lo);
  best_scale = (hi - lo) / 15.0f;
  constexpr int kSteps = 16;
  for (int step = 0; step <= kSteps; ++step) {
    // Levels spanning the range: 15 ± 1.5 (a bit of clipping or slack can pay off).
    const float inv_scale = (13.5f + 3.0f * step / kSteps) / (hi - lo);
    int q[kQ4SubSize];
    float sq = 0, sqq = 0, sx = 0, sqx = 0;
    for (int i = 0; i < kQ4SubSize; ++i) {
      q[i] = std::clamp(round_to_int((x[i] - lo) * inv_scale), 0, 15);
      sq += q[i];
      sqq += static_cast<float>(q[i]) * q[i];
      sx += x[i];
      sqx += q[i] * x[i];
    }
    const float n = kQ4SubSize;
    const float det = n * sqq - sq * sq;
    if (det <= 0.0f) continue;
    float scale = (n * sqx - sq * sx) / det;
    float offset = (sx - scale * sq) / n;
    if (offset > 0.0f) {  // the min term can only subtract
      offset = 0.0f;
      scale = sqx / sqq;
    }
    if (scale <= 0.0f) continue;
    const float err = error_of(scale, offset);
    if (err < best_err) {
      best_err = err;
      best_scale = scale;
      best_min = -offset;
    }
  }
}

// Least-squares scale for one Q6_K sub-block (x ≈ scale·q, q in [-32, 31]).
float fit_q6_K_sub_block(const float* x) {
  float peak = 0.0f;  // signed value of largest magnitude
  for (int i = 0; i < kQ6SubSize; ++i) {
    if (std::fabs(x[i]) > std::fabs(peak)) peak = x[i];
  }
  if (peak == 0.0f) return 0.0f;
  auto error_of = [&](float scale) {
    float err = 0.0f;
    for (int i = 0; i < kQ6SubSize; ++i) {
      const int q = std::clamp(round_to_int(x[i] / scale), -32, 31);
      const float diff = scale * static_cast<float>(q) - x[i];
      err += diff * diff;
    }
    return err;
  };
  // Map the peak to -32 (the side with one more level).
  float best_scale = -peak / 32.0f;
  float best_err = error_of(best_scale);
  constexpr int kSteps = 12;
  for (int step = 0; step <= kSteps; ++step) {
    const float inv_scale = -(30.0f + 4.0f * step / kSteps) / peak;
    float sqq = 0, sqx = 0;
    for (int i = 0; i < kQ6SubSize; ++i) {
      const int q = std::clamp(round_to_int(x[i] * inv_scale), -32, 31);
      sqq += static_cast<float>(q) * q;
      sqx += q * x[i];
    }
    if (sqq <= 0.0f) continue;
    const float scale = sqx / sqq;
    const float err = error_of(scale);
    if (err < best_err) {
      best_err = err;
      best_scale = scale;
    }
  }
  return best_scale;
}

// Weight rows stream from memory once per token; the hardware prefetcher alone
// left the dot at about half the streaming bandwidth. Fetching ~2 KiB ahead
// (into the next row at a row's end, which is what matmul reads next) measured
// 30-40% faster out of cache and made no difference in cache.
constexpr int kPrefetchBytes = 2048;

template <class Block>
inline void prefetch_block_ahead(const Block* block) {
  const char* p = reinterpret_cast<const char*>(block) + kPrefetchBytes;
  for (size_t offset = 0; offset < sizeof(Block); offset += 64) {
    _mm_prefetch(p + offset, _MM_HINT_T0);
  }
}

inline int hsum_i32(__m256i v) {
  __m128i s = _mm_add_epi32(_mm256_castsi256_si128(v), _mm256_extracti128_si256(v, 1));
  s = _mm_add_epi32(s, _mm_shuffle_epi32(s, _MM_SHUFFLE(1, 0, 3, 2)));
  s = _mm_add_epi32(s, _mm_shuffle_epi32(s, _MM_SHUFFLE(2, 3, 0, 1)));
  return _mm_cvtsi128_si32(s);
}

// Byte-shuffle mask that, applied to a register whose two 128-bit lanes both
// hold 8 int16 values, broadcasts word lo_word over the low lane and word
// hi_word over the high lane.
inline __m256i word_broadcast_mask(int lo_word, int hi_word) {
  const char a0 = static_cast<char>(2 * lo_word), a1 = static_cast<char>(2 * lo_word + 1);
  const char b0 = static_cast<char>(2 * hi_word), b1 = static_cast<char>(2 * hi_word + 1);
  return _mm256_setr_epi8(a0, a1, a0, a1, a0, a1, a0, a1, a0, a1, a0, a1, a0, a1, a0, a1,  //
                          b0, b1, b0, b1, b0, b1, b0, b1, b0, b1, b0, b1, b0, b1, b0, b1);
}

}  // namespace

// ---------------------------------------------------------------- Q4_K ----

void quantize_row_q4_K(const float* src, BlockQ4_K* dst, int64_t n) {
  check_row_length(n, "quantize_row_q4_K");
  for (int64_t b = 0; b < n / kQKK; ++b) {
    const float* x = src + b * kQKK;
    BlockQ4_K& out = dst[b];
    float scales[kQ4SubBlocks], mins[kQ4SubBlocks];
    float max_scale = 0.0f, max_min = 0.0f;
    for (int j = 0; j < kQ4SubBlocks; ++j) {
      fit_q4_K_sub_block(x + j * kQ4SubSize, scales[j], mins[j]);
      max_scale = std::max(max_scale, scales[j]);
      max_min = std::max(max_min, mins[j]);
    }
    // Quantize the scales and mins to 6 bits against the f16-rounded super scales.
    out.d = float_to_half(max_scale / 63.0f);
    out.dmin = float_to_half(max_min / 63.0f);
    const float d = half_to_float(out.d), dmin = half_to_float(out.dmin);
    uint8_t sc[kQ4SubBlocks], mn[kQ4SubBlocks];
    for (int j = 0; j < kQ4SubBlocks; ++j) {
      sc[j] = d > 0.0f ? static_cast<uint8_t>(std::clamp(round_to_int(scales[j] / d), 0, 63)) : 0;
      mn[j] =
          dmin > 0.0f ? static_cast<uint8_t>(std::clamp(round_to_int(mins[j] / dmin), 0, 63)) : 0;
    }
    pack_q4_K_scales(sc, mn, out.scales);
    // Re-quantize the values with the scales actually stored.
    uint8_t q[kQKK];
    for (int j = 0; j < kQ4SubBlocks; ++j) {
      const float scale = d * sc[j], offset = dmin * mn[j];
      for (int i = 0; i < kQ4SubSize; ++i) {
        const int idx = j * kQ4SubSize + i;
        q[idx] =
            scale > 0.0f
                ? static_cast<uint8_t>(std::clamp(round_to_int((x[idx] + offset) / scale), 0, 15))
                : 0;
      }
    }
    // Each group of 64 values: low nibbles hold the first 32, high nibbles the next 32.
    for (int g = 0; g < kQKK / 64; ++g) {
      for (int l = 0; l < 32; ++l) {
        out.qs[32 * g + l] = static_cast<uint8_t>(q[64 * g + l] | (q[64 * g + 32 + l] << 4));
      }
    }
  }
}

void dequantize_row_q4_K(const BlockQ4_K* src, float* dst, int64_t n) {
  check_row_length(n, "dequantize_row_q4_K");
  for (int64_t b = 0; b < n / kQKK; ++b) {
    const BlockQ4_K& blk = src[b];
    const float d = half_to_float(blk.d), dmin = half_to_float(blk.dmin);
    uint8_t sc[kQ4SubBlocks], mn[kQ4SubBlocks];
    unpack_q4_K_scales(blk.scales, sc, mn);
    float* y = dst + b * kQKK;
    for (int g = 0; g < kQKK / 64; ++g) {
      const float scale_lo = d * sc[2 * g], min_lo = dmin * mn[2 * g];
      const float scale_hi = d * sc[2 * g + 1], min_hi = dmin * mn[2 * g + 1];
      for (int l = 0; l < 32; ++l) {
        const uint8_t byte = blk.qs[32 * g + l];
        y[64 * g + l] = scale_lo * static_cast<float>(byte & 15) - min_lo;
        y[64 * g + 32 + l] = scale_hi * static_cast<float>(byte >> 4) - min_hi;
      }
    }
  }
}

// ---------------------------------------------------------------- Q6_K ----

void quantize_row_q6_K(const float* src, BlockQ6_K* dst, int64_t n) {
  check_row_length(n, "quantize_row_q6_K");
  for (int64_t b = 0; b < n / kQKK; ++b) {
    const float* x = src + b * kQKK;
    BlockQ6_K& out = dst[b];
    float scales[kQ6SubBlocks];
    float peak = 0.0f;  // signed sub-block scale of largest magnitude
    for (int j = 0; j < kQ6SubBlocks; ++j) {
      scales[j] = fit_q6_K_sub_block(x + j * kQ6SubSize);
      if (std::fabs(scales[j]) > std::fabs(peak)) peak = scales[j];
    }
    // int8 scales: the peak maps to -128 (the side with one more level).
    out.d = float_to_half(-peak / 128.0f);
    const float d = half_to_float(out.d);
    int8_t sc[kQ6SubBlocks];
    for (int j = 0; j < kQ6SubBlocks; ++j) {
      sc[j] = d != 0.0f ? static_cast<int8_t>(std::clamp(round_to_int(scales[j] / d), -128, 127))
                        : int8_t{0};
      out.scales[j] = sc[j];
    }
    uint8_t q[kQKK];  // biased by 32: 0..63
    for (int j = 0; j < kQ6SubBlocks; ++j) {
      const float scale = d * sc[j];
      for (int i = 0; i < kQ6SubSize; ++i) {
        const int idx = j * kQ6SubSize + i;
        const int v = scale != 0.0f ? std::clamp(round_to_int(x[idx] / scale), -32, 31) : 0;
        q[idx] = static_cast<uint8_t>(v + 32);
      }
    }
    // Per half of 128 values: ql[l] holds values l (low nibble) and l+64 (high),
    // ql[l+32] values l+32 and l+96; qh[l] the top two bits of l, l+32, l+64, l+96.
    for (int h = 0; h < 2; ++h) {
      const uint8_t* qv = q + 128 * h;
      uint8_t* ql = out.ql + 64 * h;
      uint8_t* qh = out.qh + 32 * h;
      for (int l = 0; l < 32; ++l) {
        ql[l] = static_cast<uint8_t>((qv[l] & 15) | ((qv[l + 64] & 15) << 4));
        ql[l + 32] = static_cast<uint8_t>((qv[l + 32] & 15) | ((qv[l + 96] & 15) << 4));
        qh[l] = static_cast<uint8_t>((qv[l] >> 4) | ((qv[l + 32] >> 4) << 2) |
                                     ((qv[l + 64] >> 4) << 4) | ((qv[l + 96] >> 4) << 6));
      }
    }
  }
}

void dequantize_row_q6_K(const BlockQ6_K* src, float* dst, int64_t n) {
  check_row_length(n, "dequantize_row_q6_K");
  for (int64_t b = 0; b < n / kQKK; ++b) {
    const BlockQ6_K& blk = src[b];
    const float d = half_to_float(blk.d);
    for (int h = 0; h < 2; ++h) {
      const uint8_t* ql = blk.ql + 64 * h;
      const uint8_t* qh = blk.qh + 32 * h;
      const int8_t* sc = blk.scales + 8 * h;
      float* y = dst + b * kQKK + 128 * h;
      for (int l = 0; l < 32; ++l) {
        const int s = l / 16;
        const int q0 = ((ql[l] & 15) | (((qh[l] >> 0) & 3) << 4)) - 32;
        const int q1 = ((ql[l + 32] & 15) | (((qh[l] >> 2) & 3) << 4)) - 32;
        const int q2 = ((ql[l] >> 4) | (((qh[l] >> 4) & 3) << 4)) - 32;
        const int q3 = ((ql[l + 32] >> 4) | (((qh[l] >> 6) & 3) << 4)) - 32;
        y[l] = d * static_cast<float>(sc[s]) * static_cast<float>(q0);
        y[l + 32] = d * static_cast<float>(sc[s + 2]) * static_cast<float>(q1);
        y[l + 64] = d * static_cast<float>(sc[s + 4]) * static_cast<float>(q2);
        y[l + 96] = d * static_cast<float>(sc[s + 6]) * static_cast<float>(q3);
      }
    }
  }
}

// ---------------------------------------------------------------- Q8_K ----

void quantize_row_q8_K(const float* src, BlockQ8_K* dst, int64_t n) {
  check_row_length(n, "quantize_row_q8_K");
  const __m256 sign_bit = _mm256_set1_ps(-0.0f);
  // packs interleaves the 128-bit lanes; this puts the 8 dwords back in order.
  const __m256i unshuffle = _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7);
  for (int64_t b = 0; b < n / kQKK; ++b) {
    const float* x = src + b * kQKK;
    BlockQ8_K& out = dst[b];
    __m256 vmax = _mm256_setzero_ps();
    for (int i = 0; i < kQKK; i += 8) {
      vmax = _mm256_max_ps(vmax, _mm256_andnot_ps(sign_bit, _mm256_loadu_ps(x + i)));
    }
    __m128 m4 = _mm_max_ps(_mm256_castps256_ps128(vmax), _mm256_extractf128_ps(vmax, 1));
    m4 = _mm_max_ps(m4, _mm_movehl_ps(m4, m4));
    m4 = _mm_max_ss(m4, _mm_movehdup_ps(m4));
    const float absmax = _mm_cvtss_f32(m4);
    if (absmax == 0.0f) {
      out.d = 0.0f;
      std::memset(out.qs, 0, sizeof(out.qs));
      std::memset(out.bsums, 0, sizeof(out.bsums));
      continue;
    }
    // |x·127/absmax| ≤ 127 up to rounding, so the saturating packs never clip
    // and round-to-nearest-even conversion gives exactly lrintf's result.
    const __m256 inv_scale = _mm256_set1_ps(127.0f / absmax);
    for (int i = 0; i < kQKK; i += 32) {
      __m256i v[4];
      for (int k = 0; k < 4; ++k) {
        v[k] = _mm256_cvtps_epi32(_mm256_mul_ps(_mm256_loadu_ps(x + i + 8 * k), inv_scale));
      }
      const __m256i w16 = _mm256_packs_epi32(v[0], v[1]);
      const __m256i w16b = _mm256_packs_epi32(v[2], v[3]);
      const __m256i q8 = _mm256_permutevar8x32_epi32(_mm256_packs_epi16(w16, w16b), unshuffle);
      _mm256_storeu_si256(reinterpret_cast<__m256i*>(out.qs + i), q8);
    }
    for (int g = 0; g < kQKK / 16; ++g) {
      int sum = 0;
      for (int i = 0; i < 16; ++i) sum += out.qs[16 * g + i];
      out.bsums[g] = static_cast<int16_t>(sum);
    }
    out.d = absmax / 127.0f;
  }
}

void dequantize_row_q8_K(const BlockQ8_K* src, float* dst, int64_t n) {
  check_row_length(n, "dequantize_row_q8_K");
  for (int64_t b = 0; b < n / kQKK; ++b) {
    for (int i = 0; i < kQKK; ++i) dst[b * kQKK + i] = src[b].d * static_cast<float>(src[b].qs[i]);
  }
}

// ----------------------------------------------------------- dot products ----
//
// Per super-block both the AVX2 and the reference versions compute the same
// exact int32 sums and then combine them into the float total with the same
// float expression, in block order. The int32 sums cannot overflow: for Q4_K
// |Σ sc·q·x| ≤ 63·15·128·256 ≈ 3.1e7, for Q6_K |Σ sc·q·x| ≤ 128·63·128·256 ≈ 2.6e8.

namespace {

inline float q4_K_block_value(const BlockQ4_K& w, const BlockQ8_K& x, int32_t sum_qx,
                              int32_t sum_min) {
  const float d = x.d * half_to_float(w.d);
  const float dmin = x.d * half_to_float(w.dmin);
  return d * static_cast<float>(sum_qx) - dmin * static_cast<float>(sum_min);
}

inline float q6_K_block_value(const BlockQ6_K& w, const BlockQ8_K& x, int32_t sum_qx) {
  return x.d * half_to_float(w.d) * static_cast<float>(sum_qx);
}

}  // namespace

float dot_q4_K_q8_K_ref(int64_t n, const BlockQ4_K* w, const BlockQ8_K* x) {
  check_row_length(n, "dot_q4_K_q8_K_ref");
  float total = 0.0f;
  for (int64_t b = 0; b < n / kQKK; ++b) {
    uint8_t sc[kQ4SubBlocks], mn[kQ4SubBlocks];
    unpack_q4_K_scales(w[b].scales, sc, mn);
    int32_t sum_qx = 0, sum_min = 0;
    for (int g = 0; g < kQKK / 64; ++g) {
      int32_t lo = 0, hi = 0;
      for (int l = 0; l < 32; ++l) {
        const uint8_t byte = w[b].qs[32 * g + l];
        lo += (byte & 15) * x[b].qs[64 * g + l];
        hi += (byte >> 4) * x[b].qs[64 * g + 32 + l];
      }
      sum_qx += sc[2 * g] * lo + sc[2 * g + 1] * hi;
    }
    for (int j = 0; j < kQ4SubBlocks; ++j) {
      sum_min += mn[j] * (x[b].bsums[2 * j] + x[b].bsums[2 * j + 1]);
    }
    total += q4_K_block_value(w[b], x[b], sum_qx, sum_min);
  }
  return total;
}

float dot_q4_K_q8_K(int64_t n, const BlockQ4_K* w, const BlockQ8_K* x) {
  check_row_length(n, "dot_q4_K_q8_K");
  const __m256i low_nibbles = _mm256_set1_epi8(15);
  float total = 0.0f;
  for (int64_t b = 0; b < n / kQKK; ++b) {
    const BlockQ4_K& wb = w[b];
    const BlockQ8_K& xb = x[b];
    prefetch_block_ahead(w + b);
    alignas(16) uint8_t scale_bytes[16];  // 8 scales, then 8 mins
    unpack_q4_K_scales_fast(wb.scales, scale_bytes);
    const __m128i sc_mn = _mm_load_si128(reinterpret_cast<const __m128i*>(scale_bytes));

    // Min term: Σ_j m_j·(bsums[2j] + bsums[2j+1]) with each min repeated for its two bsums.
    const __m128i mins = _mm_unpackhi_epi8(sc_mn, sc_mn);
    const __m256i bsums = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(xb.bsums));
    const int32_t sum_min = hsum_i32(_mm256_madd_epi16(bsums, _mm256_cvtepu8_epi16(mins)));

    // Both lanes hold the 8 scales as int16.
    const __m256i scales16 = _mm256_broadcastsi128_si256(_mm_cvtepu8_epi16(sc_mn));
    __m256i acc = _mm256_setzero_si256();
    for (int g = 0; g < kQKK / 64; ++g) {
      const __m256i packed = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(wb.qs + 32 * g));
      const __m256i q_lo = _mm256_and_si256(packed, low_nibbles);
      const __m256i q_hi = _mm256_and_si256(_mm256_srli_epi16(packed, 4), low_nibbles);
      const __m256i x_lo = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(xb.qs + 64 * g));
      const __m256i x_hi =
          _mm256_loadu_si256(reinterpret_cast<const __m256i*>(xb.qs + 64 * g + 32));
      // u8·s8 pair sums fit int16 (|2·15·128| < 32768): no saturation.
      const __m256i p_lo = _mm256_maddubs_epi16(q_lo, x_lo);
      const __m256i p_hi = _mm256_maddubs_epi16(q_hi, x_hi);
      const __m256i s_lo = _mm256_shuffle_epi8(scales16, word_broadcast_mask(2 * g, 2 * g));
      const __m256i s_hi = _mm256_shuffle_epi8(scales16, word_broadcast_mask(2 * g + 1, 2 * g + 1));
      acc = _mm256_add_epi32(acc, _mm256_madd_epi16(p_lo, s_lo));
      acc = _mm256_add_epi32(acc, _mm256_madd_epi16(p_hi, s_hi));
    }
    total += q4_K_block_value(wb, xb, hsum_i32(acc), sum_min);
  }
  return total;
}

float dot_q6_K_q8_K_ref(int64_t n, const BlockQ6_K* w, const BlockQ8_K* x) {
  check_row_length(n, "dot_q6_K_q8_K_ref");
  float total = 0.0f;
  for (int64_t b = 0; b < n / kQKK; ++b) {
    int32_t sum_qx = 0;
    for (int h = 0; h < 2; ++h) {
      const uint8_t* ql = w[b].ql + 64 * h;
      const uint8_t* qh = w[b].qh + 32 * h;
      const int8_t* sc = w[b].scales + 8 * h;
      const int8_t* xq = x[b].qs + 128 * h;
      int32_t part[8] = {};  // per sub-block of 16 within this half
      for (int l = 0; l < 32; ++l) {
        const int s = l / 16;
        part[s] += (((ql[l] & 15) | (((qh[l] >> 0) & 3) << 4)) - 32) * xq[l];
        part[s + 2] += (((ql[l + 32] & 15) | (((qh[l] >> 2) & 3) << 4)) - 32) * xq[l + 32];
        part[s + 4] += (((ql[l] >> 4) | (((qh[l] >> 4) & 3) << 4)) - 32) * xq[l + 64];
        part[s + 6] += (((ql[l + 32] >> 4) | (((qh[l] >> 6) & 3) << 4)) - 32) * xq[l + 96];
      }
      for (int s = 0; s < 8; ++s) sum_qx += sc[s] * part[s];
    }
    total += q6_K_block_value(w[b], x[b], sum_qx);
  }
  return total;
}

float dot_q6_K_q8_K(int64_t n, const BlockQ6_K* w, const BlockQ8_K* x) {
  check_row_length(n, "dot_q6_K_q8_K");
  const __m256i low_nibbles = _mm256_set1_epi8(15);
  const __m256i bits_45 = _mm256_set1_epi8(0x30);
  float total = 0.0f;
  for (int64_t b = 0; b < n / kQKK; ++b) {
    const BlockQ6_K& wb = w[b];
    const BlockQ8_K& xb = x[b];
    prefetch_block_ahead(w + b);
    // Σ sc·(q−32)·x = Σ sc·q·x − 32·Σ_k sc_k·bsums[k]  (sub-blocks of 16 match bsums).
    const __m128i sc8 = _mm_loadu_si128(reinterpret_cast<const __m128i*>(wb.scales));
    const __m256i bsums = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(xb.bsums));
    const int32_t sum_bias = hsum_i32(_mm256_madd_epi16(bsums, _mm256_cvtepi8_epi16(sc8)));

    __m256i acc = _mm256_setzero_si256();
    for (int h = 0; h < 2; ++h) {
      // Both lanes hold this half's 8 scales as int16.
      const __m256i scales16 =
          _mm256_broadcastsi128_si256(_mm_cvtepi8_epi16((h ? _mm_srli_si128(sc8, 8) : sc8)));
      const __m256i ql0 = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(wb.ql + 64 * h));
      const __m256i ql1 = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(wb.ql + 64 * h + 32));
      const __m256i qh = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(wb.qh + 32 * h));
      // 6-bit values 0..63; the top bits moved to bits 4-5 of each byte.
      const __m256i q[4] = {
          _mm256_or_si256(_mm256_and_si256(ql0, low_nibbles),
                          _mm256_and_si256(_mm256_slli_epi16(qh, 4), bits_45)),
          _mm256_or_si256(_mm256_and_si256(ql1, low_nibbles),
                          _mm256_and_si256(_mm256_slli_epi16(qh, 2), bits_45)),
          _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(ql0, 4), low_nibbles),
                          _mm256_and_si256(qh, bits_45)),
          _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(ql1, 4), low_nibbles),
                          _mm256_and_si256(_mm256_srli_epi16(qh, 2), bits_45)),
      };
      for (int k = 0; k < 4; ++k) {
        const __m256i xv =
            _mm256_loadu_si256(reinterpret_cast<const __m256i*>(xb.qs + 128 * h + 32 * k));
        // u8·s8 pair sums fit int16 (|2·63·128| < 32768): no saturation.
        const __m256i prod = _mm256_maddubs_epi16(q[k], xv);
        // Values 0..15 of this 32 use scale 2k, values 16..31 scale 2k+1.
        const __m256i sc = _mm256_shuffle_epi8(scales16, word_broadcast_mask(2 * k, 2 * k + 1));
        acc = _mm256_add_epi32(acc, _mm256_madd_epi16(prod, sc));
      }
    }
    total += q6_K_block_value(wb, xb, hsum_i32(acc) - 32 * sum_bias);
  }
  return total;
}

}  // namespace parspec
