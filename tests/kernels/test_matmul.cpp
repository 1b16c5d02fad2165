// matmul against the double-precision reference for every weight type and
// many batch sizes, and bit-exact batch invariance (M, other rows, threads).
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "core/error.h"
#include "core/worker.h"
#include "kernels/isa.h"
#include "kernels/kquants.h"
#include "kernels/matmul.h"
#include "kernels/quant.h"

namespace parspec {
namespace {

const DType kAllWeightTypes[] = {DType::F32,  DType::F16,  DType::BF16, DType::Q8_0,
                                 DType::Q4_0, DType::Q4_K, DType::Q6_K};

std::vector<float> gaussian_values(int64_t n, uint32_t seed, float sigma = 1.0f) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> dist(0.0f, sigma);
  std::vector<float> v(n);
  for (float& x : v) x = dist(rng);
  return v;
}

struct TestMatrix {
  std::vector<uint8_t> bytes;
  WeightMatrix w;
};

// Random weights quantized row by row; rows get different magnitudes.
TestMatrix make_matrix(DType type, int64_t n_in, int64_t n_out, uint32_t seed) {
  TestMatrix t;
  const size_t stride = row_bytes(type, n_in);
  t.bytes.resize(stride * n_out);
  for (int64_t o = 0; o < n_out; ++o) {
    const std::vector<float> row = gaussian_values(n_in, seed + static_cast<uint32_t>(o),
                                                   0.05f * static_cast<float>(1 + o % 5));
    quantize_row(type, row.data(), t.bytes.data() + o * stride, n_in);
  }
  if (type == DType::Q8_0 && n_out > 1) {
    // -128 never comes out of the quantizer but is a valid Q8_0 quant.
    auto* blocks = reinterpret_cast<BlockQ8_0*>(t.bytes.data() + stride);
    blocks[0].qs[3] = -128;
    blocks[0].qs[30] = -128;
  }
  t.w = WeightMatrix{type, n_in, n_out, t.bytes.data()};
  return t;
}

// Σ_k |w_k|·|x_k| over the values the kernels actually multiply (dequantized
// weights, activations after the type's activation quantization).
std::vector<double> abs_dots(const WeightMatrix& w, const std::vector<float>& x, int64_t M) {
  const int64_t n = w.n_in;
  const size_t stride = row_bytes(w.type, n);
  std::vector<double> out(M * w.n_out);
  std::vector<float> wrow(n), xrow(n);
  for (int64_t m = 0; m < M; ++m) {
    const float* xm = x.data() + m * n;
    if (w.type == DType::Q8_0 || w.type == DType::Q4_0 || w.type == DType::Q4_K ||
        w.type == DType::Q6_K) {
      const DType act =
          (w.type == DType::Q8_0 || w.type == DType::Q4_0) ? DType::Q8_0 : DType::Q8_K;
      std::vector<uint8_t> q(row_bytes(act, n));
      quantize_row(act, xm, q.data(), n);
      dequantize_row(act, q.data(), xrow.data(), n);
    } else {
      std::copy(xm, xm + n, xrow.begin());
    }
    for (int64_t o = 0; o < w.n_out; ++o) {
      dequantize_row(w.type, w.data + o * stride, wrow.data(), n);
      double s = 0;
      for (int64_t k = 0; k < n; ++k) s += std::fabs(static_cast<double>(wrow[k]) * xrow[k]);
      out[m * w.n_out + o] = s;
    }
  }
  return out;
}

// Error bound for f32 recursive summation of `steps` terms (plus the scale
// product and the final reduction), relative to Σ|terms|. K-quant dot
// products combine scales and mins in float per super-block: a looser bound.
double tolerance_factor(DType type, int64_t n_in) {
  const double u = std::ldexp(1.0, -24);
  switch (type) {
    case DType::Q8_0:
    case DType::Q4_0:
      return (n_in / kQK + 4) * 2 * u;
    case DType::Q4_K:
    case DType::Q6_K:
      return 1e-5;
    default:
      return (n_in / 8 + 8) * 2 * u;
  }
}

std::string label(DType type, int64_t n_in, int64_t n_out, int64_t M, int threads = 1) {
  return std::string(type_info(type).name) + " n_in=" + std::to_string(n_in) +
         " n_out=" + std::to_string(n_out) + " M=" + std::to_string(M) +
         " threads=" + std::to_string(threads);
}

// ------------------------------------------------------------ correctness ----

TEST(MatmulCorrectness, MatchesReferenceForEveryTypeAndBatchSize) {
  Worker worker(2);
  const int64_t batch_sizes[] = {1, 2, 3, 4, 5, 7, 8, 13, 16, 33, 64};
  for (DType type : kAllWeightTypes) {
    const int64_t block = type_info(type).block_elems;
    // Shapes: tile tails (n_out not a multiple of 8), and for the f32-activation
    // types an n_in that is not a multiple of 8.
    std::vector<std::pair<int64_t, int64_t>> shapes = {{256, 1}, {512, 21}};
    if (block == 1) shapes.push_back({83, 10});
    if (block == kQK) shapes.push_back({96, 17});
    for (auto [n_in, n_out] : shapes) {
      const TestMatrix t = make_matrix(type, n_in, n_out, 100);
      const std::vector<float> x = gaussian_values(64 * n_in, 7);
      const std::vector<double> bound = abs_dots(t.w, x, 64);
      for (int64_t M : batch_sizes) {
        std::vector<float> y(M * n_out, NAN), ref(M * n_out);
        matmul(worker, t.w, x.data(), M, y.data());
        matmul_reference(t.w, x.data(), M, ref.data());
        for (int64_t i = 0; i < M * n_out; ++i) {
          const double tol = tolerance_factor(type, n_in) * bound[i] + 1e-30;
          ASSERT_NEAR(y[i], ref[i], tol) << label(type, n_in, n_out, M) << " at " << i;
        }
      }
    }
  }
}

TEST(MatmulCorrectness, ReferenceMatchesPlainFloatDotProduct) {
  // Guards the reference itself: for F32 it is a plain double dot product.
  const int64_t n_in = 40, n_out = 3;
  const std::vector<float> wv = gaussian_values(n_in * n_out, 3);
  const std::vector<float> x = gaussian_values(2 * n_in, 4);
  const WeightMatrix w{DType::F32, n_in, n_out, reinterpret_cast<const uint8_t*>(wv.data())};
  std::vector<float> ref(2 * n_out);
  matmul_reference(w, x.data(), 2, ref.data());
  for (int64_t m = 0; m < 2; ++m) {
    for (int64_t o = 0; o < n_out; ++o) {
      double s = 0;
      for (int64_t k = 0; k < n_in; ++k)
        s += static_cast<double>(wv[o * n_in + k]) * x[m * n_in + k];
      EXPECT_EQ(ref[m * n_out + o], static_cast<float>(s));
    }
  }
}

TEST(MatmulCorrectness, QuantizedKnownValues) {
  // One Q8_0 block of weights 1..32 (d = 1) against x = 1 for all k: quantized
  // to q = 127, d = 1/127 rounded to f16. Exact answer: 528 · f16(1/127) · 127.
  BlockQ8_0 wb;
  wb.d = fp32_to_fp16(1.0f);
  for (int i = 0; i < kQK; ++i) wb.qs[i] = static_cast<int8_t>(i + 1);
  const WeightMatrix w{DType::Q8_0, kQK, 1, reinterpret_cast<const uint8_t*>(&wb)};
  std::vector<float> x(kQK, 1.0f);
  float y = 0;
  Worker worker(1);
  matmul(worker, w, x.data(), 1, &y);
  const float dx = fp16_to_fp32(fp32_to_fp16(1.0f / 127.0f));
  EXPECT_EQ(y, 528.0f * 127.0f * dx);

  // The same weights as Q4_0 quants 0..15 twice (values −8..7), d = 0.5.
  BlockQ4_0 qb;
  qb.d = fp32_to_fp16(0.5f);
  for (int j = 0; j < 16; ++j) qb.qs[j] = static_cast<uint8_t>(j | (j << 4));
  const WeightMatrix w4{DType::Q4_0, kQK, 1, reinterpret_cast<const uint8_t*>(&qb)};
  for (int i = 0; i < kQK; ++i) x[i] = (i % 2 == 0) ? 1.0f : -1.0f;
  matmul(worker, w4, x.data(), 1, &y);
  // Σ (q−8)·(±1): each half gives Σ_{j even}(j−8) − Σ_{j odd}(j−8) = −8.
  EXPECT_EQ(y, -16.0f * 127.0f * dx * 0.5f);
}

TEST(MatmulCorrectness, RejectsBadShapes) {
  Worker worker(1);
  std::vector<uint8_t> bytes(4096);
  std::vector<float> x(512), y(16);
  EXPECT_THROW(
      matmul(worker, WeightMatrix{DType::Q8_0, 48, 1, bytes.data()}, x.data(), 1, y.data()), Error);
  EXPECT_THROW(
      matmul(worker, WeightMatrix{DType::Q4_K, 128, 1, bytes.data()}, x.data(), 1, y.data()),
      Error);
  EXPECT_THROW(
      matmul(worker, WeightMatrix{DType::Q8_K, 256, 1, bytes.data()}, x.data(), 1, y.data()),
      Error);
  // M = 0 writes nothing.
  y[0] = 42.0f;
  matmul(worker, WeightMatrix{DType::F32, 4, 1, bytes.data()}, x.data(), 0, y.data());
  EXPECT_EQ(y[0], 42.0f);
}

// ------------------------------------------------------- batch invariance ----

TEST(MatmulBatchInvariance, RowResultIndependentOfBatchAndThreads) {
  const int64_t n_out = 37;  // tiles with a tail; thread splits land mid-matrix
  const int64_t batch_sizes[] = {2, 3, 4, 5, 8, 13, 33, 70};  // 70 crosses a 64-row chunk
  Worker workers[] = {Worker(1), Worker(2), Worker(3)};
  for (DType type : kAllWeightTypes) {
    const int64_t n_in = type_info(type).block_elems == 1 ? 515 : 512;
    const TestMatrix t = make_matrix(type, n_in, n_out, 200);
    const std::vector<float> target = gaussian_values(n_in, 9);
    std::vector<float> single(n_out);
    matmul(workers[0], t.w, target.data(), 1, single.data());

    std::mt19937 rng(77);
    for (Worker& worker : workers) {
      std::vector<float> y(n_out);
      matmul(worker, t.w, target.data(), 1, y.data());
      ASSERT_EQ(std::memcmp(y.data(), single.data(), n_out * sizeof(float)), 0)
          << label(type, n_in, n_out, 1, worker.n_threads());
      for (int64_t M : batch_sizes) {
        // Other rows at very different scales, the target at a varying position.
        std::vector<float> x = gaussian_values(M * n_in, static_cast<uint32_t>(rng()),
                                               std::ldexp(1.0f, static_cast<int>(rng() % 20) - 10));
        const int64_t pos = static_cast<int64_t>(rng() % M);
        std::copy(target.begin(), target.end(), x.begin() + pos * n_in);
        std::vector<float> yb(M * n_out);
        matmul(worker, t.w, x.data(), M, yb.data());
        ASSERT_EQ(std::memcmp(yb.data() + pos * n_out, single.data(), n_out * sizeof(float)), 0)
            << label(type, n_in, n_out, M, worker.n_threads()) << " target row " << pos;
      }
    }
  }
}

TEST(MatmulBatchInvariance, DuplicateRowsGiveIdenticalResults) {
  // Every row of a batch equal: every (m, o) must match row 0 exactly, whatever
  // tile position (m) it lands in.
  Worker worker(2);
  for (DType type : kAllWeightTypes) {
    const int64_t n_in = 256, n_out = 19, M = 11;
    const TestMatrix t = make_matrix(type, n_in, n_out, 300);
    const std::vector<float> row = gaussian_values(n_in, 10);
    std::vector<float> x(M * n_in);
    for (int64_t m = 0; m < M; ++m) std::copy(row.begin(), row.end(), x.begin() + m * n_in);
    std::vector<float> y(M * n_out);
    matmul(worker, t.w, x.data(), M, y.data());
    for (int64_t m = 1; m < M; ++m) {
      ASSERT_EQ(std::memcmp(y.data() + m * n_out, y.data(), n_out * sizeof(float)), 0)
          << label(type, n_in, n_out, M) << " row " << m;
    }
  }
}

// The AVX-VNNI build of the Q4_0/Q8_0 kernels gives the AVX2 build's results
// bit for bit (both sum exact integers), for any batch size.
TEST(MatmulVnni, BitIdenticalToAvx2) {
  const Isa saved = active_isa();
  if (!set_active_isa(Isa::kAvxVnni)) GTEST_SKIP() << "this CPU has no AVX-VNNI";
  Worker worker(1);
  for (DType type : {DType::Q4_0, DType::Q8_0}) {
    const int64_t n_in = 512, n_out = 37;
    const TestMatrix t = make_matrix(type, n_in, n_out, 300);
    for (int64_t M : {1, 7, 70}) {
      // Large and tiny rows alike quantize to quants up to ±127: the int16 bounds of AVX2.
      const std::vector<float> x = gaussian_values(M * n_in, 11 + static_cast<uint32_t>(M), 3.0f);
      std::vector<float> with_vnni(M * n_out), with_avx2(M * n_out);
      ASSERT_TRUE(set_active_isa(Isa::kAvxVnni));
      EXPECT_EQ(active_isa(), Isa::kAvxVnni);
      matmul(worker, t.w, x.data(), M, with_vnni.data());
      ASSERT_TRUE(set_active_isa(Isa::kAvx2));
      EXPECT_EQ(active_isa(), Isa::kAvx2);
      matmul(worker, t.w, x.data(), M, with_avx2.data());
      EXPECT_EQ(std::memcmp(with_vnni.data(), with_avx2.data(), with_vnni.size() * sizeof(float)),
                0)
          << label(type, n_in, n_out, M);
    }
  }
  set_active_isa(saved);
}

}  // namespace
}  // namespace parspec
