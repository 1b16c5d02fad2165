// matmul_many: several matrices over the same activations in one parallel job
// give exactly what separate matmul calls give.
#include <gtest/gtest.h>

#include <cstring>
#include <random>
#include <vector>

#include "core/error.h"
#include "core/worker.h"
#include "kernels/matmul.h"

namespace parspec {
namespace {

std::vector<uint8_t> random_rows(DType type, int64_t n_in, int64_t n_out, uint32_t seed) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> dist(0.0f, 0.1f);
  const size_t stride = row_bytes(type, n_in);
  std::vector<uint8_t> bytes(stride * n_out);
  std::vector<float> row(n_in);
  for (int64_t o = 0; o < n_out; ++o) {
    for (float& v : row) v = dist(rng);
    quantize_row(type, row.data(), bytes.data() + o * stride, n_in);
  }
  return bytes;
}

TEST(MatmulMany, EqualsSeparateMatmulsForMixedTypes) {
  const int64_t n_in = 256;
  const DType types[] = {DType::Q8_0, DType::Q4_K, DType::F16, DType::Q4_0, DType::Q6_K};
  const int64_t n_outs[] = {37, 8, 130, 1, 24};
  std::vector<std::vector<uint8_t>> storage;
  std::vector<WeightMatrix> weights;
  for (size_t i = 0; i < std::size(types); ++i) {
    storage.push_back(random_rows(types[i], n_in, n_outs[i], 10 + static_cast<uint32_t>(i)));
    weights.push_back(WeightMatrix{types[i], n_in, n_outs[i], storage.back().data()});
  }
  Worker one(1), three(3);
  std::mt19937 rng(3);
  std::normal_distribution<float> dist(0.0f, 1.0f);
  for (int64_t M : {1, 3, 9, 70}) {
    std::vector<float> x(M * n_in);
    for (float& v : x) v = dist(rng);
    for (Worker* worker : {&one, &three}) {
      std::vector<std::vector<float>> want, got;
      std::vector<MatmulPart> parts;
      for (const WeightMatrix& w : weights) {
        want.emplace_back(M * w.n_out);
        got.emplace_back(M * w.n_out, -1.0f);
        matmul(one, w, x.data(), M, want.back().data());
      }
      for (size_t i = 0; i < weights.size(); ++i) parts.push_back({&weights[i], got[i].data()});
      matmul_many(*worker, parts, x.data(), M);
      for (size_t i = 0; i < weights.size(); ++i) {
        ASSERT_EQ(std::memcmp(got[i].data(), want[i].data(), want[i].size() * sizeof(float)), 0)
            << "part " << i << " M " << M << " threads " << worker->n_threads();
      }
    }
  }
}

TEST(MatmulMany, RejectsPartsWithDifferentInputWidths) {
  const auto a = random_rows(DType::F32, 64, 4, 1), b = random_rows(DType::F32, 32, 4, 2);
  const WeightMatrix wa{DType::F32, 64, 4, a.data()}, wb{DType::F32, 32, 4, b.data()};
  std::vector<float> x(64), ya(4), yb(4);
  const MatmulPart parts[] = {{&wa, ya.data()}, {&wb, yb.data()}};
  Worker worker(1);
  EXPECT_THROW(matmul_many(worker, parts, x.data(), 1), Error);
}

}  // namespace
}  // namespace parspec
