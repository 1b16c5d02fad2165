// K-quant layouts (hand-built blocks with literal expected values), quantizer
// quality, Q8_K activations, and the AVX2 / reference dot products.
#include <gtest/gtest.h>
#include <immintrin.h>

#include <cmath>
#include <cstring>
#include <random>
#include <vector>

#include "core/error.h"
#include "kernels/kquants.h"

namespace parspec {
namespace {

uint16_t to_half(float f) {
  return static_cast<uint16_t>(_cvtss_sh(f, _MM_FROUND_TO_NEAREST_INT));
}

std::vector<float> gaussian(int64_t n, uint32_t seed, float sigma = 1.0f, float mean = 0.0f) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> dist(mean, sigma);
  std::vector<float> v(n);
  for (float& x : v) x = dist(rng);
  return v;
}

double relative_rmse(const std::vector<float>& ref, const std::vector<float>& got) {
  double err = 0, norm = 0;
  for (size_t i = 0; i < ref.size(); ++i) {
    err += (static_cast<double>(got[i]) - ref[i]) * (static_cast<double>(got[i]) - ref[i]);
    norm += static_cast<double>(ref[i]) * ref[i];
  }
  return std::sqrt(err / norm);
}

std::vector<float> roundtrip_q4_K(const std::vector<float>& x) {
  const int64_t n = static_cast<int64_t>(x.size());
  std::vector<BlockQ4_K> q(n / kQKK);
  std::vector<float> y(n);
  quantize_row_q4_K(x.data(), q.data(), n);
  dequantize_row_q4_K(q.data(), y.data(), n);
  return y;
}

std::vector<float> roundtrip_q6_K(const std::vector<float>& x) {
  const int64_t n = static_cast<int64_t>(x.size());
  std::vector<BlockQ6_K> q(n / kQKK);
  std::vector<float> y(n);
  quantize_row_q6_K(x.data(), q.data(), n);
  dequantize_row_q6_K(q.data(), y.data(), n);
  return y;
}

// ------------------------------------------------------------ layouts ----

// Scale bytes chosen so that every packed field is non-zero somewhere, with
// the decoded (scale, min) pairs worked out by hand from the layout rules:
//   j < 4:  sc = s[j] & 63,  m = s[j+4] & 63
//   j >= 4: sc = (s[j+4] & 15) | (s[j-4] >> 6) << 4,  m = (s[j+4] >> 4) | (s[j] >> 6) << 4
constexpr uint8_t kQ4Scales[12] = {0xC1, 0x42, 0x03, 0x84, 0x45, 0x06,
                                   0xC7, 0x88, 0x9A, 0x0B, 0xF0, 0x5C};
constexpr int kQ4Sc[8] = {1, 2, 3, 4, 58, 27, 0, 44};
constexpr int kQ4Min[8] = {5, 6, 7, 8, 25, 0, 63, 37};

TEST(KQuantLayout, Q4KDequantizeHandBuiltBlock) {
  BlockQ4_K blk{};
  blk.d = to_half(0.5f);
  blk.dmin = to_half(0.25f);
  std::memcpy(blk.scales, kQ4Scales, 12);
  // Group g of 64 values uses qs[32g..32g+31]: low nibble -> value 64g+l
  // (sub-block 2g), high nibble -> value 64g+32+l (sub-block 2g+1).
  blk.qs[0] = 0x21;    // value 0 = 1, value 32 = 2
  blk.qs[31] = 0xF0;   // value 31 = 0, value 63 = 15
  blk.qs[32] = 0x43;   // value 64 = 3, value 96 = 4
  blk.qs[101] = 0x9E;  // value 197 = 14 (sub-block 6), value 229 = 9 (sub-block 7)
  blk.qs[127] = 0x5A;  // value 223 = 10, value 255 = 5

  // Every other value has q = 0, so it is -dmin * m of its sub-block.
  std::vector<float> expected(kQKK);
  for (int v = 0; v < kQKK; ++v) expected[v] = -0.25f * kQ4Min[v / 32];
  expected[0] = 0.5f * 1 * 1 - 0.25f * 5;
  expected[32] = 0.5f * 2 * 2 - 0.25f * 6;
  expected[63] = 0.5f * 2 * 15 - 0.25f * 6;
  expected[64] = 0.5f * 3 * 3 - 0.25f * 7;
  expected[96] = 0.5f * 4 * 4 - 0.25f * 8;
  expected[197] = 0.5f * 0 * 14 - 0.25f * 63;
  expected[229] = 0.5f * 44 * 9 - 0.25f * 37;
  expected[223] = 0.5f * 0 * 10 - 0.25f * 63;
  expected[255] = 0.5f * 44 * 5 - 0.25f * 37;

  std::vector<float> y(kQKK);
  dequantize_row_q4_K(&blk, y.data(), kQKK);
  for (int v = 0; v < kQKK; ++v) EXPECT_EQ(y[v], expected[v]) << "value " << v;
}

TEST(KQuantLayout, Q4KScalesAndMinsDecodeFromTheirBits) {
  // All nibbles 1 with d = 1, dmin = 0 reads back each sub-block's scale; all
  // nibbles 0 with d = 0, dmin = 1 reads back minus each min.
  BlockQ4_K blk{};
  std::memcpy(blk.scales, kQ4Scales, 12);
  std::memset(blk.qs, 0x11, sizeof(blk.qs));
  blk.d = to_half(1.0f);
  blk.dmin = to_half(0.0f);
  std::vector<float> y(kQKK);
  dequantize_row_q4_K(&blk, y.data(), kQKK);
  for (int v = 0; v < kQKK; ++v) EXPECT_EQ(y[v], kQ4Sc[v / 32]) << "value " << v;

  std::memset(blk.qs, 0, sizeof(blk.qs));
  blk.d = to_half(0.0f);
  blk.dmin = to_half(1.0f);
  dequantize_row_q4_K(&blk, y.data(), kQKK);
  for (int v = 0; v < kQKK; ++v) EXPECT_EQ(y[v], -kQ4Min[v / 32]) << "value " << v;
}

TEST(KQuantLayout, Q6KDequantizeHandBuiltBlock) {
  constexpr int8_t kScales[16] = {1, -2, 3, -4, 5, 6, -7, 8, 9, 10, -11, 12, 13, -14, 15, -128};
  BlockQ6_K blk{};
  blk.d = to_half(0.5f);
  std::memcpy(blk.scales, kScales, 16);
  // Per half h (values 128h..): value l <- low nibble ql[l] + qh[l] bits 0-1,
  // l+32 <- low ql[l+32] + bits 2-3, l+64 <- high ql[l] + bits 4-5,
  // l+96 <- high ql[l+32] + bits 6-7 (ql, qh offset by 64h, 32h); q is biased by 32.
  blk.ql[0] = 0x21;
  blk.qh[0] = 0xE4;    // bits 0-1 = 0, 2-3 = 1, 4-5 = 2, 6-7 = 3
  blk.ql[32] = 0x7F;   // value 32: 15 | 1 << 4 = 31; value 96: 7 | 3 << 4 = 55
  blk.ql[95] = 0x0F;   // half 1, l = 31: value 159 low nibble 15, value 223 high nibble 0
  blk.qh[63] = 0x03;   // value 159 top bits 3 -> 63
  blk.ql[127] = 0x50;  // value 191 low nibble 0, value 255 high nibble 5

  std::vector<float> expected(kQKK);
  for (int v = 0; v < kQKK; ++v) expected[v] = 0.5f * kScales[v / 16] * -32;
  expected[0] = 0.5f * 1 * (1 - 32);
  expected[32] = 0.5f * 3 * (31 - 32);
  expected[64] = 0.5f * 5 * (34 - 32);
  expected[96] = 0.5f * -7 * (55 - 32);
  expected[159] = 0.5f * 10 * (63 - 32);
  expected[223] = 0.5f * -14 * (0 - 32);
  expected[191] = 0.5f * 12 * (0 - 32);
  expected[255] = 0.5f * -128 * (5 - 32);

  std::vector<float> y(kQKK);
  dequantize_row_q6_K(&blk, y.data(), kQKK);
  for (int v = 0; v < kQKK; ++v) EXPECT_EQ(y[v], expected[v]) << "value " << v;
}

TEST(KQuantLayout, RejectsRowLengthsThatAreNotWholeSuperBlocks) {
  std::vector<float> x(512, 1.0f);
  std::vector<BlockQ4_K> q4(2);
  std::vector<BlockQ6_K> q6(2);
  std::vector<BlockQ8_K> q8(2);
  EXPECT_THROW(quantize_row_q4_K(x.data(), q4.data(), 300), Error);
  EXPECT_THROW(quantize_row_q6_K(x.data(), q6.data(), 100), Error);
  EXPECT_THROW(quantize_row_q8_K(x.data(), q8.data(), 257), Error);
  EXPECT_THROW(dot_q4_K_q8_K(320, q4.data(), q8.data()), Error);
}

// ---------------------------------------------------------- round trips ----

TEST(KQuantRoundTrip, Q4KGaussianError) {
  const auto x = gaussian(16 * kQKK, 1);
  EXPECT_LT(relative_rmse(x, roundtrip_q4_K(x)), 0.09);
}

TEST(KQuantRoundTrip, Q4KShiftedAndMixedMagnitudes) {
  // All-positive data (min term at 0) and blocks whose magnitudes differ a lot
  // (exercises the 6-bit scale quantization and the high sub-blocks' bits).
  const auto shifted = gaussian(8 * kQKK, 2, 1.0f, 3.0f);
  EXPECT_LT(relative_rmse(shifted, roundtrip_q4_K(shifted)), 0.04);
  auto mixed = gaussian(8 * kQKK, 3);
  for (size_t i = 0; i < mixed.size(); ++i) mixed[i] *= std::pow(4.0f, (i / 32) % 5) * 1e-3f;
  EXPECT_LT(relative_rmse(mixed, roundtrip_q4_K(mixed)), 0.09);
}

TEST(KQuantRoundTrip, Q4KZeroAndConstantBlocksAreExact) {
  std::vector<float> x(2 * kQKK, 0.0f);
  for (int i = kQKK; i < 2 * kQKK; ++i)
    x[i] = -63.0f / 32;  // -dmin·m with m = 63 and dmin = 1/32 (exact in f16)
  const auto y = roundtrip_q4_K(x);
  for (int i = 0; i < 2 * kQKK; ++i) EXPECT_EQ(y[i], x[i]) << "value " << i;
}

TEST(KQuantRoundTrip, Q6KGaussianError) {
  const auto x = gaussian(16 * kQKK, 4);
  EXPECT_LT(relative_rmse(x, roundtrip_q6_K(x)), 0.025);
  auto mixed = gaussian(8 * kQKK, 5, 1.0f, 0.5f);
  for (size_t i = 0; i < mixed.size(); ++i) mixed[i] *= std::pow(3.0f, (i / 16) % 4) * 1e-2f;
  EXPECT_LT(relative_rmse(mixed, roundtrip_q6_K(mixed)), 0.025);
}

TEST(KQuantRoundTrip, Q6KZeroBlockIsExact) {
  std::vector<float> x(kQKK, 0.0f);
  const auto y = roundtrip_q6_K(x);
  for (int i = 0; i < kQKK; ++i) EXPECT_EQ(y[i], 0.0f);
}

// ---------------------------------------------------------------- Q8_K ----

TEST(KQuantQ8K, ScaleValuesAndBlockSums) {
  const int64_t n = 4 * kQKK;
  auto x = gaussian(n, 6);
  x[kQKK + 7] = -9.0f;  // the absmax of block 1 is negative
  std::vector<BlockQ8_K> q(n / kQKK);
  quantize_row_q8_K(x.data(), q.data(), n);
  std::vector<float> y(n);
  dequantize_row_q8_K(q.data(), y.data(), n);
  for (int64_t b = 0; b < n / kQKK; ++b) {
    float absmax = 0;
    for (int i = 0; i < kQKK; ++i) absmax = std::max(absmax, std::fabs(x[b * kQKK + i]));
    EXPECT_FLOAT_EQ(q[b].d, absmax / 127.0f);
    for (int g = 0; g < kQKK / 16; ++g) {
      int sum = 0;
      for (int i = 0; i < 16; ++i) sum += q[b].qs[16 * g + i];
      EXPECT_EQ(q[b].bsums[g], sum) << "block " << b << " group " << g;
    }
    for (int i = 0; i < kQKK; ++i) {
      EXPECT_GE(q[b].qs[i], -127);
      EXPECT_NEAR(y[b * kQKK + i], x[b * kQKK + i], 0.5001f * q[b].d);
    }
  }
  EXPECT_EQ(q[1].qs[7], -127);
}

TEST(KQuantQ8K, ZeroBlock) {
  std::vector<float> x(kQKK, 0.0f);
  BlockQ8_K q;
  std::memset(&q, 0x5A, sizeof(q));
  quantize_row_q8_K(x.data(), &q, kQKK);
  EXPECT_EQ(q.d, 0.0f);
  for (int i = 0; i < kQKK; ++i) EXPECT_EQ(q.qs[i], 0);
  for (int g = 0; g < 16; ++g) EXPECT_EQ(q.bsums[g], 0);
}

// ---------------------------------------------------------- dot products ----

// Exact (double) dot of the dequantized rows and Σ|w_i·x_i| (the scale that
// float rounding errors are measured against).
struct DequantDot {
  double value = 0, magnitude = 0;
};
DequantDot dequantized_dot(const std::vector<float>& w, const std::vector<float>& x) {
  DequantDot r;
  for (size_t i = 0; i < w.size(); ++i) {
    r.value += static_cast<double>(w[i]) * x[i];
    r.magnitude += std::fabs(static_cast<double>(w[i]) * x[i]);
  }
  return r;
}

// Relative tolerance for float-rounded per-block scaling and accumulation.
constexpr double kRoundingTol = 1e-5;

class KQuantDot : public ::testing::TestWithParam<int64_t> {};

TEST_P(KQuantDot, Q4KAgreesWithReferenceAndDequantizedRows) {
  const int64_t n = GetParam();
  const auto wf = gaussian(n, 10 + static_cast<uint32_t>(n), 0.02f);
  auto xf = gaussian(n, 20 + static_cast<uint32_t>(n));
  std::vector<BlockQ4_K> w(n / kQKK);
  std::vector<BlockQ8_K> x(n / kQKK);
  quantize_row_q4_K(wf.data(), w.data(), n);
  quantize_row_q8_K(xf.data(), x.data(), n);
  std::vector<float> wd(n), xd(n);
  dequantize_row_q4_K(w.data(), wd.data(), n);
  dequantize_row_q8_K(x.data(), xd.data(), n);
  const DequantDot exact = dequantized_dot(wd, xd);

  const float fast = dot_q4_K_q8_K(n, w.data(), x.data());
  const float ref = dot_q4_K_q8_K_ref(n, w.data(), x.data());
  EXPECT_NEAR(fast, ref, kRoundingTol * exact.magnitude);
  EXPECT_NEAR(ref, exact.value, kRoundingTol * exact.magnitude);
  EXPECT_NEAR(fast, exact.value, kRoundingTol * exact.magnitude);
}

TEST_P(KQuantDot, Q6KAgreesWithReferenceAndDequantizedRows) {
  const int64_t n = GetParam();
  const auto wf = gaussian(n, 30 + static_cast<uint32_t>(n), 0.02f);
  const auto xf = gaussian(n, 40 + static_cast<uint32_t>(n));
  std::vector<BlockQ6_K> w(n / kQKK);
  std::vector<BlockQ8_K> x(n / kQKK);
  quantize_row_q6_K(wf.data(), w.data(), n);
  quantize_row_q8_K(xf.data(), x.data(), n);
  std::vector<float> wd(n), xd(n);
  dequantize_row_q6_K(w.data(), wd.data(), n);
  dequantize_row_q8_K(x.data(), xd.data(), n);
  const DequantDot exact = dequantized_dot(wd, xd);

  const float fast = dot_q6_K_q8_K(n, w.data(), x.data());
  const float ref = dot_q6_K_q8_K_ref(n, w.data(), x.data());
  EXPECT_NEAR(fast, ref, kRoundingTol * exact.magnitude);
  EXPECT_NEAR(ref, exact.value, kRoundingTol * exact.magnitude);
  EXPECT_NEAR(fast, exact.value, kRoundingTol * exact.magnitude);
}

TEST_P(KQuantDot, CloseToFloatDotOfUnquantizedRows) {
  // x correlated with w, so the true dot is large and quantization error shows
  // as a relative error: Q4_K weights (~8% RMSE, averaging out) stay within 2%.
  const int64_t n = GetParam();
  const auto wf = gaussian(n, 50 + static_cast<uint32_t>(n));
  auto xf = gaussian(n, 60 + static_cast<uint32_t>(n));
  for (int64_t i = 0; i < n; ++i) xf[i] = wf[i] + 0.5f * xf[i];
  double truth = 0;
  for (int64_t i = 0; i < n; ++i) truth += static_cast<double>(wf[i]) * xf[i];
  std::vector<BlockQ4_K> w4(n / kQKK);
  std::vector<BlockQ6_K> w6(n / kQKK);
  std::vector<BlockQ8_K> x(n / kQKK);
  quantize_row_q4_K(wf.data(), w4.data(), n);
  quantize_row_q6_K(wf.data(), w6.data(), n);
  quantize_row_q8_K(xf.data(), x.data(), n);
  EXPECT_NEAR(dot_q4_K_q8_K(n, w4.data(), x.data()), truth, 0.02 * std::fabs(truth));
  EXPECT_NEAR(dot_q6_K_q8_K(n, w6.data(), x.data()), truth, 0.005 * std::fabs(truth));
}

INSTANTIATE_TEST_SUITE_P(KQuantRowLengths, KQuantDot, ::testing::Values(256, 512, 1024, 2048, 4096),
                         [](const auto& row) { return "n" + std::to_string(row.param); });

// Arbitrary bit patterns: random bytes for every weight field and Q8_K values
// over the full int8 range (-128 included, as llama.cpp's activations allow).
template <class Block>
std::vector<Block> random_blocks(int64_t count, uint32_t seed) {
  std::mt19937 rng(seed);
  std::vector<Block> blocks(count);
  auto* bytes = reinterpret_cast<uint8_t*>(blocks.data());
  for (size_t i = 0; i < blocks.size() * sizeof(Block); ++i) bytes[i] = rng() & 0xFF;
  std::uniform_real_distribution<float> scale(0.001f, 0.01f);
  for (Block& b : blocks) {
    if constexpr (std::is_same_v<Block, BlockQ4_K>) {
      b.d = to_half(scale(rng));
      b.dmin = to_half(scale(rng));
    } else {
      b.d = to_half(rng() % 2 ? scale(rng) : -scale(rng));
    }
  }
  return blocks;
}

std::vector<BlockQ8_K> random_q8_K(int64_t count, uint32_t seed, bool extreme) {
  std::mt19937 rng(seed);
  std::vector<BlockQ8_K> blocks(count);
  for (BlockQ8_K& b : blocks) {
    b.d = 0.0625f;  // a power of two keeps the extreme-value results exact
    for (int i = 0; i < kQKK; ++i) {
      b.qs[i] = static_cast<int8_t>(extreme ? -128 : static_cast<int>(rng() % 256) - 128);
    }
    for (int g = 0; g < kQKK / 16; ++g) {
      int sum = 0;
      for (int i = 0; i < 16; ++i) sum += b.qs[16 * g + i];
      b.bsums[g] = static_cast<int16_t>(sum);
    }
  }
  return blocks;
}

TEST(KQuantDotBits, RandomBlocksMatchDequantizedRows) {
  const int64_t n = 8 * kQKK;
  const auto w4 = random_blocks<BlockQ4_K>(n / kQKK, 70);
  const auto w6 = random_blocks<BlockQ6_K>(n / kQKK, 71);
  const auto x = random_q8_K(n / kQKK, 72, false);
  std::vector<float> wd(n), xd(n);
  dequantize_row_q8_K(x.data(), xd.data(), n);

  dequantize_row_q4_K(w4.data(), wd.data(), n);
  DequantDot exact = dequantized_dot(wd, xd);
  EXPECT_NEAR(dot_q4_K_q8_K(n, w4.data(), x.data()), exact.value, kRoundingTol * exact.magnitude);
  EXPECT_NEAR(dot_q4_K_q8_K_ref(n, w4.data(), x.data()), exact.value,
              kRoundingTol * exact.magnitude);

  dequantize_row_q6_K(w6.data(), wd.data(), n);
  exact = dequantized_dot(wd, xd);
  EXPECT_NEAR(dot_q6_K_q8_K(n, w6.data(), x.data()), exact.value, kRoundingTol * exact.magnitude);
  EXPECT_NEAR(dot_q6_K_q8_K_ref(n, w6.data(), x.data()), exact.value,
              kRoundingTol * exact.magnitude);
}

TEST(KQuantDotBits, ExtremeValuesDoNotSaturate) {
  // Largest magnitudes everywhere: Q4_K nibbles 15 with scales/mins 63, Q6_K
  // q = 0 (-32) or 63 (+31) with scale -128, activations all -128. The result
  // is known in closed form.
  const auto x = random_q8_K(1, 0, true);
  BlockQ4_K w4{};
  w4.d = to_half(1.0f);
  w4.dmin = to_half(0.5f);
  std::memset(w4.scales, 0xFF, sizeof(w4.scales));  // every scale and min = 63
  std::memset(w4.qs, 0xFF, sizeof(w4.qs));
  const double q4_expected = 0.0625 * (-128.0) * 256 * (63.0 * 15 - 0.5 * 63);
  EXPECT_DOUBLE_EQ(dot_q4_K_q8_K(kQKK, &w4, x.data()), q4_expected);
  EXPECT_DOUBLE_EQ(dot_q4_K_q8_K_ref(kQKK, &w4, x.data()), q4_expected);

  for (uint8_t fill : {uint8_t{0x00}, uint8_t{0xFF}}) {
    BlockQ6_K w6{};
    w6.d = to_half(1.0f);
    std::memset(w6.scales, 0x80, sizeof(w6.scales));  // -128
    std::memset(w6.ql, fill, sizeof(w6.ql));
    std::memset(w6.qh, fill, sizeof(w6.qh));
    const double q = fill ? 31.0 : -32.0;
    const double q6_expected = 0.0625 * (-128.0) * 256 * (-128.0 * q);
    EXPECT_DOUBLE_EQ(dot_q6_K_q8_K(kQKK, &w6, x.data()), q6_expected);
    EXPECT_DOUBLE_EQ(dot_q6_K_q8_K_ref(kQKK, &w6, x.data()), q6_expected);
  }
}

}  // namespace
}  // namespace parspec
