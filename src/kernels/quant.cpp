#include "kernels/quant.h"

#include <immintrin.h>

#include <algorithm>
#include <cctype>
#include <cmath>
#include <cstring>
#include <string>

#include "core/error.h"
#include "kernels/kquants.h"

namespace parspec {

// Vectorized, but exactly the scalar definition: d = f16(absmax / 127) (F16C
// rounds as fp32_to_fp16 does), q = round-half-even(x / d) with d the stored
// (f16-rounded) scale, so that dequantization inverts exactly the division
// done here. matmul quantizes its activations with this (and an AVX-512 build
// of the same operations), so it must stay fast and bit-stable.
int32_t quantize_block_q8_0(const float* x, BlockQ8_0& block) {
  const __m256 sign_bit = _mm256_set1_ps(-0.0f);
  const __m256 q_max = _mm256_set1_ps(127.0f), q_min = _mm256_set1_ps(-127.0f);
  __m256 v[4];
  __m256 amax = _mm256_setzero_ps();
  for (int i = 0; i < 4; ++i) {
    v[i] = _mm256_loadu_ps(x + 8 * i);
    // max(a, b) returns b when a is NaN: NaN inputs never become the scale.
    amax = _mm256_max_ps(_mm256_andnot_ps(sign_bit, v[i]), amax);
  }
  __m128 m4 = _mm_max_ps(_mm256_castps256_ps128(amax), _mm256_extractf128_ps(amax, 1));
  m4 = _mm_max_ps(m4, _mm_movehl_ps(m4, m4));
  m4 = _mm_max_ss(m4, _mm_movehdup_ps(m4));
  block.d = static_cast<uint16_t>(_cvtss_sh(_mm_cvtss_f32(m4) / 127.0f, _MM_FROUND_TO_NEAREST_INT));
  const float d = _cvtsh_ss(block.d);
  if (d == 0.0f) {
    std::memset(block.qs, 0, sizeof(block.qs));
    return 0;
  }
  const __m256 dv = _mm256_set1_ps(d);
  __m256i q[4];
  for (int i = 0; i < 4; ++i) {
    __m256 r =
        _mm256_round_ps(_mm256_div_ps(v[i], dv), _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
    // Clamp (NaN becomes -127): never -128, which the integer dot products rely on.
    r = _mm256_min_ps(_mm256_max_ps(r, q_min), q_max);
    q[i] = _mm256_cvtps_epi32(r);
  }
  // Pack 4x8 int32 to 32 int8; packs interleaves 128-bit lanes, the permute restores order.
  const __m256i bytes =
      _mm256_packs_epi16(_mm256_packs_epi32(q[0], q[1]), _mm256_packs_epi32(q[2], q[3]));
  _mm256_storeu_si256(
      reinterpret_cast<__m256i*>(block.qs),
      _mm256_permutevar8x32_epi32(bytes, _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7)));
  const __m256i s = _mm256_add_epi32(_mm256_add_epi32(q[0], q[1]), _mm256_add_epi32(q[2], q[3]));
  __m128i s4 = _mm_add_epi32(_mm256_castsi256_si128(s), _mm256_extracti128_si256(s, 1));
  s4 = _mm_add_epi32(s4, _mm_unpackhi_epi64(s4, s4));
  s4 = _mm_add_epi32(s4, _mm_shuffle_epi32(s4, 1));
  return _mm_cvtsi128_si32(s4);
}

namespace {

uint32_t float_bits(float f) {
  uint32_t u;
  std::memcpy(&u, &f, sizeof(u));
  return u;
}

float bits_float(uint32_t u) {
  float f;
  std::memcpy(&f, &u, sizeof(f));
  return f;
}

void quantize_q8_0(const float* src, BlockQ8_0* dst, int64_t n) {
  for (int64_t b = 0; b < n / kQK; ++b) quantize_block_q8_0(src + b * kQK, dst[b]);
}

void dequantize_q8_0(const BlockQ8_0* src, float* dst, int64_t n) {
  for (int64_t b = 0; b < n / kQK; ++b) {
    const __m256 d = _mm256_set1_ps(fp16_to_fp32(src[b].d));
    for (int i = 0; i < kQK; i += 8) {
      const __m128i q8 = _mm_loadl_epi64(reinterpret_cast<const __m128i*>(src[b].qs + i));
      const __m256 q = _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(q8));
      _mm256_storeu_ps(dst + b * kQK + i, _mm256_mul_ps(d, q));
    }
  }
}

void quantize_q4_0(const float* src, BlockQ4_0* dst, int64_t n) {
  for (int64_t b = 0; b < n / kQK; ++b) {
    const float* x = src + b * kQK;
    // The signed value of largest magnitude maps to -8, so the full range
    // -8..7 is used on the side where it matters.
    float amax = 0.0f, max = 0.0f;
    for (int i = 0; i < kQK; ++i) {
      if (std::fabs(x[i]) > amax) {
        amax = std::fabs(x[i]);
        max = x[i];
      }
    }
    const uint16_t d16 = fp32_to_fp16(max / -8.0f);
    const float d = fp16_to_fp32(d16);
    dst[b].d = d16;
    uint8_t q[kQK];
    for (int i = 0; i < kQK; ++i) {
      // Clamp in float before the cast (also maps NaN into range).
      const float v = d != 0.0f ? std::max(0.0f, std::min(15.0f, x[i] / d + 8.5f)) : 8.0f;
      q[i] = static_cast<uint8_t>(v);
    }
    for (int j = 0; j < kQK / 2; ++j) dst[b].qs[j] = static_cast<uint8_t>(q[j] | (q[j + 16] << 4));
  }
}

void dequantize_q4_0(const BlockQ4_0* src, float* dst, int64_t n) {
  const __m128i low_mask = _mm_set1_epi8(0x0f);
  const __m128i eight = _mm_set1_epi8(8);
  for (int64_t b = 0; b < n / kQK; ++b) {
    const __m256 d = _mm256_set1_ps(fp16_to_fp32(src[b].d));
    const __m128i packed = _mm_loadu_si128(reinterpret_cast<const __m128i*>(src[b].qs));
    // Low nibbles are elements 0..15, high nibbles 16..31.
    const __m128i halves[2] = {
        _mm_sub_epi8(_mm_and_si128(packed, low_mask), eight),
        _mm_sub_epi8(_mm_and_si128(_mm_srli_epi16(packed, 4), low_mask), eight)};
    float* out = dst + b * kQK;
    for (int h = 0; h < 2; ++h) {
      const __m256 lo = _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(halves[h]));
      const __m256 hi = _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(_mm_srli_si128(halves[h], 8)));
      _mm256_storeu_ps(out + 16 * h, _mm256_mul_ps(d, lo));
      _mm256_storeu_ps(out + 16 * h + 8, _mm256_mul_ps(d, hi));
    }
  }
}

void f16_to_f32_row(const uint16_t* src, float* dst, int64_t n) {
  int64_t i = 0;
  for (; i + 8 <= n; i += 8) {
    const __m128i h = _mm_loadu_si128(reinterpret_cast<const __m128i*>(src + i));
    _mm256_storeu_ps(dst + i, _mm256_cvtph_ps(h));
  }
  for (; i < n; ++i) dst[i] = fp16_to_fp32(src[i]);
}

void f32_to_f16_row(const float* src, uint16_t* dst, int64_t n) {
  int64_t i = 0;
  for (; i + 8 <= n; i += 8) {
    const __m128i h = _mm256_cvtps_ph(_mm256_loadu_ps(src + i), _MM_FROUND_TO_NEAREST_INT);
    _mm_storeu_si128(reinterpret_cast<__m128i*>(dst + i), h);
  }
  for (; i < n; ++i) dst[i] = fp32_to_fp16(src[i]);
}

void bf16_to_f32_row(const uint16_t* src, float* dst, int64_t n) {
  int64_t i = 0;
  for (; i + 8 <= n; i += 8) {
    const __m128i h = _mm_loadu_si128(reinterpret_cast<const __m128i*>(src + i));
    const __m256i w = _mm256_slli_epi32(_mm256_cvtepu16_epi32(h), 16);
    _mm256_storeu_ps(dst + i, _mm256_castsi256_ps(w));
  }
  for (; i < n; ++i) dst[i] = bf16_to_fp32(src[i]);
}

void f32_to_bf16_row(const float* src, uint16_t* dst, int64_t n) {
  for (int64_t i = 0; i < n; ++i) dst[i] = fp32_to_bf16(src[i]);
}

void copy_f32_row(const float* src, float* dst, int64_t n) {
  std::memcpy(dst, src, static_cast<size_t>(n) * sizeof(float));
}

// Adapts a typed row function to the table's void-pointer signature.
template <typename Block, auto fn>
void dequantize_as(const void* src, float* dst, int64_t n) {
  fn(static_cast<const Block*>(src), dst, n);
}
template <typename Block, auto fn>
void quantize_as(const float* src, void* dst, int64_t n) {
  fn(src, static_cast<Block*>(dst), n);
}

// The type-traits table. Order: how parse_dtype's error message lists them.
constexpr TypeInfo kTypes[] = {
    {DType::F32, "f32", 1, 4, true, 0, dequantize_as<float, copy_f32_row>,
     quantize_as<float, copy_f32_row>},
    {DType::F16, "f16", 1, 2, true, 1, dequantize_as<uint16_t, f16_to_f32_row>,
     quantize_as<uint16_t, f32_to_f16_row>},
    {DType::BF16, "bf16", 1, 2, true, 32, dequantize_as<uint16_t, bf16_to_f32_row>,
     quantize_as<uint16_t, f32_to_bf16_row>},
    {DType::Q8_0, "q8_0", kQK, sizeof(BlockQ8_0), true, 7,
     dequantize_as<BlockQ8_0, dequantize_q8_0>, quantize_as<BlockQ8_0, quantize_q8_0>},
    {DType::Q4_0, "q4_0", kQK, sizeof(BlockQ4_0), true, 2,
     dequantize_as<BlockQ4_0, dequantize_q4_0>, quantize_as<BlockQ4_0, quantize_q4_0>},
    // file type 14 is Q4_K_S: every weight q4_K.
    {DType::Q4_K, "q4_K", kQKK, sizeof(BlockQ4_K), true, 14,
     dequantize_as<BlockQ4_K, dequantize_row_q4_K>, quantize_as<BlockQ4_K, quantize_row_q4_K>},
    {DType::Q6_K, "q6_K", kQKK, sizeof(BlockQ6_K), true, 18,
     dequantize_as<BlockQ6_K, dequantize_row_q6_K>, quantize_as<BlockQ6_K, quantize_row_q6_K>},
    // Activations only: the dot partner of q4_K/q6_K in matmul.
    {DType::Q8_K, "q8_K", kQKK, sizeof(BlockQ8_K), false, std::nullopt,
     dequantize_as<BlockQ8_K, dequantize_row_q8_K>, quantize_as<BlockQ8_K, quantize_row_q8_K>},
};

const TypeInfo* find_type(uint32_t id) {
  for (const TypeInfo& info : kTypes) {
    if (static_cast<uint32_t>(info.type) == id) return &info;
  }
  return nullptr;
}

std::string lowercase(std::string_view s) {
  std::string lower(s);
  for (char& c : lower) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return lower;
}

const TypeInfo& check_row(DType type, int64_t n) {
  const TypeInfo& info = type_info(type);
  check(n >= 0 && n % info.block_elems == 0, "row of ", n, " elements is not a multiple of the ",
        info.name, " block size ", info.block_elems);
  return info;
}

}  // namespace

bool is_weight_type(uint32_t id) {
  const TypeInfo* info = find_type(id);
  return info != nullptr && info->weight;
}

const TypeInfo& type_info(DType type) {
  const TypeInfo* info = find_type(static_cast<uint32_t>(type));
  check(info != nullptr, "unknown tensor type id ", static_cast<uint32_t>(type));
  return *info;
}

DType parse_dtype(std::string_view name) {
  const std::string wanted = lowercase(name);
  std::string expected;
  for (const TypeInfo& info : kTypes) {
    if (!info.weight) continue;
    const std::string candidate = lowercase(info.name);
    if (candidate == wanted) return info.type;
    expected += (expected.empty() ? "" : ", ") + candidate;
  }
  fail("unknown tensor type '", name, "' (expected one of ", expected, ")");
}

size_t row_bytes(DType type, int64_t n) {
  const TypeInfo& info = check_row(type, n);
  return static_cast<size_t>(n / info.block_elems) * info.block_bytes;
}

float fp16_to_fp32(uint16_t h) {
  const uint32_t sign = static_cast<uint32_t>(h & 0x8000) << 16;
  const uint32_t exponent = (h >> 10) & 0x1f;
  const uint32_t mantissa = h & 0x3ff;
  if (exponent == 0x1f) {
    // Inf stays inf; a NaN keeps its payload and comes out quiet, as F16C does.
    return bits_float(sign | 0x7f800000 | (mantissa << 13) | (mantissa != 0 ? 0x400000 : 0));
  }
  if (exponent == 0) {
    // Zero or subnormal: mantissa * 2^-24 is exact in f32.
    const float magnitude = static_cast<float>(mantissa) * 0x1p-24f;
    return sign != 0 ? -magnitude : magnitude;
  }
  return bits_float(sign | ((exponent + 112) << 23) | (mantissa << 13));
}

uint16_t fp32_to_fp16(float f) {
  const uint32_t x = float_bits(f);
  const uint16_t sign = static_cast<uint16_t>((x >> 16) & 0x8000);
  const uint32_t ax = x & 0x7fffffff;
  if (ax > 0x7f800000) {
    // NaN: quiet, keep the top of the payload (what F16C does).
    return static_cast<uint16_t>(sign | 0x7e00 | ((ax >> 13) & 0x3ff));
  }
  // 65520 = 65504 + half an ulp: it and everything above round to inf.
  if (ax >= 0x477ff000) return static_cast<uint16_t>(sign | 0x7c00);
  if (ax >= 0x38800000) {
    // Normal half: rebias the exponent, round the 13 dropped bits to nearest even.
    // A carry out of the mantissa correctly bumps the exponent.
    const uint32_t h = (ax - 0x38000000) >> 13;
    const uint32_t rest = ax & 0x1fff;
    const uint32_t round_up = rest > 0x1000 || (rest == 0x1000 && (h & 1));
    return static_cast<uint16_t>(sign | (h + round_up));
  }
  // Below 2^-25 everything rounds to zero (2^-25 itself is a tie to even 0).
  if (ax <= 0x33000000) return sign;
  // Subnormal half: the value in units of 2^-24 is mantissa * 2^(e - 126).
  const uint32_t e = ax >> 23;
  const uint32_t mantissa = (ax & 0x7fffff) | 0x800000;
  const uint32_t shift = 126 - e;  // 14..24
  const uint32_t h = mantissa >> shift;
  const uint32_t rest = mantissa & ((1u << shift) - 1);
  const uint32_t half = 1u << (shift - 1);
  const uint32_t round_up = rest > half || (rest == half && (h & 1));
  return static_cast<uint16_t>(sign | (h + round_up));
}

float bf16_to_fp32(uint16_t h) {
  return bits_float(static_cast<uint32_t>(h) << 16);
}

uint16_t fp32_to_bf16(float f) {
  const uint32_t x = float_bits(f);
  if ((x & 0x7fffffff) > 0x7f800000) return static_cast<uint16_t>((x >> 16) | 0x40);  // quiet NaN
  // Round to nearest even; an overflow of the largest finite values gives inf.
  return static_cast<uint16_t>((x + 0x7fff + ((x >> 16) & 1)) >> 16);
}

void dequantize_row(DType type, const void* src, float* dst, int64_t n) {
  check_row(type, n).dequantize_row(src, dst, n);
}

void quantize_row(DType type, const float* src, void* dst, int64_t n) {
  check_row(type, n).quantize_row(src, dst, n);
}

}  // namespace parspec
