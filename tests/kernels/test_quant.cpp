// Type table, f16/bf16 conversions (exhaustive and against F16C), and the
// row quantizers/dequantizers of every type (hand-built blocks with known
// values, round-trip error bounds).
#include <gtest/gtest.h>
#include <immintrin.h>

#include <cmath>
#include <cstring>
#include <random>
#include <vector>

#include "core/error.h"
#include "kernels/kquants.h"
#include "kernels/quant.h"

namespace parspec {
namespace {

uint32_t bits_of(float f) {
  uint32_t u;
  std::memcpy(&u, &f, sizeof(u));
  return u;
}

float float_of(uint32_t u) {
  float f;
  std::memcpy(&f, &u, sizeof(f));
  return f;
}

bool half_is_nan(uint16_t h) {
  return (h & 0x7c00) == 0x7c00 && (h & 0x3ff) != 0;
}

std::vector<float> gaussian_values(int64_t n, uint32_t seed, float sigma = 1.0f) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> dist(0.0f, sigma);
  std::vector<float> v(n);
  for (float& x : v) x = dist(rng);
  return v;
}

double relative_rms_error(const std::vector<float>& ref, const std::vector<float>& got) {
  double err = 0, norm = 0;
  for (size_t i = 0; i < ref.size(); ++i) {
    const double diff = static_cast<double>(got[i]) - ref[i];
    err += diff * diff;
    norm += static_cast<double>(ref[i]) * ref[i];
  }
  return std::sqrt(err / norm);
}

std::vector<float> round_trip(DType type, const std::vector<float>& x) {
  const int64_t n = static_cast<int64_t>(x.size());
  std::vector<uint8_t> packed(row_bytes(type, n));
  std::vector<float> y(n);
  quantize_row(type, x.data(), packed.data(), n);
  dequantize_row(type, packed.data(), y.data(), n);
  return y;
}

// ------------------------------------------------------------ type table ----

TEST(QuantTypes, TableMatchesGgufLayouts) {
  struct Expected {
    DType type;
    const char* name;
    int64_t elems;
    size_t bytes;
    uint32_t id;
  };
  const Expected table[] = {
      {DType::F32, "f32", 1, 4, 0},        {DType::F16, "f16", 1, 2, 1},
      {DType::Q4_0, "q4_0", 32, 18, 2},    {DType::Q8_0, "q8_0", 32, 34, 8},
      {DType::Q4_K, "q4_K", 256, 144, 12}, {DType::Q6_K, "q6_K", 256, 210, 14},
      {DType::Q8_K, "q8_K", 256, 292, 15}, {DType::BF16, "bf16", 1, 2, 30},
  };
  for (const auto& e : table) {
    const TypeInfo& info = type_info(e.type);
    EXPECT_EQ(info.name, e.name);
    EXPECT_EQ(info.block_elems, e.elems) << e.name;
    EXPECT_EQ(info.block_bytes, e.bytes) << e.name;
    EXPECT_EQ(static_cast<uint32_t>(e.type), e.id) << e.name;
    EXPECT_EQ(is_weight_type(e.id), e.type != DType::Q8_K) << e.name;
  }
  for (uint32_t id : {3u, 6u, 7u, 9u, 10u, 11u, 13u, 16u, 29u, 31u, 1000u}) {
    EXPECT_FALSE(is_weight_type(id)) << id;
  }
  EXPECT_THROW(type_info(static_cast<DType>(7)), Error);
}

TEST(QuantTypes, ParseDtypeIsCaseInsensitive) {
  EXPECT_EQ(parse_dtype("f32"), DType::F32);
  EXPECT_EQ(parse_dtype("F16"), DType::F16);
  EXPECT_EQ(parse_dtype("bf16"), DType::BF16);
  EXPECT_EQ(parse_dtype("Q8_0"), DType::Q8_0);
  EXPECT_EQ(parse_dtype("q4_0"), DType::Q4_0);
  EXPECT_EQ(parse_dtype("q4_k"), DType::Q4_K);
  EXPECT_EQ(parse_dtype("Q4_K"), DType::Q4_K);
  EXPECT_EQ(parse_dtype("q6_K"), DType::Q6_K);
  EXPECT_THROW(parse_dtype("q5_0"), Error);
  EXPECT_THROW(parse_dtype("q8_k"), Error);  // activation type, not a weight type
  EXPECT_THROW(parse_dtype(""), Error);
  EXPECT_THROW(parse_dtype("f32 "), Error);
}

TEST(QuantTypes, RowBytesChecksBlockMultiple) {
  EXPECT_EQ(row_bytes(DType::F32, 7), 28u);
  EXPECT_EQ(row_bytes(DType::F16, 7), 14u);
  EXPECT_EQ(row_bytes(DType::BF16, 0), 0u);
  EXPECT_EQ(row_bytes(DType::Q8_0, 64), 68u);
  EXPECT_EQ(row_bytes(DType::Q4_0, 4096), 128u * 18u);
  EXPECT_EQ(row_bytes(DType::Q4_K, 512), 288u);
  EXPECT_EQ(row_bytes(DType::Q6_K, 256), 210u);
  EXPECT_EQ(row_bytes(DType::Q8_K, 256), 292u);
  EXPECT_THROW(row_bytes(DType::Q8_0, 33), Error);
  EXPECT_THROW(row_bytes(DType::Q4_K, 32), Error);
  EXPECT_THROW(row_bytes(DType::F32, -1), Error);
  std::vector<float> out(48);
  std::vector<uint8_t> in(100);
  EXPECT_THROW(dequantize_row(DType::Q4_0, in.data(), out.data(), 48), Error);
  EXPECT_THROW(quantize_row(DType::Q8_0, out.data(), in.data(), 48), Error);
}

// ------------------------------------------------------------------ fp16 ----

TEST(QuantFp16, KnownValues) {
  EXPECT_EQ(fp32_to_fp16(1.0f), 0x3c00);
  EXPECT_EQ(fp32_to_fp16(-2.0f), 0xc000);
  EXPECT_EQ(fp32_to_fp16(0.0f), 0x0000);
  EXPECT_EQ(fp32_to_fp16(-0.0f), 0x8000);
  EXPECT_EQ(fp32_to_fp16(65504.0f), 0x7bff);
  EXPECT_EQ(fp32_to_fp16(65519.996f), 0x7bff);
  EXPECT_EQ(fp32_to_fp16(65520.0f), 0x7c00);  // tie between 65504 and 65536: even is inf
  EXPECT_EQ(fp32_to_fp16(1e9f), 0x7c00);
  EXPECT_EQ(fp32_to_fp16(-INFINITY), 0xfc00);
  EXPECT_EQ(fp32_to_fp16(0.1f), 0x2e66);
  EXPECT_EQ(fp32_to_fp16(1.0f + 0x1p-11f), 0x3c00);      // tie, rounds down to even
  EXPECT_EQ(fp32_to_fp16(1.0f + 3 * 0x1p-11f), 0x3c02);  // tie, rounds up to even
  EXPECT_EQ(fp32_to_fp16(0x1p-14f), 0x0400);             // smallest normal
  EXPECT_EQ(fp32_to_fp16(0x1p-24f), 0x0001);             // smallest subnormal
  EXPECT_EQ(fp32_to_fp16(0x1p-25f), 0x0000);             // tie to even zero
  EXPECT_EQ(fp32_to_fp16(0x1.000002p-25f), 0x0001);
  EXPECT_EQ(fp32_to_fp16(3 * 0x1p-25f), 0x0002);         // tie 1.5 ulp -> 2
  EXPECT_EQ(fp32_to_fp16(0x1p-14f - 0x1p-25f), 0x0400);  // rounds up into the normals
  EXPECT_EQ(fp32_to_fp16(1e-10f), 0x0000);
  EXPECT_TRUE(half_is_nan(fp32_to_fp16(NAN)));
  EXPECT_TRUE(half_is_nan(fp32_to_fp16(float_of(0x7f800001))));  // payload only in low bits

  EXPECT_EQ(fp16_to_fp32(0x3c00), 1.0f);
  EXPECT_EQ(fp16_to_fp32(0x3555), 0.333251953125f);
  EXPECT_EQ(fp16_to_fp32(0x7bff), 65504.0f);
  EXPECT_EQ(fp16_to_fp32(0x0001), 0x1p-24f);
  EXPECT_EQ(fp16_to_fp32(0x03ff), 1023 * 0x1p-24f);
  EXPECT_EQ(fp16_to_fp32(0x8001), -0x1p-24f);
  EXPECT_EQ(bits_of(fp16_to_fp32(0x8000)), 0x80000000u);
  EXPECT_EQ(fp16_to_fp32(0x7c00), INFINITY);
  EXPECT_EQ(fp16_to_fp32(0xfc00), -INFINITY);
  EXPECT_TRUE(std::isnan(fp16_to_fp32(0x7e00)));
  EXPECT_TRUE(std::isnan(fp16_to_fp32(0x7c01)));
}

TEST(QuantFp16, AllHalvesRoundTripAndMatchF16C) {
  for (uint32_t h = 0; h < 65536; ++h) {
    const uint16_t half = static_cast<uint16_t>(h);
    const float f = fp16_to_fp32(half);
    ASSERT_EQ(bits_of(f), bits_of(_cvtsh_ss(half))) << std::hex << h;
    if (half_is_nan(half)) {
      ASSERT_TRUE(std::isnan(f)) << std::hex << h;
      ASSERT_TRUE(half_is_nan(fp32_to_fp16(f))) << std::hex << h;
    } else {
      ASSERT_EQ(fp32_to_fp16(f), half) << std::hex << h;
    }
  }
}

TEST(QuantFp16, ScalarRoundingMatchesF16C) {
  // Every sign/exponent/top-mantissa pattern, with the low 13 bits (the ones a
  // normal half drops) set to the interesting rounding cases; subnormal-half
  // ties have these bits zero and are covered by the enumerated upper bits.
  const uint32_t low_bits[] = {0x0000, 0x0001, 0x0fff, 0x1000, 0x1001, 0x1fff, 0x0800, 0x1800};
  for (uint32_t upper = 0; upper < (1u << 19); ++upper) {
    for (uint32_t low : low_bits) {
      const float f = float_of((upper << 13) | low);
      const uint16_t expected = static_cast<uint16_t>(_cvtss_sh(f, _MM_FROUND_TO_NEAREST_INT));
      ASSERT_EQ(fp32_to_fp16(f), expected) << std::hex << bits_of(f);
    }
  }
}

TEST(QuantFp16, RowConversionsMatchScalar) {
  // 8-wide F16C body and scalar tail must agree with the scalar functions.
  const int64_t n = 37;
  std::vector<float> x = gaussian_values(n, 11, 300.0f);
  x[3] = 1e-6f;
  x[4] = -70000.0f;
  x[5] = 0x1p-25f;
  std::vector<uint16_t> h(n);
  quantize_row(DType::F16, x.data(), h.data(), n);
  std::vector<float> back(n);
  dequantize_row(DType::F16, h.data(), back.data(), n);
  for (int64_t i = 0; i < n; ++i) {
    EXPECT_EQ(h[i], fp32_to_fp16(x[i])) << i;
    EXPECT_EQ(bits_of(back[i]), bits_of(fp16_to_fp32(h[i]))) << i;
  }
}

// ------------------------------------------------------------------ bf16 ----

// Independent nearest-even reference: compare distances to both candidates in double.
uint16_t bf16_reference(float f) {
  const uint32_t x = bits_of(f);
  const uint32_t down = x & 0xffff0000u;
  const double lo = float_of(down);
  const double hi_d = (down & 0x7fffffff) == 0x7f7f0000
                          ? std::ldexp(1.0, 128) * (f < 0 ? -1 : 1)
                          : static_cast<double>(float_of(down + 0x10000));
  const double dist_lo = std::fabs(static_cast<double>(f) - lo);
  const double dist_hi = std::fabs(static_cast<double>(f) - hi_d);
  if (dist_lo < dist_hi) return static_cast<uint16_t>(down >> 16);
  if (dist_hi < dist_lo) return static_cast<uint16_t>((down >> 16) + 1);
  return static_cast<uint16_t>((down >> 16) + ((down >> 16) & 1));
}

TEST(QuantBf16, KnownValues) {
  EXPECT_EQ(fp32_to_bf16(1.0f), 0x3f80);
  EXPECT_EQ(fp32_to_bf16(-2.0f), 0xc000);
  EXPECT_EQ(fp32_to_bf16(float_of(0x3f808000)), 0x3f80);  // tie, even stays
  EXPECT_EQ(fp32_to_bf16(float_of(0x3f818000)), 0x3f82);  // tie, odd rounds up
  EXPECT_EQ(fp32_to_bf16(float_of(0x3f808001)), 0x3f81);
  EXPECT_EQ(fp32_to_bf16(float_of(0x7f7fffff)), 0x7f80);  // overflows to inf
  EXPECT_EQ(fp32_to_bf16(INFINITY), 0x7f80);
  EXPECT_EQ(fp32_to_bf16(float_of(0x00010000)), 0x0001);  // subnormal stays exact
  EXPECT_EQ(fp32_to_bf16(float_of(0x80008000)), 0x8000);  // tiny negative tie to -0
  const uint16_t nan_small_payload = fp32_to_bf16(float_of(0x7f800001));
  EXPECT_TRUE(std::isnan(bf16_to_fp32(nan_small_payload)));  // must not become inf
  EXPECT_EQ(bf16_to_fp32(0x3f80), 1.0f);
  EXPECT_EQ(bf16_to_fp32(0xc049), -3.140625f);
}

TEST(QuantBf16, AllValuesRoundTripAndRoundingMatchesReference) {
  for (uint32_t h = 0; h < 65536; ++h) {
    const float f = bf16_to_fp32(static_cast<uint16_t>(h));
    if (std::isnan(f)) {
      ASSERT_TRUE(std::isnan(bf16_to_fp32(fp32_to_bf16(f))));
    } else {
      ASSERT_EQ(fp32_to_bf16(f), h) << std::hex << h;
    }
  }
  std::mt19937 rng(5);
  const uint32_t low_bits[] = {0x0000, 0x0001, 0x7fff, 0x8000, 0x8001, 0xffff};
  for (uint32_t upper = 0; upper < 65536; ++upper) {
    for (uint32_t low : low_bits) {
      const float f = float_of((upper << 16) | low);
      if (std::isnan(f)) continue;
      ASSERT_EQ(fp32_to_bf16(f), bf16_reference(f)) << std::hex << bits_of(f);
    }
    const float r = float_of((upper << 16) | (rng() & 0xffff));
    if (!std::isnan(r)) {
      ASSERT_EQ(fp32_to_bf16(r), bf16_reference(r)) << std::hex << bits_of(r);
    }
  }
}

TEST(QuantBf16, RowConversionsMatchScalar) {
  const int64_t n = 29;
  std::vector<float> x = gaussian_values(n, 12, 1e20f);
  std::vector<uint16_t> h(n);
  quantize_row(DType::BF16, x.data(), h.data(), n);
  std::vector<float> back(n);
  dequantize_row(DType::BF16, h.data(), back.data(), n);
  for (int64_t i = 0; i < n; ++i) {
    EXPECT_EQ(h[i], fp32_to_bf16(x[i])) << i;
    EXPECT_EQ(bits_of(back[i]), static_cast<uint32_t>(h[i]) << 16) << i;
  }
}

TEST(QuantF32, RowIsCopied) {
  const std::vector<float> x = gaussian_values(5, 3);
  EXPECT_EQ(round_trip(DType::F32, x), x);
}

// ------------------------------------------------------------------ Q8_0 ----

TEST(QuantQ8_0, DequantizesHandBuiltBlock) {
  BlockQ8_0 blocks[2];
  blocks[0].d = fp32_to_fp16(0.5f);
  blocks[1].d = fp32_to_fp16(-0.25f);
  for (int i = 0; i < kQK; ++i) {
    blocks[0].qs[i] = static_cast<int8_t>(i * 8 - 128);  // -128 .. 120
    blocks[1].qs[i] = static_cast<int8_t>(i - 16);
  }
  float y[64];
  dequantize_row(DType::Q8_0, blocks, y, 64);
  for (int i = 0; i < kQK; ++i) {
    EXPECT_EQ(y[i], 0.5f * (i * 8 - 128)) << i;
    EXPECT_EQ(y[32 + i], -0.25f * (i - 16)) << i;
  }
}

TEST(QuantQ8_0, QuantizerFollowsDefinition) {
  // d = f16(absmax / 127); q = round-half-even(x / d) with the stored d.
  const int64_t n = 256;
  std::vector<float> x = gaussian_values(n, 21, 2.0f);
  for (int i = 32; i < 64; ++i) x[i] = 0.0f;       // all-zero block
  for (int i = 64; i < 96; ++i) x[i] = i - 80.0f;  // values that are exact ties
  x[100] = -40.0f;                                 // negative absmax
  std::vector<BlockQ8_0> q(n / kQK);
  quantize_row(DType::Q8_0, x.data(), q.data(), n);
  for (int64_t b = 0; b < n / kQK; ++b) {
    float amax = 0.0f;
    for (int i = 0; i < kQK; ++i) amax = std::max(amax, std::fabs(x[b * kQK + i]));
    const uint16_t d16 = fp32_to_fp16(amax / 127.0f);
    ASSERT_EQ(q[b].d, d16) << b;
    const float d = fp16_to_fp32(d16);
    for (int i = 0; i < kQK; ++i) {
      const int expected = d == 0.0f ? 0 : static_cast<int>(std::nearbyint(x[b * kQK + i] / d));
      ASSERT_EQ(q[b].qs[i], std::clamp(expected, -127, 127)) << b << " " << i;
    }
  }
  EXPECT_EQ(q[1].d, 0);
  EXPECT_EQ(q[3].qs[4], -127);  // the negative absmax maps to -127
}

TEST(QuantQ8_0, RoundTripErrorWithinHalfStep) {
  const int64_t n = 4096;
  const std::vector<float> x = gaussian_values(n, 22, 3.0f);
  std::vector<BlockQ8_0> q(n / kQK);
  quantize_row(DType::Q8_0, x.data(), q.data(), n);
  std::vector<float> y(n);
  dequantize_row(DType::Q8_0, q.data(), y.data(), n);
  for (int64_t i = 0; i < n; ++i) {
    const float d = fp16_to_fp32(q[i / kQK].d);
    ASSERT_LE(std::fabs(y[i] - x[i]), 0.5001f * d) << i;
  }
  EXPECT_LT(relative_rms_error(x, y), 0.01);
}

// ------------------------------------------------------------------ Q4_0 ----

TEST(QuantQ4_0, DequantizesHandBuiltBlock) {
  BlockQ4_0 block;
  block.d = fp32_to_fp16(2.0f);
  for (int j = 0; j < 16; ++j) block.qs[j] = static_cast<uint8_t>(j | ((15 - j) << 4));
  float y[32];
  dequantize_row(DType::Q4_0, &block, y, 32);
  for (int j = 0; j < 16; ++j) {
    EXPECT_EQ(y[j], 2.0f * (j - 8)) << j;            // low nibble: element j
    EXPECT_EQ(y[j + 16], 2.0f * (15 - j - 8)) << j;  // high nibble: element j + 16
  }
}

TEST(QuantQ4_0, QuantizerFollowsDefinition) {
  float x[32];
  for (int i = 0; i < 32; ++i) x[i] = static_cast<float>(i % 9) - 3.0f;  // -3 .. 5
  x[7] = 16.0f;                                                          // signed max: d = -2
  BlockQ4_0 block;
  quantize_row(DType::Q4_0, x, &block, 32);
  EXPECT_EQ(block.d, fp32_to_fp16(-2.0f));
  for (int i = 0; i < 32; ++i) {
    const int q = i < 16 ? block.qs[i] & 15 : block.qs[i - 16] >> 4;
    // q = min(15, (int)(x / d + 8.5))
    const int expected = std::min(15, static_cast<int>(x[i] / -2.0f + 8.5f));
    EXPECT_EQ(q, expected) << i;
  }
  EXPECT_EQ(block.qs[7] & 15, 0);  // the signed max itself is -8 * d exactly
}

TEST(QuantQ4_0, RoundTripErrorBounds) {
  const int64_t n = 4096;
  const std::vector<float> x = gaussian_values(n, 23, 0.5f);
  std::vector<BlockQ4_0> q(n / kQK);
  quantize_row(DType::Q4_0, x.data(), q.data(), n);
  std::vector<float> y(n);
  dequantize_row(DType::Q4_0, q.data(), y.data(), n);
  for (int64_t i = 0; i < n; ++i) {
    const float d = std::fabs(fp16_to_fp32(q[i / kQK].d));
    // Half a step, except values at the far end of the range, clamped to 7 * d.
    const bool clamped = x[i] / fp16_to_fp32(q[i / kQK].d) >= 7.5f;
    ASSERT_LE(std::fabs(y[i] - x[i]), (clamped ? 1.0001f : 0.5001f) * d) << i;
  }
  EXPECT_LT(relative_rms_error(x, y), 0.15);
}

TEST(QuantQ4_0, ZeroBlockStaysZero) {
  std::vector<float> x(64, 0.0f);
  EXPECT_EQ(round_trip(DType::Q4_0, x), x);
  EXPECT_EQ(round_trip(DType::Q8_0, x), x);
}

// ------------------------------------------------------- K-quant dispatch ----

TEST(QuantKQuants, DispatchMatchesKquantsFunctions) {
  const int64_t n = 512;
  const std::vector<float> x = gaussian_values(n, 31);
  std::vector<BlockQ4_K> a(n / kQKK), b(n / kQKK);
  quantize_row(DType::Q4_K, x.data(), a.data(), n);
  quantize_row_q4_K(x.data(), b.data(), n);
  EXPECT_EQ(std::memcmp(a.data(), b.data(), sizeof(BlockQ4_K) * a.size()), 0);
  std::vector<BlockQ6_K> c(n / kQKK), d(n / kQKK);
  quantize_row(DType::Q6_K, x.data(), c.data(), n);
  quantize_row_q6_K(x.data(), d.data(), n);
  EXPECT_EQ(std::memcmp(c.data(), d.data(), sizeof(BlockQ6_K) * c.size()), 0);
  std::vector<BlockQ8_K> e(n / kQKK), f(n / kQKK);
  quantize_row(DType::Q8_K, x.data(), e.data(), n);
  quantize_row_q8_K(x.data(), f.data(), n);
  EXPECT_EQ(std::memcmp(e.data(), f.data(), sizeof(BlockQ8_K) * e.size()), 0);

  std::vector<float> y1(n), y2(n);
  dequantize_row(DType::Q4_K, a.data(), y1.data(), n);
  dequantize_row_q4_K(a.data(), y2.data(), n);
  EXPECT_EQ(y1, y2);
  dequantize_row(DType::Q6_K, c.data(), y1.data(), n);
  dequantize_row_q6_K(c.data(), y2.data(), n);
  EXPECT_EQ(y1, y2);
  dequantize_row(DType::Q8_K, e.data(), y1.data(), n);
  dequantize_row_q8_K(e.data(), y2.data(), n);
  EXPECT_EQ(y1, y2);
}

TEST(QuantKQuants, RoundTripErrorThroughDispatch) {
  const std::vector<float> x = gaussian_values(2048, 32);
  EXPECT_LT(relative_rms_error(x, round_trip(DType::Q4_K, x)), 0.12);
  EXPECT_LT(relative_rms_error(x, round_trip(DType::Q6_K, x)), 0.03);
  EXPECT_LT(relative_rms_error(x, round_trip(DType::Q8_K, x)), 0.01);
  // Every type beats the next coarser one.
  EXPECT_LT(relative_rms_error(x, round_trip(DType::Q6_K, x)),
            relative_rms_error(x, round_trip(DType::Q4_K, x)));
  EXPECT_LT(relative_rms_error(x, round_trip(DType::F16, x)), 1e-3);
  EXPECT_LT(relative_rms_error(x, round_trip(DType::BF16, x)), 5e-3);
}

}  // namespace
}  // namespace parspec
