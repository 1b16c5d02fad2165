// Runtime ISA dispatch (kernels/isa.h): every kernel path this CPU can run,
// forced in turn, gives the AVX2 path's results bit for bit, in single
// matmuls and in whole forward passes; PARSPEC_ISA selects and reports it.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "cli_helpers.h"
#include "core/error.h"
#include "core/worker.h"
#include "kernels/isa.h"
#include "kernels/kquants.h"
#include "kernels/matmul.h"
#include "kernels/q8_tiles.h"
#include "kernels/repack.h"
#include "model/kv_cache.h"
#include "model/model.h"
#include "test_helpers.h"

namespace parspec {
namespace {

const DType kTypes[] = {DType::F32,  DType::F16,  DType::BF16, DType::Q8_0,
                        DType::Q4_0, DType::Q4_K, DType::Q6_K};

// Restores the ISA chosen for the process when a test ends.
struct IsaGuard {
  Isa saved = active_isa();
  ~IsaGuard() { set_active_isa(saved); }
};

uint32_t bits_of(float f) {
  uint32_t u;
  std::memcpy(&u, &f, sizeof(u));
  return u;
}

std::vector<float> gaussian(int64_t n, uint32_t seed, float sigma) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> dist(0.0f, sigma);
  std::vector<float> v(n);
  for (float& x : v) x = dist(rng);
  return v;
}

std::vector<uint8_t> random_matrix(DType type, int64_t n_in, int64_t n_out, uint32_t seed) {
  const size_t stride = row_bytes(type, n_in);
  std::vector<uint8_t> bytes(stride * n_out);
  for (int64_t o = 0; o < n_out; ++o) {
    const auto row = gaussian(n_in, seed + static_cast<uint32_t>(o), 0.05f * (1 + o % 5));
    quantize_row(type, row.data(), bytes.data() + o * stride, n_in);
  }
  if (type == DType::Q8_0) {
    // Extreme quants (the quantizer never writes -128, a file may): exact sums must hold.
    auto* blocks = reinterpret_cast<BlockQ8_0*>(bytes.data());
    for (int k = 0; k < kQK; k += 3) blocks[0].qs[k] = (k % 2) ? -128 : 127;
  }
  if (type == DType::Q6_K) {
    // Every quant of row 0's first block at 63, the largest 6-bit value: the
    // AVX2 build's maddubs pair sums must not saturate.
    auto* block = reinterpret_cast<BlockQ6_K*>(bytes.data());
    std::memset(block->ql, 0xff, sizeof(block->ql));
    std::memset(block->qh, 0xff, sizeof(block->qh));
  }
  return bytes;
}

void expect_matmuls_match_avx2(Isa isa) {
  IsaGuard guard;
  Worker one(1), three(3);
  for (DType type : kTypes) {
    // Float rows of 203: a ragged tail step (203 = 12·16 + 11); 3 K-quant super-blocks.
    const int64_t n_in = type_info(type).block_elems == 1 ? 203 : 768;
    // 16-row tiles, an odd tile at the end, a partial tile, a single row.
    for (int64_t n_out : {1, 8, 16, 17, 24, 37, 130}) {
      const auto bytes = random_matrix(type, n_in, n_out, 11 + static_cast<uint32_t>(n_out));
      const WeightMatrix w{type, n_in, n_out, bytes.data()};
      // Every register-accumulator count (1-8), chunks of them, and a 64-row chunk boundary.
      for (int64_t M : {1, 2, 3, 4, 5, 6, 7, 8, 9, 13, 16, 70}) {
        const auto x = gaussian(M * n_in, 5 + static_cast<uint32_t>(M), 3.0f);
        std::vector<float> want(M * n_out), got(M * n_out);
        ASSERT_TRUE(set_active_isa(Isa::kAvx2));
        matmul(one, w, x.data(), M, want.data());
        ASSERT_TRUE(set_active_isa(isa));
        for (Worker* worker : {&one, &three}) {
          matmul(*worker, w, x.data(), M, got.data());
          ASSERT_EQ(std::memcmp(got.data(), want.data(), got.size() * sizeof(float)), 0)
              << isa_name(isa) << " " << type_info(type).name << " n_out " << n_out << " M " << M
              << " threads " << worker->n_threads();
        }
      }
    }
  }
}

// Activations as every matmul of Q8_0/Q4_0 weights quantizes them, with the
// values a forward can produce at the edges: NaN and infinity (a NaN is never
// the scale, and becomes -127), magnitudes whose scale rounds to f16 infinity
// or to a subnormal, zeros and negative zeros (a zero scale).
std::vector<float> activations_with_edge_blocks(int64_t M, int64_t n_in) {
  auto x = gaussian(M * n_in, 3 + static_cast<uint32_t>(M), 2.0f);
  auto block = [&](int64_t m, int64_t b) { return x.data() + m * n_in + b * kQK; };
  std::fill_n(block(0, 0), kQK, 0.0f);
  std::fill_n(block(0, 1), kQK, -0.0f);
  block(0, 2)[5] = NAN;
  block(0, 3)[31] = INFINITY;
  block(M - 1, 4)[0] = -INFINITY;
  std::fill_n(block(M - 1, 5), kQK, 1e-40f);  // subnormal f32: the scale rounds to f16 zero
  block(M - 1, 6)[7] = 3e-5f * 127;           // a subnormal f16 scale
  block(M - 1, 7)[9] = 1e7f;                  // a scale past f16's range: infinity
  std::fill_n(block(M - 1, 8), kQK, NAN);
  return x;
}

TEST(IsaDispatch, ActivationsAreQuantizedAsQuantizeRowOnEveryPath) {
  IsaGuard guard;
  Worker one(1), three(3);
  const int64_t n_in = 16 * kQK;
  for (int64_t M : {1, 2, 6, 7, 8, 300}) {  // 300: parts on several threads
    const auto x = activations_with_edge_blocks(M, n_in);
    std::vector<BlockQ8_0> want(M * n_in / kQK);
    for (int64_t m = 0; m < M; ++m)
      quantize_row(DType::Q8_0, x.data() + m * n_in, want.data() + m * n_in / kQK, n_in);
    for (Isa isa : {Isa::kAvx2, Isa::kAvxVnni, Isa::kAvx512}) {
      if (!set_active_isa(isa)) continue;
      for (Worker* worker : {&one, &three}) {
        for (bool pairs : {false, true}) {
          const std::string where = std::string(isa_name(isa)) + " M " + std::to_string(M) +
                                    " threads " + std::to_string(worker->n_threads()) +
                                    (pairs ? " pairs" : "");
          q8tiles::Q8Activations act;
          q8tiles::quantize_activations(*worker, x.data(), M, n_in, pairs, act);
          ASSERT_EQ(act.blocks.size(), want.size()) << where;
          for (size_t i = 0; i < want.size(); ++i) {
            ASSERT_EQ(act.blocks[i].d, want[i].d) << where << " block " << i;
            ASSERT_EQ(std::memcmp(act.blocks[i].qs, want[i].qs, kQK), 0) << where << " block " << i;
            int32_t sum = 0;
            for (int8_t q : want[i].qs) sum += q;
            ASSERT_EQ(bits_of(act.scales[i]), bits_of(fp16_to_fp32(want[i].d))) << where;
            ASSERT_EQ(act.sums8[i], 8 * sum) << where;
            ASSERT_EQ(act.minus_sums8[i], -8 * sum) << where;
            ASSERT_EQ(act.minus_sums128[i], -128 * sum) << where;
          }
          ASSERT_EQ(act.pair_blocks.empty(), !pairs) << where;
          if (!pairs) continue;
          // Pair p, block b: dword k of row 2p, then dword k of row 2p + 1 (row M - 1 twice
          // for an odd M), with both rows' scales and -8·Σ quants side by side.
          const int64_t nb = n_in / kQK;
          for (int64_t p = 0; p < (M + 1) / 2; ++p) {
            for (int64_t b = 0; b < nb; ++b) {
              const int64_t rows[2] = {2 * p, std::min(2 * p + 1, M - 1)};
              const int64_t j = p * nb + b;
              for (int h = 0; h < 2; ++h) {
                const int64_t i = rows[h] * nb + b;
                for (int k = 0; k < 8; ++k)
                  ASSERT_EQ(std::memcmp(act.pair_blocks.data() + j * 64 + 8 * k + 4 * h,
                                        want[i].qs + 4 * k, 4),
                            0)
                      << where << " pair " << p << " block " << b;
                ASSERT_EQ(bits_of(act.pair_scales[2 * j + h]), bits_of(act.scales[i])) << where;
                ASSERT_EQ(act.pair_minus_sums8[2 * j + h], act.minus_sums8[i]) << where;
              }
            }
          }
        }
      }
    }
  }
}

TEST(IsaDispatch, AvxVnniMatmulsAreBitIdenticalToAvx2) {
  if (!cpu_supports(Isa::kAvxVnni)) GTEST_SKIP() << "skipped: this CPU has no AVX-VNNI";
  expect_matmuls_match_avx2(Isa::kAvxVnni);
}

TEST(IsaDispatch, Avx512MatmulsAreBitIdenticalToAvx2) {
  if (!cpu_supports(Isa::kAvx512)) GTEST_SKIP() << "skipped: this CPU lacks AVX-512 F/BW/VL/VNNI";
  expect_matmuls_match_avx2(Isa::kAvx512);
}

// Q4_0, Q8_0 and Q4_K weights repacked into the tile layout (kernels/repack.h)
// give the row-major AVX2 results bit for bit on every path: whole groups, rows
// after the last group, matrices shorter than a group, paired and lone blocks
// (Q4_0/Q8_0 nb 24 and 3), groups on a 64-byte line and 32 bytes past one
// (Q4_0/Q8_0: block 0 alone first, with nb 3 every other group; Q4_K: line 0
// split), every register-accumulator count and the 32-row kernels of large
// batches, on one thread and on three.
TEST(IsaDispatch, RepackedMatmulsAreBitIdenticalToRowMajorOnEveryPath) {
  IsaGuard guard;
  Worker one(1), three(3);
  for (DType type : {DType::Q4_0, DType::Q8_0, DType::Q4_K, DType::Q6_K})
    for (int64_t n_in : type_info(type).block_elems == kQKK ? std::vector<int64_t>{768, 256}
                                                            : std::vector<int64_t>{768, 96})
      for (int64_t n_out : {1, 15, 16, 17, 24, 33, 37, 64, 130})
        for (size_t line_offset : {0, 32}) {
          const auto bytes = random_matrix(type, n_in, n_out, 23 + static_cast<uint32_t>(n_out));
          std::vector<uint8_t> storage(bytes.size() + 128);
          uint8_t* packed = storage.data() +
                            (64 - reinterpret_cast<uintptr_t>(storage.data()) % 64) + line_offset;
          std::memcpy(packed, bytes.data(), bytes.size());
          repack::repack_in_place(three, type, n_in, n_out, packed);
          if (n_out >= repack::kGroupRows) {
            ASSERT_NE(std::memcmp(packed, bytes.data(), bytes.size()), 0);
          }
          const WeightMatrix w{type, n_in, n_out, bytes.data()};
          const WeightMatrix wp{type, n_in, n_out, packed, true};
          std::vector<uint8_t> row(row_bytes(type, n_in));
          for (int64_t o = 0; o < n_out; ++o) {
            repack::unpack_row(type, n_in, n_out, packed, o, row.data());
            ASSERT_EQ(std::memcmp(row.data(), bytes.data() + o * row.size(), row.size()), 0)
                << "row " << o << " of " << n_out;
          }
          for (int64_t M : {1, 2, 3, 4, 5, 6, 7, 8, 9, 13, 16, 70}) {
            const auto x = gaussian(M * n_in, 9 + static_cast<uint32_t>(M), 3.0f);
            std::vector<float> want(M * n_out), got(M * n_out);
            ASSERT_TRUE(set_active_isa(Isa::kAvx2));
            matmul(one, w, x.data(), M, want.data());
            if (M <= 3) {  // the reference reads the repacked rows as the row-major ones
              std::vector<float> ref(M * n_out), ref_packed(M * n_out);
              matmul_reference(w, x.data(), M, ref.data());
              matmul_reference(wp, x.data(), M, ref_packed.data());
              ASSERT_EQ(ref, ref_packed);
            }
            for (Isa isa : {Isa::kAvx2, Isa::kAvxVnni, Isa::kAvx512}) {
              if (!set_active_isa(isa)) continue;
              for (Worker* worker : {&one, &three}) {
                std::fill(got.begin(), got.end(), -1.0f);
                matmul(*worker, wp, x.data(), M, got.data());
                ASSERT_EQ(std::memcmp(got.data(), want.data(), got.size() * sizeof(float)), 0)
                    << isa_name(isa) << " n_in " << n_in << " n_out " << n_out << " M " << M
                    << " threads " << worker->n_threads() << " line offset " << line_offset << " "
                    << type_info(type).name;
              }
            }
          }
        }
  for (Isa isa : {Isa::kAvxVnni, Isa::kAvx512}) {
    if (!cpu_supports(isa))
      std::printf("[  NOTE    ] %s not on this CPU: its repacked kernels are not compared\n",
                  isa_name(isa));
  }
}

// Only Q4_0, Q8_0, Q4_K and Q6_K have a repacked layout: any other type
// marked repacked is refused. Q4_K and Q6_K are repacked at load only where it
// pays (AVX-512).
TEST(IsaDispatch, OnlyQ4_0Q8_0Q4_KAndQ6_KWeightsAreRepacked) {
  Worker one(1);
  for (DType type : {DType::F16, DType::BF16, DType::F32}) {
    const auto bytes = random_matrix(type, 256, 16, 5);
    const WeightMatrix w{type, 256, 16, bytes.data(), true};
    const auto x = gaussian(256, 1, 1.0f);
    std::vector<float> y(16);
    EXPECT_THROW(matmul(one, w, x.data(), 1, y.data()), Error) << type_info(type).name;
    std::vector<uint8_t> copy = bytes;
    EXPECT_THROW(repack::repack_in_place(one, type, 256, 16, copy.data()), Error);
  }
  for (DType type : {DType::Q4_K, DType::Q6_K}) {
    EXPECT_TRUE(repack::repack_pays(type, Isa::kAvx512));
    EXPECT_FALSE(repack::repack_pays(type, Isa::kAvxVnni));
    EXPECT_FALSE(repack::repack_pays(type, Isa::kAvx2));
  }
  EXPECT_TRUE(repack::repack_pays(DType::Q4_0, Isa::kAvx2));
  EXPECT_FALSE(repack::repack_pays(DType::F16, Isa::kAvx512));
}

TEST(IsaDispatch, ForwardLogitsAreBitIdenticalOnEveryPath) {
  IsaGuard guard;
  testing_support::TempDir dir;
  Worker worker(2);
  for (DType type : {DType::Q8_0, DType::Q4_0, DType::F16, DType::BF16, DType::Q4_K, DType::Q6_K}) {
    const bool k_quant = type_info(type).block_elems == kQKK;
    RandomModelSpec spec;
    spec.n_vocab = 300;
    spec.n_embd = k_quant ? 256 : 128;  // whole super-blocks
    spec.n_ff = k_quant ? 512 : 256;
    spec.n_layer = 2;
    spec.weight_type = type;
    auto model = Model::load(testing_support::write_model(
        dir, std::string("m-") + std::string(type_info(type).name) + ".gguf", spec));
    const std::vector<int32_t> tokens = {1, 17, 42, 99, 7, 250, 3, 8, 12};
    auto logits = [&](Isa isa) {
      EXPECT_TRUE(set_active_isa(isa));
      KvCache kv(model->config(), 32);
      return model->forward(worker, Batch::chain(kv, tokens, true), kv);
    };
    const std::vector<float> want = logits(Isa::kAvx2);
    for (Isa isa : {Isa::kAvxVnni, Isa::kAvx512}) {
      if (!cpu_supports(isa)) {
        std::printf("[  NOTE    ] %s not on this CPU: its forward pass is not compared\n",
                    isa_name(isa));
        continue;
      }
      const std::vector<float> got = logits(isa);
      ASSERT_EQ(got.size(), want.size());
      EXPECT_EQ(std::memcmp(got.data(), want.data(), got.size() * sizeof(float)), 0)
          << isa_name(isa) << " " << type_info(type).name;
    }
  }
}

// Q4_K/Q6_K blocks of random bytes (every bit of every scale, min and quant
// exercised; finite f16 super-scales) against the scalar reference dot product
// of the same weights and the row's Q8_K activations, with ==, on every path.
TEST(IsaDispatch, KQuantMatmulsEqualTheScalarReferenceOnEveryPath) {
  IsaGuard guard;
  Worker worker(2);
  std::mt19937 rng(4);
  const int64_t n_in = 1024, n_out = 40;  // two 16-row tiles and an 8-row one
  for (DType type : {DType::Q4_K, DType::Q6_K}) {
    const size_t stride = row_bytes(type, n_in);
    std::vector<uint8_t> bytes(stride * n_out);
    for (uint8_t& b : bytes) b = static_cast<uint8_t>(rng());
    std::uniform_real_distribution<float> scale(0.001f, 0.01f);
    for (int64_t i = 0; i < n_out * (n_in / kQKK); ++i) {
      if (type == DType::Q4_K) {
        auto& blk = reinterpret_cast<BlockQ4_K*>(bytes.data())[i];
        blk.d = fp32_to_fp16(scale(rng));
        blk.dmin = fp32_to_fp16(scale(rng));
      } else {
        auto& blk = reinterpret_cast<BlockQ6_K*>(bytes.data())[i];
        blk.d = fp32_to_fp16(rng() % 2 ? scale(rng) : -scale(rng));
      }
    }
    const WeightMatrix w{type, n_in, n_out, bytes.data()};
    for (int64_t M : {1, 3, 8, 11}) {
      const auto x = gaussian(M * n_in, 21 + static_cast<uint32_t>(M), 2.0f);
      std::vector<float> want(M * n_out), got(M * n_out);
      std::vector<BlockQ8_K> xq(n_in / kQKK);
      for (int64_t m = 0; m < M; ++m) {
        quantize_row_q8_K(x.data() + m * n_in, xq.data(), n_in);
        for (int64_t o = 0; o < n_out; ++o) {
          const uint8_t* row = bytes.data() + o * stride;
          want[m * n_out + o] =
              type == DType::Q4_K
                  ? dot_q4_K_q8_K_ref(n_in, reinterpret_cast<const BlockQ4_K*>(row), xq.data())
                  : dot_q6_K_q8_K_ref(n_in, reinterpret_cast<const BlockQ6_K*>(row), xq.data());
        }
      }
      for (Isa isa : {Isa::kAvx2, Isa::kAvxVnni, Isa::kAvx512}) {
        if (!set_active_isa(isa)) continue;  // not on this CPU (the other tests say so)
        matmul(worker, w, x.data(), M, got.data());
        ASSERT_EQ(std::memcmp(got.data(), want.data(), got.size() * sizeof(float)), 0)
            << isa_name(isa) << " " << type_info(type).name << " M " << M;
      }
    }
  }
}

// The float contract (kernels/float_tiles.h) written out in scalar code: lane
// j of 16 sums k ≡ j (mod 16) with fma in k order, the ragged tail as one
// zero-padded step, lanes 0-7 + 8-15, then the fixed 8-lane reduction.
float float_contract_dot(DType type, const uint8_t* row, const float* x, int64_t n) {
  std::vector<float> w(n);
  dequantize_row(type, row, w.data(), n);
  float lane[16] = {};
  const int64_t padded = (n + 15) / 16 * 16;
  for (int64_t k = 0; k < padded; ++k) {
    lane[k % 16] = k < n ? std::fma(w[k], x[k], lane[k % 16]) : std::fma(0.0f, 0.0f, lane[k % 16]);
  }
  float f[8];
  for (int j = 0; j < 8; ++j) f[j] = lane[j] + lane[j + 8];
  return ((f[0] + f[4]) + (f[2] + f[6])) + ((f[1] + f[5]) + (f[3] + f[7]));
}

TEST(IsaDispatch, FloatMatmulsFollowTheScalarContractOnEveryPath) {
  IsaGuard guard;
  Worker worker(2);
  for (DType type : {DType::F32, DType::F16, DType::BF16}) {
    // one step, ragged tails ending in the high and the low 8 lanes, whole
    // steps, and rows longer than the decode path's prefetch distance (1 KiB)
    for (int64_t n_in : {16, 203, 37, 256, 1000}) {
      for (int64_t n_out : {13, 11}) {  // a full tile, then 5 rows (8 streamed) or 3 (4 streamed)
        const auto bytes = random_matrix(type, n_in, n_out, 3);
        const WeightMatrix w{type, n_in, n_out, bytes.data()};
        // Every register block and column-group split (1-17), two passes (24,
        // 33: 12 + 12 and 16 + 17 rows).
        for (int64_t M : {1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16, 17, 24, 33}) {
          const auto x = gaussian(M * n_in, 9 + static_cast<uint32_t>(M), 3.0f);
          std::vector<float> want(M * n_out), got(M * n_out), row(n_out);
          for (int64_t m = 0; m < M; ++m) {
            for (int64_t o = 0; o < n_out; ++o) {
              want[m * n_out + o] = float_contract_dot(
                  type, bytes.data() + o * row_bytes(type, n_in), x.data() + m * n_in, n_in);
            }
          }
          for (Isa isa : {Isa::kAvx2, Isa::kAvxVnni, Isa::kAvx512}) {
            if (!set_active_isa(isa)) continue;  // not on this CPU (the other tests say so)
            matmul(worker, w, x.data(), M, got.data());
            ASSERT_EQ(std::memcmp(got.data(), want.data(), got.size() * sizeof(float)), 0)
                << isa_name(isa) << " " << type_info(type).name << " n_in " << n_in << " n_out "
                << n_out << " M " << M;
            for (int64_t m = 0; m < M; ++m) {  // and row by row
              matmul(worker, w, x.data() + m * n_in, 1, row.data());
              ASSERT_EQ(std::memcmp(row.data(), got.data() + m * n_out, n_out * sizeof(float)), 0)
                  << isa_name(isa) << " " << type_info(type).name << " n_in " << n_in << " M " << M
                  << " row " << m;
            }
          }
        }
      }
    }
  }
}

TEST(IsaDispatch, UnsupportedIsaIsRefusedWithoutChangingAnything) {
  IsaGuard guard;
  const Isa before = active_isa();
  for (Isa isa : {Isa::kAvxVnni, Isa::kAvx512}) {
    if (cpu_supports(isa)) continue;
    EXPECT_FALSE(set_active_isa(isa));
    EXPECT_EQ(active_isa(), before);
  }
  EXPECT_TRUE(set_active_isa(Isa::kAvx2));  // the baseline is always there
}

// `parspec info` with PARSPEC_ISA set (empty: unset); stdout and stderr.
testing_support::CommandResult info_with_isa(const std::string& isa) {
  const std::string command =
      (isa.empty() ? std::string("env -u PARSPEC_ISA ") : "env PARSPEC_ISA=" + isa + " ") +
      PARSPEC_BINARY + " info " + PARSPEC_SOURCE_DIR + "/models/draft.gguf 2>&1";
  return testing_support::run_command(command);
}

TEST(IsaDispatch, EnvironmentOverrideIsReportedAndChecked) {
  const auto best = info_with_isa("");
  ASSERT_EQ(best.exit_code, 0) << best.output;
  EXPECT_NE(best.output.find("kernels"), std::string::npos) << best.output;
  for (Isa isa : {Isa::kAvx2, Isa::kAvxVnni, Isa::kAvx512}) {
    const std::string name = isa_name(isa);
    const auto r = info_with_isa(name);
    if (cpu_supports(isa)) {
      EXPECT_EQ(r.exit_code, 0) << r.output;
      EXPECT_NE(r.output.find("kernels        " + name + " "), std::string::npos) << r.output;
    } else {
      EXPECT_EQ(r.exit_code, 1) << r.output;
      EXPECT_NE(r.output.find("this CPU lacks " + name), std::string::npos) << r.output;
    }
  }
  const auto bad = info_with_isa("sse2");
  EXPECT_EQ(bad.exit_code, 1) << bad.output;
  EXPECT_NE(bad.output.find("PARSPEC_ISA=sse2 is not one of avx2, avxvnni, avx512"),
            std::string::npos)
      << bad.output;
}

}  // namespace
}  // namespace parspec
