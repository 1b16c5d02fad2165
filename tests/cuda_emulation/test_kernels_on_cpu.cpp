// The CUDA backend's matmul kernels run on the CPU (cuda_on_cpu.h) against
// the numerics contract they share (docs/design.md, "GPU numerics"): per
// (activation row, weight row), 16 chains of K blocks (chain c: blocks c,
// c + 16, ...), each adding scale · exact integer sum in block order by fused
// multiply-add, then the chains added in order. A kernel that reads or places
// one operand wrongly fails here, on any machine, before a GPU runs it; the GPU
// tests then check the hardware's side.
#include <gtest/gtest.h>

#include <bit>
#include <random>
#include <string>
#include <vector>

#include "emulated_kernels.h"
#include "kernels/kquants.h"

namespace parspec::cuda::emulated {
namespace {

// A Q8_0/Q4_0 matrix as the backend uploads it: values and scales apart.
struct Weights {
  DeviceMatrix matrix;
  std::vector<uint8_t> values;
  std::vector<__half> scales;

  Weights(WeightKind kind, int64_t n_in, int64_t n_out, std::mt19937& rng) {
    const int64_t nb = n_in / 32;
    const int block_bytes = kind == WeightKind::kQ8_0 ? 32 : 16;
    values.resize(static_cast<size_t>(n_out * nb * block_bytes));
    for (uint8_t& b : values) b = static_cast<uint8_t>(rng() & 0xFF);
    if (kind == WeightKind::kQ8_0)
      for (uint8_t& b : values)
        if (b == 0x80) b = 0x81;  // Q8_0 quants lie in [-127, 127]
    std::uniform_real_distribution<float> scale(-0.05f, 0.05f);
    for (int64_t i = 0; i < n_out * nb; ++i) scales.push_back(__float2half(scale(rng)));
    matrix.kind = kind;
    matrix.n_in = n_in;
    matrix.n_out = n_out;
    matrix.q = values.data();
    matrix.scales = scales.data();
  }
  int value(int64_t row, int64_t block, int e) const {
    const int64_t at = row * (matrix.n_in / 32) + block;
    if (matrix.kind == WeightKind::kQ8_0) return static_cast<int8_t>(values[at * 32 + e]);
    const uint8_t byte = values[at * 16 + e % 16];
    return (e < 16 ? byte & 0xF : byte >> 4) - 8;
  }
  float scale(int64_t row, int64_t block) const {
    return __half2float(scales[row * (matrix.n_in / 32) + block]);
  }
};

// Q8_0 activations: `rows` rows of nb blocks, at index q8_block_index(row, b).
struct Activations {
  std::vector<int8_t> values;
  std::vector<float> scales;
  Activations(int64_t nb, int rows, std::mt19937& rng) {
    values.resize(static_cast<size_t>(nb * rows * 32));
    for (int8_t& v : values) v = static_cast<int8_t>(static_cast<int>(rng() % 255) - 127);
    std::uniform_real_distribution<float> scale(0.001f, 0.1f);
    for (int64_t i = 0; i < nb * rows; ++i) scales.push_back(scale(rng));
  }
};

// The contract's value of weight row `row` against activation block index
// at(b) for each block b.
template <class At>
float contract_value(const Weights& w, int64_t row, const Activations& x, At&& at) {
  const int64_t nb = w.matrix.n_in / 32;
  float chains[16] = {};
  for (int64_t b = 0; b < nb; ++b) {
    const int64_t xb = at(b);
    int sum = 0;
    for (int e = 0; e < 32; ++e) sum += w.value(row, b, e) * x.values[xb * 32 + e];
    chains[b % 16] =
        std::fma(mul_rn(w.scale(row, b), x.scales[xb]), static_cast<float>(sum), chains[b % 16]);
  }
  float total = chains[0];
  for (int c = 1; c < 16; ++c) total = add_rn(total, chains[c]);
  return total;
}

bool same_bits(float a, float b) {
  return std::memcmp(&a, &b, sizeof a) == 0;
}

// Each group matrix's outputs (M rows of outs[i] values) with the bits wanted.
void expect_same_bits(const std::vector<std::vector<float>>& got,
                      const std::vector<std::vector<float>>& want,
                      const std::vector<int64_t>& outs) {
  for (size_t i = 0; i < outs.size(); ++i) {
    int wrong = 0;
    for (size_t e = 0; e < want[i].size(); ++e)
      if (!same_bits(got[i][e], want[i][e]) && ++wrong <= 3)
        ADD_FAILURE() << "matrix " << i << ", activation row " << e / outs[i] << ", weight row "
                      << e % outs[i] << ": " << got[i][e] << " instead of " << want[i][e];
    EXPECT_EQ(wrong, 0);
  }
}

// run_grid, and no warp reached a warp-wide operation from two places.
template <class Body>
void run(dim3 blocks, int threads, size_t shared, Body&& body) {
  divergent_calls = 0;
  run_grid(blocks, threads, shared, std::forward<Body>(body));
  EXPECT_EQ(divergent_calls.load(), 0)
      << "lanes of a warp met at a shuffle or mma from different calls";
}

// A group of Q8_0/Q4_0 matrices (`outs`: their rows) of width n_in, n_total
// activation rows, and the group's outputs for M of them.
struct GroupProblem {
  std::vector<int64_t> outs;
  int M;
  std::mt19937 rng;
  std::vector<Weights> weights;
  Activations x;
  std::vector<std::vector<float>> y;
  MatmulGroup group;

  GroupProblem(WeightKind kind, int64_t n_in, std::vector<int64_t> outs_, int M_, int n_total,
               unsigned seed)
      : outs(std::move(outs_)),
        M(M_),
        rng(seed),
        weights(make_weights(kind, n_in)),
        x(n_in / 32, n_total, rng) {
    group.count = static_cast<int>(outs.size());
    for (size_t i = 0; i < outs.size(); ++i) {
      y.emplace_back(static_cast<size_t>(M * outs[i]), -7.0f);
      group.w[i] = weights[i].matrix;
      group.y[i] = y[i].data();
    }
  }
  std::vector<Weights> make_weights(WeightKind kind, int64_t n_in) {
    std::vector<Weights> w;
    for (int64_t n_out : outs) w.emplace_back(kind, n_in, n_out, rng);
    return w;
  }
  // Blocks of `rows` weight rows the group makes.
  int blocks(int rows) const {
    int count = 0;
    for (int64_t n_out : outs) count += static_cast<int>((n_out + rows - 1) / rows);
    return count;
  }
  // Every output has the contract's bits; at(m, b): the index of activation
  // row m's block b.
  template <class At>
  void expect_contract(At&& at) const {
    int wrong = 0;
    for (size_t p = 0; p < outs.size(); ++p)
      for (int m = 0; m < M; ++m)
        for (int64_t row = 0; row < outs[p]; ++row) {
          const float want =
              contract_value(weights[p], row, x, [&](int64_t b) { return at(m, b); });
          const float got = y[p][static_cast<size_t>(m * outs[p] + row)];
          if (!same_bits(got, want) && ++wrong <= 3)
            ADD_FAILURE() << "matrix " << p << ", activation row " << m << ", weight row " << row
                          << ": " << got << " instead of " << want;
        }
    EXPECT_EQ(wrong, 0);
  }
};

// matmul_stream_kernel over M activation rows from m_first of n_total, block-major.
template <WeightKind kKind, int kTiles, int kW, int kMinBlocks = kStreamMinBlocks<kW, kTiles>>
void check_streamed(int64_t n_in, std::vector<int64_t> outs, int M, int n_total, int m_first,
                    unsigned seed) {
  SCOPED_TRACE("n_in " + std::to_string(n_in) + ", M " + std::to_string(M) + ", tiles " +
               std::to_string(kTiles) + ", weight tiles " + std::to_string(kW));
  GroupProblem p(kKind, n_in, std::move(outs), M, n_total, seed);
  using Stage = StreamStage<kKind, kTiles, kW>;
  run(p.blocks(Stage::kWeightRows), kStreamWarpsFor<kW> * kWarp, Stage::kAllBytes, [&] {
    matmul_stream_kernel<kKind, kTiles, kW, kMinBlocks>(p.group, p.x.values.data(),
                                                        p.x.scales.data(), M, n_total, m_first);
  });
  p.expect_contract([&](int m, int64_t b) { return b * n_total + m_first + m; });
}

TEST(CudaKernelsOnCpu, BiasedSumsAreTheConversionOverTheirWholeRange) {
  // The kernels convert exact block sums this way; a Q8_0 block's reaches 32 · 127 · 127.
  static_assert(32 * 127 * 127 < (1 << 22));
  int differences = 0;
  for (int s = -(1 << 22); s < (1 << 22); ++s)
    differences += std::bit_cast<uint32_t>(biased_sum_to_float(kSumMagicBits + s, kSumMagicBits)) !=
                   std::bit_cast<uint32_t>(static_cast<float>(s));
  EXPECT_EQ(differences, 0);
}

TEST(CudaKernelsOnCpu, Q4TensorCoreOperandsAreSixteenTimesTheValues) {
  // Every nibble value in every byte place, the low nibbles moved up as the kernels move them.
  for (uint32_t word = 0; word < (1u << 16); ++word) {
    const uint32_t w = word * 0x00010001u ^ 0x5A3C0000u;
    const int high = q4_high_nibbles_as_16x(w), low = q4_high_nibbles_as_16x(w << 4);
    for (int byte = 0; byte < 4; ++byte) {
      const int v = static_cast<int>((w >> (8 * byte)) & 0xFF);
      ASSERT_EQ(static_cast<int8_t>(high >> (8 * byte)), 16 * ((v >> 4) - 8)) << w;
      ASSERT_EQ(static_cast<int8_t>(low >> (8 * byte)), 16 * ((v & 15) - 8)) << w;
    }
  }
  // Their block sums, 16 times the values', come back as the values' sums.
  static_assert(16 * 32 * 8 * 127 < (1 << 22));
  int differences = 0;
  for (int s = -(1 << 18); s < (1 << 18); ++s)
    differences += std::bit_cast<uint32_t>(biased_sum_to_float(
                       kMmaSumMagicBits<WeightKind::kQ4_0> + 16 * s, kSum16MagicBits)) !=
                   std::bit_cast<uint32_t>(static_cast<float>(s));
  EXPECT_EQ(differences, 0);
}

TEST(CudaKernelsOnCpu, StreamedMatmulGivesTheContractsBits) {
  // Widths below a round of 16 blocks and across several, groups whose
  // matrices end inside a tile, slices of a prefill, rows from the middle of
  // a block-major batch.
  check_streamed<WeightKind::kQ4_0, 1, 1>(128, {40}, 5, 5, 0, 1);
  check_streamed<WeightKind::kQ8_0, 1, 1>(256, {24, 16}, 8, 8, 0, 2);
  check_streamed<WeightKind::kQ4_0, 1, 1>(1280, {33}, 1, 3, 2, 3);
  check_streamed<WeightKind::kQ4_0, 2, 1>(640, {20, 8, 12}, 13, 20, 4, 4);
  check_streamed<WeightKind::kQ8_0, 4, 1>(192, {17}, 70, 72, 1, 5);
  check_streamed<WeightKind::kQ4_0, 1, 2>(128, {40}, 7, 7, 0, 6);
  check_streamed<WeightKind::kQ8_0, 2, 2>(1088, {50, 16}, 16, 16, 0, 7);
  check_streamed<WeightKind::kQ4_0, 4, 2>(576, {33}, 40, 45, 5, 8);
  check_streamed<WeightKind::kQ8_0, 1, 4>(640, {70}, 6, 6, 0, 9);
  check_streamed<WeightKind::kQ4_0, 1, 4, 2>(1280, {70}, 8, 8, 0, 12);  // =stream-dual
  check_streamed<WeightKind::kQ4_0, 4, 4>(1088, {64, 20}, 29, 33, 2, 10);
  check_streamed<WeightKind::kQ8_0, 4, 4>(128, {130}, 70, 70, 0, 11);
}

// matmul_stream_split_kernel over M (at most 8) activation rows from m_first
// of n_total, block-major: each tile's chains split over kSplitGroups blocks.
template <WeightKind kKind>
void check_stream_split(int64_t n_in, std::vector<int64_t> outs, int M, int n_total, int m_first,
                        unsigned seed) {
  SCOPED_TRACE("n_in " + std::to_string(n_in) + ", M " + std::to_string(M));
  GroupProblem p(kKind, n_in, std::move(outs), M, n_total, seed);
  const int tiles = p.blocks(kSplitTileRows);
  std::vector<float> sums(static_cast<size_t>(tiles) * kStreamChains * kSplitTileRows * kSplitRows,
                          -9.0f);
  std::vector<int32_t> counters(static_cast<size_t>(tiles), 0);
  p.group.chain_sums = sums.data();
  p.group.chain_counters = counters.data();
  using Stage = StreamStage<kKind, 1, 4, kStreamChains / kSplitGroups>;
  run(tiles * kSplitGroups, kStreamChains / kSplitGroups * kWarp, kStreamStages * Stage::kBytes,
      [&] {
        matmul_stream_split_kernel<kKind>(p.group, p.x.values.data(), p.x.scales.data(), M, n_total,
                                          m_first);
      });
  p.expect_contract([&](int m, int64_t b) { return b * n_total + m_first + m; });
  // Left at zero for the next launch.
  EXPECT_EQ(std::count(counters.begin(), counters.end(), 0), tiles);
}

TEST(CudaKernelsOnCpu, SplitStreamedMatmulGivesTheContractsBits) {
  // A width below a round (chains without blocks), groups of matrices ending
  // inside a tile, rows from the middle of a block-major batch, an 8B-class width.
  check_stream_split<WeightKind::kQ4_0>(128, {40}, 5, 5, 0, 21);
  check_stream_split<WeightKind::kQ8_0>(256, {70, 16}, 8, 8, 0, 22);
  check_stream_split<WeightKind::kQ4_0>(1280, {33, 64, 20}, 1, 3, 2, 23);
  check_stream_split<WeightKind::kQ8_0>(576, {64}, 3, 9, 4, 24);
  check_stream_split<WeightKind::kQ4_0>(4096, {130}, 8, 8, 0, 25);
}

// matmul_stream_persistent_kernel over M (at most 8 · kTiles) activation rows
// from m_first of n_total, block-major, with `grid` blocks.
template <WeightKind kKind, int kTiles, int kW>
void check_streamed_persistent(int64_t n_in, std::vector<int64_t> outs, int M, int n_total,
                               int m_first, int grid, unsigned seed) {
  SCOPED_TRACE("n_in " + std::to_string(n_in) + ", M " + std::to_string(M) + ", tiles " +
               std::to_string(kTiles) + ", weight tiles " + std::to_string(kW) + ", " +
               std::to_string(grid) + " blocks");
  GroupProblem p(kKind, n_in, std::move(outs), M, n_total, seed);
  run(grid, kStreamWarpsFor<kW> * kWarp, kPersistentBytes<kKind, kTiles, kW>, [&] {
    matmul_stream_persistent_kernel<kKind, kTiles, kW>(p.group, p.x.values.data(),
                                                       p.x.scales.data(), M, n_total, m_first);
  });
  p.expect_contract([&](int m, int64_t b) { return b * n_total + m_first + m; });
}

TEST(CudaKernelsOnCpu, PersistentStreamedMatmulGivesTheContractsBits) {
  // Blocks taking several tiles across the group's matrices, widths whose
  // last round is short, rows from the middle of a block-major batch, and
  // more blocks than tiles; tiles of 64 and of 16 weight rows.
  check_streamed_persistent<WeightKind::kQ4_0, 1, 4>(640, {70, 64, 20}, 6, 6, 0, 2, 21);
  check_streamed_persistent<WeightKind::kQ8_0, 2, 4>(1088, {130}, 16, 20, 3, 2, 22);
  check_streamed_persistent<WeightKind::kQ4_0, 2, 4>(128, {64, 40}, 13, 17, 2, 1, 23);
  check_streamed_persistent<WeightKind::kQ4_0, 1, 4>(256, {40}, 3, 3, 0, 5, 24);
  check_streamed_persistent<WeightKind::kQ4_0, 1, 1>(640, {40, 24}, 7, 9, 1, 2, 25);
  check_streamed_persistent<WeightKind::kQ8_0, 2, 1>(1088, {33}, 12, 12, 0, 2, 26);
  // 32 rows: the chains' sums through shared memory four chains at a time.
  check_streamed_persistent<WeightKind::kQ4_0, 4, 4>(640, {64, 80}, 29, 33, 2, 2, 27);
  check_streamed_persistent<WeightKind::kQ8_0, 4, 4>(128, {70}, 32, 32, 0, 1, 28);
}

// matmul_prefill_kernel (kGroups 1) or matmul_prefill_grouped_kernel over all
// M rows of a block-major batch.
template <WeightKind kKind, int kGroups>
void check_prefill_tiles(int64_t n_in, std::vector<int64_t> outs, int M, unsigned seed) {
  SCOPED_TRACE("n_in " + std::to_string(n_in) + ", M " + std::to_string(M) + ", " +
               std::to_string(kGroups) + " chain group(s)");
  GroupProblem p(kKind, n_in, std::move(outs), M, M, seed);
  const int col_tiles = (M + kPrefillCols - 1) / kPrefillCols;
  if constexpr (kGroups == 1)
    run(p.blocks(kPrefillRows) * col_tiles, kPrefillThreads, 0,
        [&] { matmul_prefill_kernel<kKind>(p.group, p.x.values.data(), p.x.scales.data(), M); });
  else
    run(p.blocks(kPrefillRows) * col_tiles, kPrefillGroups * kPrefillThreads,
        kPrefillGroupedBytes<kKind>, [&] {
          matmul_prefill_grouped_kernel<kKind>(p.group, p.x.values.data(), p.x.scales.data(), M);
        });
  p.expect_contract([&](int m, int64_t b) { return b * M + m; });
}

TEST(CudaKernelsOnCpu, PrefillTilesMatmulGivesTheContractsBits) {
  // Fewer blocks a row than chains (rounds whose later chains have none, a
  // round of one chain), chains of unequal length (in one round and across
  // rounds), groups whose matrices end inside a tile, activation rows ending
  // inside a tile; one chain group and four.
  check_prefill_tiles<WeightKind::kQ4_0, 1>(128, {70}, 33, 1);
  check_prefill_tiles<WeightKind::kQ4_0, 4>(128, {70}, 33, 1);
  check_prefill_tiles<WeightKind::kQ8_0, 1>(576, {64, 20}, 64, 2);
  check_prefill_tiles<WeightKind::kQ8_0, 4>(576, {64, 20}, 64, 2);
  check_prefill_tiles<WeightKind::kQ4_0, 1>(1280, {40, 100, 9}, 100, 3);
  check_prefill_tiles<WeightKind::kQ4_0, 4>(1280, {40, 100, 9}, 100, 3);
  check_prefill_tiles<WeightKind::kQ8_0, 4>(2112, {65}, 130, 4);
  check_prefill_tiles<WeightKind::kQ4_0, 4>(192, {128}, 65, 5);
  check_prefill_tiles<WeightKind::kQ4_0, 4>(320, {64}, 64, 6);
  check_prefill_tiles<WeightKind::kQ8_0, 4>(1024, {64}, 40, 7);
}

// The warp kernel's value (matmul_k_kernel) of a Q4_K/Q6_K row against one
// row of Q8_K activations: lane group k's super-blocks k, k + 4, ... each
// turned into a float and added in order, then warp_sum's butterfly on lane 0
// (groups 0 and 2, 1 and 3, then the two pairs, then the other lanes' zeros).
template <WeightKind kKind>
float k_contract_value(const uint8_t* row, int64_t n_super, const int8_t* q, const float* d,
                       const int16_t* bsums) {
  const int stride = kKind == WeightKind::kQ4_K ? kQ4KBytes : kQ6KStride;
  float acc[4] = {};
  for (int64_t sb = 0; sb < n_super; ++sb) {
    const uint8_t* blk = row + sb * stride;
    const int8_t* xq = q + sb * kSuperBlock;
    int qx = 0, mins = 0;
    for (int j = 0; j < 8; ++j) {
      int sums[2] = {0, 0};
      for (int e = 0; e < 32; ++e) {
        int v;
        if (kKind == WeightKind::kQ4_K) {
          const uint8_t byte = blk[16 + 32 * (j / 2) + e];
          v = j % 2 ? byte >> 4 : byte & 15;
        } else {
          const int h = j / 4, quarter = j % 4;
          const int low = (blk[64 * h + 32 * (quarter & 1) + e] >> (quarter < 2 ? 0 : 4)) & 15;
          const int top = (blk[128 + 32 * h + e] >> (2 * quarter)) & 3;
          v = (low | top << 4) - 32;
        }
        sums[e / 16] += v * xq[32 * j + e];
      }
      if (kKind == WeightKind::kQ4_K) {
        int sc, mn;
        q4k_scale_min(blk + 4, j, sc, mn);
        qx += sc * (sums[0] + sums[1]);
        mins += mn * (bsums[sb * 16 + 2 * j] + bsums[sb * 16 + 2 * j + 1]);
      } else {
        const int h = j / 4, quarter = j % 4;
        qx += static_cast<int8_t>(blk[192 + 8 * h + 2 * quarter]) * sums[0] +
              static_cast<int8_t>(blk[192 + 8 * h + 2 * quarter + 1]) * sums[1];
      }
    }
    const float xd = d[sb];
    const float value = kKind == WeightKind::kQ4_K
                            ? sub_rn(mul_rn(mul_rn(xd, half_at(blk)), static_cast<float>(qx)),
                                     mul_rn(mul_rn(xd, half_at(blk + 2)), static_cast<float>(mins)))
                            : mul_rn(mul_rn(xd, half_at(blk + 208)), static_cast<float>(qx));
    acc[sb % 4] = add_rn(acc[sb % 4], value);
  }
  float total = add_rn(add_rn(acc[0], acc[2]), add_rn(acc[1], acc[3]));
  for (int o = 0; o < 3; ++o) total = add_rn(total, 0.0f);
  return total;
}

// A group of random Q4_K/Q6_K matrices, M rows of Q8_K activations, and each
// output's value by the warp kernel's arithmetic (k_contract_value).
template <WeightKind kKind>
struct KQuantCase {
  int64_t n_in;
  std::vector<int64_t> outs;
  int M;
  std::vector<std::vector<uint8_t>> weights;
  std::vector<int8_t> q;
  std::vector<float> d;
  std::vector<int16_t> bsums;
  MatmulGroup group;
  std::vector<std::vector<float>> want;

  KQuantCase(int64_t width, std::vector<int64_t> out_rows, int rows, unsigned seed)
      : n_in(width), outs(std::move(out_rows)), M(rows) {
    std::mt19937 rng(seed);
    const int64_t n_super = n_in / kSuperBlock;
    std::uniform_real_distribution<float> scale(-0.02f, 0.02f);
    auto put_half = [&](uint8_t* at, float v) {
      const __half h = __float2half(v);
      std::memcpy(at, &h, 2);
    };
    weights.reserve(outs.size());
    group.count = static_cast<int>(outs.size());
    for (size_t i = 0; i < outs.size(); ++i) {
      std::vector<uint8_t> bytes(static_cast<size_t>(outs[i] * n_super * stride()));
      for (uint8_t& b : bytes) b = static_cast<uint8_t>(rng() & 0xFF);
      for (int64_t sb = 0; sb < outs[i] * n_super; ++sb) {
        uint8_t* blk = bytes.data() + sb * stride();
        put_half(kKind == WeightKind::kQ4_K ? blk : blk + 208, scale(rng));
        if (kKind == WeightKind::kQ4_K) put_half(blk + 2, scale(rng));
      }
      weights.push_back(std::move(bytes));
      group.w[i].kind = kKind;
      group.w[i].n_in = n_in;
      group.w[i].n_out = outs[i];
      group.w[i].q = weights.back().data();
    }
    q.resize(static_cast<size_t>(M * n_in));
    for (int8_t& v : q) v = static_cast<int8_t>(static_cast<int>(rng() % 255) - 127);
    d.resize(static_cast<size_t>(M * n_super));
    std::uniform_real_distribution<float> act_scale(0.001f, 0.1f);
    for (float& v : d) v = act_scale(rng);
    bsums.resize(static_cast<size_t>(M * n_in / 16));
    for (size_t b = 0; b < bsums.size(); ++b) {
      int sum = 0;
      for (int e = 0; e < 16; ++e) sum += q[b * 16 + e];
      bsums[b] = static_cast<int16_t>(sum);
    }
    for (size_t i = 0; i < outs.size(); ++i) {
      want.emplace_back(static_cast<size_t>(M * outs[i]), -7.0f);
      for (int m = 0; m < M; ++m)
        for (int64_t row = 0; row < outs[i]; ++row)
          want[i][static_cast<size_t>(m * outs[i] + row)] = k_contract_value<kKind>(
              weights[i].data() + row * n_super * stride(), n_super, q.data() + m * n_in,
              d.data() + m * n_super, bsums.data() + m * n_super * 16);
    }
  }
  static int stride() { return kKind == WeightKind::kQ4_K ? kQ4KBytes : kQ6KStride; }
  Q8KActivations activations() { return {q.data(), d.data(), bsums.data()}; }
  int weight_rows() const {
    int rows = 0;
    for (int64_t n_out : outs) rows += static_cast<int>(n_out);
    return rows;
  }
  // Fresh outputs, garbage-filled, that the group writes.
  std::vector<std::vector<float>> outputs(float fill) {
    std::vector<std::vector<float>> y;
    for (int64_t n_out : outs) y.emplace_back(static_cast<size_t>(M * n_out), fill);
    for (size_t i = 0; i < outs.size(); ++i) group.y[i] = y[i].data();
    return y;
  }
};

// matmul_k_prefill_kernel over M rows of Q8_K activations gives, for a group
// of Q4_K/Q6_K matrices, the warp kernel's bits (k_contract_value; for
// widths of whole groups of 4 super-blocks also matmul_k_kernel's own, which
// the emulation cannot run where some of a warp's lanes have left its loop).
template <WeightKind kKind>
void check_k_prefill(int64_t n_in, std::vector<int64_t> outs, int M, unsigned seed) {
  SCOPED_TRACE("n_in " + std::to_string(n_in) + ", M " + std::to_string(M));
  KQuantCase<kKind> c(n_in, std::move(outs), M, seed);
  const Q8KActivations x = c.activations();
  if (n_in / kSuperBlock % 4 == 0) {
    std::vector<std::vector<float>> warp_kernel = c.outputs(-3.0f);
    run((c.weight_rows() + kMatmulWarps - 1) / kMatmulWarps, kMatmulWarps * kWarp, 0,
        [&] { matmul_k_kernel<kKind, 8>(c.group, x, M); });
    for (size_t i = 0; i < c.outs.size(); ++i)
      for (size_t e = 0; e < c.want[i].size(); ++e)
        ASSERT_TRUE(same_bits(warp_kernel[i][e], c.want[i][e]))
            << "the warp kernel's value at " << e << " of matrix " << i << ": " << warp_kernel[i][e]
            << " instead of " << c.want[i][e];
  }
  std::vector<std::vector<float>> got = c.outputs(-5.0f);
  const int blocks =
      weight_row_tiles(c.group, kKPrefillRows) * ((M + kKPrefillCols - 1) / kKPrefillCols);
  run(blocks, kKPrefillThreads, 0, [&] { matmul_k_prefill_kernel<kKind>(c.group, x, M); });
  expect_same_bits(got, c.want, c.outs);
}

// matmul_k_mma_kernel with tiles of 8 · kTiles activation rows gives the warp
// kernel's bits.
template <WeightKind kKind, int kTiles>
void check_k_mma(int64_t n_in, std::vector<int64_t> outs, int M, unsigned seed) {
  SCOPED_TRACE("n_in " + std::to_string(n_in) + ", M " + std::to_string(M) + ", tiles " +
               std::to_string(kTiles));
  KQuantCase<kKind> c(n_in, std::move(outs), M, seed);
  const Q8KActivations x = c.activations();
  std::vector<std::vector<float>> got = c.outputs(-5.0f);
  const int cols = 8 * kTiles;
  const int blocks = weight_row_tiles(c.group, kKMmaRows) * ((M + cols - 1) / cols);
  run(blocks, kKMmaThreads, 0, [&] { matmul_k_mma_kernel<kKind, kTiles>(c.group, x, M); });
  expect_same_bits(got, c.want, c.outs);
}

TEST(CudaKernelsOnCpu, KQuantPrefillTilesGiveTheWarpKernelsBits) {
  // 1 to 3 super-blocks a row (lane groups without any), groups of unequal
  // length, matrices ending inside a tile, activation rows ending inside one.
  check_k_prefill<WeightKind::kQ4_K>(256, {70}, 33, 1);
  check_k_prefill<WeightKind::kQ6_K>(512, {40, 24}, 40, 2);
  check_k_prefill<WeightKind::kQ4_K>(768, {64}, 64, 3);
  check_k_prefill<WeightKind::kQ6_K>(1536, {65}, 35, 4);
  check_k_prefill<WeightKind::kQ4_K>(2304, {20, 9}, 70, 5);
  check_k_prefill<WeightKind::kQ4_K>(1024, {24}, 40, 6);
  check_k_prefill<WeightKind::kQ6_K>(2048, {16, 16}, 33, 7);
}

TEST(CudaKernelsOnCpu, KQuantTensorCoresGiveTheWarpKernelsBits) {
  // One row to several tiles of activation rows
  // (ending inside one), 1 to 9 super-blocks a row (warps without any, warps
  // with one more than others), matrices of fewer rows than a block and
  // ending inside one.
  check_k_mma<WeightKind::kQ4_K, 1>(256, {20}, 1, 1);
  check_k_mma<WeightKind::kQ6_K, 1>(512, {9, 24}, 2, 2);
  check_k_mma<WeightKind::kQ4_K, 1>(768, {16, 5}, 8, 3);
  check_k_mma<WeightKind::kQ6_K, 2>(1536, {33}, 11, 4);
  check_k_mma<WeightKind::kQ4_K, 2>(2304, {20, 9}, 16, 5);
  check_k_mma<WeightKind::kQ4_K, 4>(1024, {24}, 29, 6);
  check_k_mma<WeightKind::kQ6_K, 4>(2048, {16, 16}, 33, 7);
  check_k_mma<WeightKind::kQ4_K, 4>(1280, {17}, 70, 8);
  check_k_mma<WeightKind::kQ6_K, 1>(256, {40}, 17, 9);
  // An 8B-class down projection's width: 14 super-blocks a warp.
  check_k_mma<WeightKind::kQ4_K, 1>(14336, {16}, 3, 10);
  check_k_mma<WeightKind::kQ6_K, 2>(14336, {16}, 12, 11);
  // One row of each type at that width, and a group of matrices.
  check_k_mma<WeightKind::kQ4_K, 1>(14336, {16, 7}, 1, 12);
  check_k_mma<WeightKind::kQ6_K, 1>(14336, {24}, 1, 13);
  check_k_mma<WeightKind::kQ6_K, 1>(1280, {9, 33}, 1, 14);
}

// matmul_mma_kernel (the tensor-core kernel for 5 rows and more) over M rows
// from m_first of n_total: block-major activations (with or without the
// pipelined loads), or row after row from m_first.
template <WeightKind kKind, int kTiles, bool kBlockMajor, bool kPipelined>
void check_tensor_cores(int64_t n_in, std::vector<int64_t> outs, int M, int n_total, int m_first,
                        unsigned seed) {
  SCOPED_TRACE("n_in " + std::to_string(n_in) + ", M " + std::to_string(M) + ", tiles " +
               std::to_string(kTiles) + (kBlockMajor ? ", block-major" : ", row-major") +
               (kPipelined ? ", pipelined" : ""));
  GroupProblem p(kKind, n_in, std::move(outs), M, n_total, seed);
  const int64_t nb = n_in / 32;
  // Row-major: the launch's rows start at m_first.
  const int8_t* xq = p.x.values.data() + (kBlockMajor ? 0 : m_first * nb * 32);
  const float* xd = p.x.scales.data() + (kBlockMajor ? 0 : m_first * nb);
  run(p.blocks(kMmaRows), kMmaWarps * kWarp, 0, [&] {
    matmul_mma_kernel<kKind, kTiles, kBlockMajor, kPipelined>(p.group, xq, xd, M, n_total, m_first);
  });
  p.expect_contract([&](int m, int64_t b) {
    return kBlockMajor ? b * n_total + m_first + m : (m_first + m) * nb + b;
  });
}

TEST(CudaKernelsOnCpu, TensorCoreMatmulGivesTheContractsBits) {
  check_tensor_cores<WeightKind::kQ4_0, 1, true, false>(128, {40}, 6, 6, 0, 1);
  check_tensor_cores<WeightKind::kQ8_0, 2, true, false>(640, {20, 16}, 13, 16, 2, 2);
  check_tensor_cores<WeightKind::kQ4_0, 4, false, false>(192, {17}, 40, 45, 3, 3);
  // The pipelined loads where a tile has all 16 rows and nb is a multiple of 64,
  // the other steps in the tile where the matrix ends (the same for every lane).
  check_tensor_cores<WeightKind::kQ4_0, 1, true, true>(2048, {43}, 8, 8, 0, 4);
  check_tensor_cores<WeightKind::kQ8_0, 4, true, true>(2048, {32}, 30, 33, 3, 5);
}

// An F16/BF16 matrix of n_out rows of n_in values drawn from `value`, as
// the backend uploads it.
template <WeightKind kKind>
struct HalfWeights {
  std::vector<uint16_t> bits;
  DeviceMatrix matrix;

  template <class Value>
  HalfWeights(int64_t n_in, int64_t n_out, Value&& value) {
    bits.resize(static_cast<size_t>(n_in * n_out));
    for (uint16_t& b : bits) {
      const float f = value();
      if constexpr (kKind == WeightKind::kBF16) {
        const __nv_bfloat16 h = __float2bfloat16(f);
        std::memcpy(&b, &h, 2);
      } else {
        const __half h = __float2half(f);
        std::memcpy(&b, &h, 2);
      }
    }
    matrix.kind = kKind;
    matrix.n_in = n_in;
    matrix.n_out = n_out;
    matrix.q = bits.data();
  }
};

// Two F16/BF16 matrices of one shape (gate and up, or any pair of a group),
// values in [-0.1, 0.1], and M rows of input in [-1, 1], all drawn from seed.
template <WeightKind kKind>
struct HalfPair {
  std::mt19937 rng;
  std::uniform_real_distribution<float> value{-1.0f, 1.0f};
  HalfWeights<kKind> a, b;
  std::vector<float> x;

  HalfPair(int64_t n_in, int64_t n_out, int M, unsigned seed)
      : rng(seed),
        a(n_in, n_out, [&] { return value(rng) * 0.1f; }),
        b(n_in, n_out, [&] { return value(rng) * 0.1f; }),
        x(static_cast<size_t>(M * n_in)) {
    for (float& v : x) v = value(rng);
  }
  // The two as a group writing ya and yb (a gated launch writes only ya).
  MatmulGroup group(float* ya, float* yb) const {
    MatmulGroup g;
    g.count = 2;
    g.w[0] = a.matrix;
    g.w[1] = b.matrix;
    g.y[0] = ya;
    g.y[1] = yb;
    return g;
  }
};

// F16/BF16 gate and up: the gated tensor-core kernel (8 rows of each matrix a
// block, PARSPEC_CUDA_FUSE=swiglu) gives SwiGLU of what the kernel gives for
// the two matrices as a group, whatever the hardware's order of an mma's sums
// (emulated here in one fixed order for both).
template <WeightKind kKind, int kTiles>
void check_gated_half(int64_t n_in, int64_t n_out, int M, unsigned seed) {
  SCOPED_TRACE("n_in " + std::to_string(n_in) + ", n_out " + std::to_string(n_out) + ", M " +
               std::to_string(M));
  const HalfPair<kKind> p(n_in, n_out, M, seed);
  const HalfWeights<kKind>& gate = p.a;
  const std::vector<float>& x = p.x;
  std::vector<float> y_gate(static_cast<size_t>(M * n_out), -7.0f), y_up(y_gate.size(), -7.0f);
  MatmulGroup group = p.group(y_gate.data(), y_up.data());
  run(static_cast<int>(2 * ((n_out + 15) / 16)), kMmaWarps * kWarp, 0,
      [&] { matmul_half_mma_kernel<kKind, kTiles>(group, x.data(), M, QkvStore{}); });
  // The group's values are the products (the two halves of each activation
  // keep about twice a half's precision).
  for (int m = 0; m < M; ++m)
    for (int64_t row = 0; row < n_out; ++row) {
      double want = 0.0;
      for (int64_t i = 0; i < n_in; ++i)
        want += static_cast<double>(
                    half_bits_to_float(gate.bits[row * n_in + i], kKind == WeightKind::kBF16)) *
                x[m * n_in + i];
      ASSERT_NEAR(y_gate[m * n_out + row], want, 1e-4) << "activation row " << m << ", row " << row;
    }
  std::vector<float> fused(y_gate.size(), -7.0f);
  group.y[0] = fused.data();
  group.y[1] = nullptr;
  run(static_cast<int>((n_out + 7) / 8), kMmaWarps * kWarp, 0, [&] {
    matmul_half_mma_kernel<kKind, kTiles, HalfEpilogue::kGated>(group, x.data(), M, QkvStore{});
  });
  for (int m = 0; m < M; ++m)
    for (int64_t row = 0; row < n_out; ++row) {
      const size_t at = static_cast<size_t>(m * n_out + row);
      ASSERT_TRUE(same_bits(fused[at], swiglu_value(y_gate[at], y_up[at])))
          << "activation row " << m << ", output " << row;
    }
}

TEST(CudaKernelsOnCpu, GatedHalfMatmulGivesSwiGluOfTheGroupsValues) {
  check_gated_half<WeightKind::kF16, 1>(128, 40, 3, 1);
  check_gated_half<WeightKind::kBF16, 2>(256, 24, 11, 2);
  check_gated_half<WeightKind::kF16, 4>(96, 20, 40, 3);
}

// The pair's outputs as `reference` writes them (given the group to run) and
// as `other` does (given a group with half_split set), over the pair's blocks
// for kEpilogue (a gated launch writes gate's outputs only): the same bits.
template <WeightKind kKind, HalfEpilogue kEpilogue, class Reference, class Other>
void expect_same_pair_bits(const HalfPair<kKind>& p, int64_t n_out, int M, uint32_t* half_split,
                           Reference&& reference, Other&& other) {
  constexpr bool kGated = kEpilogue == HalfEpilogue::kGated;
  const int blocks = static_cast<int>(kGated ? (n_out + 7) / 8 : 2 * ((n_out + 15) / 16));
  const size_t count = static_cast<size_t>(M * n_out);
  std::vector<float> y_a(count, -7.0f), y_b(count, -7.0f), z_a(count, -5.0f), z_b(count, -5.0f);
  const MatmulGroup want = p.group(y_a.data(), kGated ? nullptr : y_b.data());
  run(blocks, kMmaWarps * kWarp, 0, [&] { reference(want); });
  MatmulGroup got = p.group(z_a.data(), kGated ? nullptr : z_b.data());
  got.half_split = half_split;
  run(blocks, kMmaWarps * kWarp, 0, [&] { other(got); });
  if (kGated)
    expect_same_bits({z_a}, {y_a}, {n_out});
  else
    expect_same_bits({z_a, z_b}, {y_a, y_b}, {n_out, n_out});
}

// The tensor-core kernel with its operands from kInput gives the bits of every
// lane splitting its own row's values (HalfInput::kRows), for plain groups and
// gated gate/up: kSplit (input split once by split_halves_kernel, as launches
// of many rows take it; slices of 32 rows) and kPairs (one or two rows split a
// pair a lane and handed round by shuffles).
template <WeightKind kKind, HalfEpilogue kEpilogue, HalfInput kInput>
void check_half_input(int64_t n_in, int64_t n_out, int M, unsigned seed) {
  SCOPED_TRACE("n_in " + std::to_string(n_in) + ", n_out " + std::to_string(n_out) + ", M " +
               std::to_string(M));
  constexpr int kTiles = kInput == HalfInput::kPairs ? 1 : kMmaMaxTiles;
  HalfPair<kKind> p(n_in, n_out, M, seed);
  // Zeros, and values far from 1 whose lo halves matter.
  for (float& v : p.x)
    if (p.rng() % 16 == 0)
      v = 0.0f;
    else if (p.rng() % 8 == 0)
      v *= 1000.0f;
  const int64_t groups = M * n_in / 8;
  std::vector<uint4> split;
  if (kInput == HalfInput::kSplit) {
    split.resize(static_cast<size_t>(2 * groups));
    run(static_cast<int>((groups + 255) / 256), 256, 0,
        [&] { split_halves_kernel<kKind>(p.x.data(), groups, split.data()); });
  }
  // A split input leaves x unread.
  const std::vector<float> garbage(p.x.size(), 12345.0f);
  const std::vector<float>& x = kInput == HalfInput::kSplit ? garbage : p.x;
  expect_same_pair_bits<kKind, kEpilogue>(
      p, n_out, M, split.empty() ? nullptr : reinterpret_cast<uint32_t*>(split.data()),
      [&](const MatmulGroup& g) {
        matmul_half_mma_kernel<kKind, kTiles, kEpilogue>(g, p.x.data(), M, QkvStore{});
      },
      [&](const MatmulGroup& g) {
        matmul_half_mma_kernel<kKind, kTiles, kEpilogue, kInput>(g, x.data(), M, QkvStore{});
      });
}

TEST(CudaKernelsOnCpu, HalfMatmulOnPairsOrSplitInputGivesTheSameBits) {
  using enum HalfEpilogue;
  using enum HalfInput;
  // One or two rows: widths of 2 to 5 chunks.
  check_half_input<WeightKind::kF16, kPlain, kPairs>(128, 40, 1, 1);
  check_half_input<WeightKind::kBF16, kPlain, kPairs>(96, 24, 2, 2);
  check_half_input<WeightKind::kF16, kGated, kPairs>(64, 24, 2, 3);
  check_half_input<WeightKind::kBF16, kGated, kPairs>(160, 16, 1, 4);
  // Many rows: within one slice of 32, across slices, and ending inside a tile.
  check_half_input<WeightKind::kF16, kPlain, kSplit>(128, 40, 20, 5);
  check_half_input<WeightKind::kBF16, kPlain, kSplit>(96, 24, 70, 6);
  check_half_input<WeightKind::kF16, kGated, kSplit>(64, 24, 40, 7);
  check_half_input<WeightKind::kBF16, kGated, kSplit>(160, 16, 33, 8);
}

// matmul_half_prefill_kernel over M rows of a group gives the bits that
// matmul_half_mma_kernel gives them, whatever the hardware's order of an mma's
// sums (emulated here in one fixed order for both).
template <WeightKind kKind>
void check_half_prefill(int64_t n_in, std::vector<int64_t> outs, int M, unsigned seed) {
  SCOPED_TRACE("n_in " + std::to_string(n_in) + ", M " + std::to_string(M));
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> value(-1.0f, 1.0f);
  auto weight = [&] { return value(rng) * 0.1f; };
  std::vector<HalfWeights<kKind>> weights;
  for (int64_t n_out : outs) weights.emplace_back(n_in, n_out, weight);
  std::vector<float> x(static_cast<size_t>(M * n_in));
  for (float& v : x) v = value(rng) * (rng() % 8 == 0 ? 1000.0f : 1.0f);
  MatmulGroup group;
  group.count = static_cast<int>(outs.size());
  std::vector<std::vector<float>> want, got;
  int tiles16 = 0, tiles64 = 0;
  for (size_t i = 0; i < outs.size(); ++i) {
    group.w[i] = weights[i].matrix;
    want.emplace_back(static_cast<size_t>(M * outs[i]), -7.0f);
    got.emplace_back(static_cast<size_t>(M * outs[i]), -5.0f);
    tiles16 += static_cast<int>((outs[i] + 15) / 16);
    tiles64 += static_cast<int>((outs[i] + kPrefillRows - 1) / kPrefillRows);
  }
  for (size_t i = 0; i < outs.size(); ++i) group.y[i] = want[i].data();
  run(tiles16, kMmaWarps * kWarp, 0,
      [&] { matmul_half_mma_kernel<kKind, kMmaMaxTiles>(group, x.data(), M, QkvStore{}); });
  for (size_t i = 0; i < outs.size(); ++i) group.y[i] = got[i].data();
  const int col_tiles = (M + kPrefillCols - 1) / kPrefillCols;
  run(tiles64 * col_tiles, kPrefillThreads, 0,
      [&] { matmul_half_prefill_kernel<kKind>(group, x.data(), M); });
  expect_same_bits(got, want, outs);
  // The same tiles on input split once (split_halves_kernel).
  const int64_t groups = M * n_in / 8;
  std::vector<uint4> split(static_cast<size_t>(2 * groups));
  run(static_cast<int>((groups + 255) / 256), 256, 0,
      [&] { split_halves_kernel<kKind>(x.data(), groups, split.data()); });
  for (auto& y : got) std::fill(y.begin(), y.end(), -5.0f);
  group.half_split = reinterpret_cast<uint32_t*>(split.data());
  run(tiles64 * col_tiles, kPrefillThreads, 0,
      [&] { matmul_half_prefill_kernel<kKind, true>(group, nullptr, M); });
  expect_same_bits(got, want, outs);
}

TEST(CudaKernelsOnCpu, HalfPrefillTilesGiveTheTensorCoreKernelsBits) {
  // Fewer chunks a row than chains, chains of unequal length, groups whose
  // matrices end inside a tile, activation rows ending inside a tile.
  check_half_prefill<WeightKind::kF16>(128, {70, 40}, 33, 1);
  check_half_prefill<WeightKind::kBF16>(576, {64}, 100, 2);
  check_half_prefill<WeightKind::kF16>(1088, {20, 9}, 65, 3);
}

// PARSPEC_CUDA_FUSE=norm on F16/BF16 weights: the tensor-core kernel
// normalizing h itself gives the bits it gives on add_rmsnorm_wide_kernel's
// row, for a plain and a gated group, and with `accumulate` adds its values to
// y as launch_add would.
template <WeightKind kKind>
void check_normed_half(int64_t n_in, int64_t n_out, unsigned seed) {
  SCOPED_TRACE("n_in " + std::to_string(n_in) + ", n_out " + std::to_string(n_out));
  std::mt19937 rng(seed);
  std::normal_distribution<float> value(0.0f, 2.0f), gain(1.0f, 0.2f);
  auto weight = [&] { return value(rng) * 0.05f; };
  const HalfWeights<kKind> gate(n_in, n_out, weight), up(n_in, n_out, weight);
  const float eps = 1e-6f;
  std::vector<float> h(static_cast<size_t>(n_in)), norm_weight(h.size()), normalized(h.size());
  for (float& v : h) v = value(rng);
  for (float& v : norm_weight) v = gain(rng);
  run(1, kNormBlock, 0, [&] {
    add_rmsnorm_wide_kernel(h.data(), nullptr, norm_weight.data(), static_cast<int>(n_in), eps,
                            normalized.data(), nullptr, nullptr, false, Q8KActivations{});
  });
  const int threads = kMmaWarps * kWarp;
  for (const bool gated : {false, true}) {
    MatmulGroup group;
    group.count = gated ? 2 : 1;
    group.w[0] = gate.matrix;
    group.w[1] = up.matrix;
    const int blocks = static_cast<int>(gated ? 2 * ((n_out + 15) / 16) : (n_out + 15) / 16);
    std::vector<float> want(static_cast<size_t>(n_out), -7.0f), got(want);
    group.y[0] = want.data();
    auto launch = [&](bool normed) {
      if (gated && normed)
        matmul_half_mma_kernel<kKind, 1, HalfEpilogue::kGated, HalfInput::kNormed>(group, nullptr,
                                                                                   1, {});
      else if (gated)
        matmul_half_mma_kernel<kKind, 1, HalfEpilogue::kGated>(group, normalized.data(), 1, {});
      else if (normed)
        matmul_half_mma_kernel<kKind, 1, HalfEpilogue::kPlain, HalfInput::kNormed>(group, nullptr,
                                                                                   1, {});
      else
        matmul_half_mma_kernel<kKind, 1>(group, normalized.data(), 1, {});
    };
    run(blocks, threads, 0, [&] { launch(false); });
    group.y[0] = got.data();
    group.norm = RowNorm{h.data(), norm_weight.data(), eps};
    run(blocks, threads, 0, [&] { launch(true); });
    for (int64_t row = 0; row < n_out; ++row)
      ASSERT_TRUE(same_bits(got[row], want[row])) << (gated ? "gated" : "plain") << ", row " << row;
    if (gated) continue;
    // Accumulating into y.
    std::vector<float> sum(static_cast<size_t>(n_out));
    for (float& v : sum) v = value(rng);
    const std::vector<float> base(sum);
    group.y[0] = sum.data();
    group.norm = RowNorm{};
    group.accumulate = true;
    run(blocks, threads, 0, [&] { launch(false); });
    for (int64_t row = 0; row < n_out; ++row)
      ASSERT_TRUE(same_bits(sum[row], add_rn(base[row], want[row]))) << "accumulating, row " << row;
  }
}

TEST(CudaKernelsOnCpu, HalfMatmulNormalizesItsInputAsTheNormKernelDoes) {
  check_normed_half<WeightKind::kF16>(1024, 40, 1);
  check_normed_half<WeightKind::kBF16>(1280, 24, 2);
}

// Two to eight activation rows, row after row, through a few-rows kernel:
// matmul_rows_kernel (up to 4, `threads` kGemvThreads) or
// matmul_rows_wide_kernel (2 or 4 weight rows a lane, kGemvThreads / kW).
template <class Kernel>
void check_few_rows(WeightKind kind, int64_t n_in, std::vector<int64_t> outs, int M, int threads,
                    unsigned seed, Kernel&& kernel) {
  SCOPED_TRACE("n_in " + std::to_string(n_in) + ", M " + std::to_string(M) + ", threads " +
               std::to_string(threads));
  GroupProblem p(kind, n_in, std::move(outs), M, M, seed);
  run(p.blocks(kMmaRows), threads, 0,
      [&] { kernel(p.group, p.x.values.data(), p.x.scales.data(), M); });
  const int64_t nb = n_in / 32;
  p.expect_contract([&](int m, int64_t b) { return m * nb + b; });
}

template <WeightKind kKind, int kR>
void check_rows(int64_t n_in, std::vector<int64_t> outs, int M, unsigned seed) {
  check_few_rows(kKind, n_in, std::move(outs), M, kGemvThreads, seed,
                 matmul_rows_kernel<kKind, kR>);
}

template <WeightKind kKind, int kR, int kW>
void check_wide_rows(int64_t n_in, std::vector<int64_t> outs, int M, unsigned seed) {
  check_few_rows(kKind, n_in, std::move(outs), M, kGemvThreads / kW, seed,
                 matmul_rows_wide_kernel<kKind, kR, kW>);
}

TEST(CudaKernelsOnCpu, FewRowsKernelsGiveTheContractsBits) {
  check_rows<WeightKind::kQ4_0, 2>(256, {40}, 2, 1);
  check_rows<WeightKind::kQ8_0, 4>(1280, {16, 8, 33}, 3, 2);
  // Partial tiles, groups, fewer rows than the kernel takes, K not a multiple
  // of a lane's blocks in flight.
  check_wide_rows<WeightKind::kQ4_0, 2, 4>(256, {40}, 2, 3);
  check_wide_rows<WeightKind::kQ4_0, 4, 2>(1280, {16, 8, 33}, 3, 4);
  check_wide_rows<WeightKind::kQ8_0, 4, 4>(96, {24, 50}, 4, 5);
  check_wide_rows<WeightKind::kQ8_0, 8, 2>(3072, {20}, 5, 6);
  check_wide_rows<WeightKind::kQ4_0, 8, 4>(1024 + 32 * 7, {64, 17}, 8, 7);
  check_wide_rows<WeightKind::kQ4_0, 2, 2>(32, {5}, 2, 8);
}

// One activation row through matmul_gemv_kernel (the default one-row kernel).
template <WeightKind kKind>
std::vector<float> one_row(const Weights& w, const Activations& x) {
  std::vector<float> y(static_cast<size_t>(w.matrix.n_out), -7.0f);
  MatmulGroup group;
  group.count = 1;
  group.w[0] = w.matrix;
  group.y[0] = y.data();
  const int64_t n_in = w.matrix.n_in;
  run(static_cast<int>((w.matrix.n_out + 15) / 16), kGemvThreads,
      static_cast<size_t>(n_in + n_in / 32 * 4),
      [&] { matmul_gemv_kernel<kKind>(group, x.values.data(), x.scales.data(), QkvStore{}); });
  return y;
}

template <WeightKind kKind>
void check_one_row_kernels(int64_t n_in, int64_t n_out, unsigned seed) {
  SCOPED_TRACE("n_in " + std::to_string(n_in) + ", n_out " + std::to_string(n_out));
  std::mt19937 rng(seed);
  const int64_t nb = n_in / 32;
  const Weights gate(kKind, n_in, n_out, rng), up(kKind, n_in, n_out, rng);
  const Activations x(nb, 1, rng);
  const std::vector<float> g = one_row<kKind>(gate, x), u = one_row<kKind>(up, x);
  for (int64_t row = 0; row < n_out; ++row) {
    const float want = contract_value(gate, row, x, [](int64_t b) { return b; });
    ASSERT_TRUE(same_bits(g[row], want)) << "one-row kernel, row " << row;
  }

  // Two lanes a chain: the one-row kernel's bits.
  std::vector<float> paired(static_cast<size_t>(n_out), -7.0f);
  MatmulGroup group;
  group.count = 1;
  group.w[0] = gate.matrix;
  group.y[0] = paired.data();
  run(static_cast<int>((n_out + 15) / 16), kPairedThreads, static_cast<size_t>(n_in + nb * 4),
      [&] { matmul_gemv_paired_kernel<kKind>(group, x.values.data(), x.scales.data()); });
  for (int64_t row = 0; row < n_out; ++row)
    ASSERT_TRUE(same_bits(paired[row], g[row])) << "paired kernel, row " << row;

  // Gate, up and SwiGLU in one kernel: SwiGLU of the one-row kernel's values,
  // quantized as swiglu_kernel quantizes them.
  const bool quantize = n_out % 32 == 0;
  std::vector<float> out(static_cast<size_t>(n_out), -7.0f);
  std::vector<int8_t> q(static_cast<size_t>(n_out), 99);
  std::vector<float> d(static_cast<size_t>(n_out / 32 + 1), -1.0f);
  run(static_cast<int>((n_out + 31) / 32), kGatedThreads, static_cast<size_t>(n_in + nb * 4), [&] {
    matmul_gemv_gated_kernel<kKind>(gate.matrix, up.matrix, x.values.data(), x.scales.data(),
                                    out.data(), quantize ? q.data() : nullptr, d.data(), RowNorm{});
  });
  for (int64_t row = 0; row < n_out; ++row)
    ASSERT_TRUE(same_bits(out[row], swiglu_value(g[row], u[row]))) << "gated kernel, row " << row;
  if (!quantize) return;
  for (int64_t b = 0; b < n_out / 32; ++b) {
    float amax = 0.0f;
    for (int i = 0; i < 32; ++i) amax = std::max(amax, std::fabs(out[b * 32 + i]));
    const float scale = __half2float(__float2half_rn(div_rn(amax, 127.0f)));
    ASSERT_TRUE(same_bits(d[b], scale)) << "gated kernel, scale of block " << b;
    for (int i = 0; i < 32; ++i) {
      const float v = scale != 0.0f ? std::rint(div_rn(out[b * 32 + i], scale)) : 0.0f;
      ASSERT_EQ(q[b * 32 + i], static_cast<int8_t>(std::clamp(v, -127.0f, 127.0f)))
          << "gated kernel, quant " << b * 32 + i;
    }
  }
}

// PARSPEC_CUDA_FUSE=norm: the one-row kernels normalizing h themselves give
// the bits they give on add_rmsnorm_wide_kernel's quantized output, and with
// `accumulate` they add their values to y as launch_add would.
template <WeightKind kKind>
void check_normed_input(int64_t n_in, int64_t n_out, int trials, unsigned seed) {
  SCOPED_TRACE("n_in " + std::to_string(n_in) + ", n_out " + std::to_string(n_out));
  std::mt19937 rng(seed);
  const int64_t nb = n_in / 32;
  const float eps = 1e-5f;
  const Weights gate(kKind, n_in, n_out, rng), up(kKind, n_in, n_out, rng);
  std::vector<float> h(static_cast<size_t>(n_in)), norm_weight(static_cast<size_t>(n_in));
  std::normal_distribution<float> value(0.0f, 2.0f), gain(1.0f, 0.2f);
  for (float& v : h) v = value(rng);
  for (float& v : norm_weight) v = gain(rng);
  // The norm kernel's output, as the next matmul reads it.
  Activations x(nb, 1, rng);
  std::vector<float> normalized(static_cast<size_t>(n_in));
  run(1, kNormBlock, 0, [&] {
    add_rmsnorm_wide_kernel(h.data(), nullptr, norm_weight.data(), static_cast<int>(n_in), eps,
                            normalized.data(), x.values.data(), x.scales.data(), false,
                            Q8KActivations{});
  });
  // The scale, as the blocks of each one-row kernel compute it: over this row
  // and more (a step done in another order changes it only now and then).
  for (int trial = 0; trial < trials; ++trial) {
    std::vector<float> row(h), want_row(static_cast<size_t>(n_in));
    std::vector<int8_t> unused_q(static_cast<size_t>(n_in));
    std::vector<float> unused_d(static_cast<size_t>(nb));
    if (trial > 0) {
      std::uniform_real_distribution<float> magnitude(0.01f, 100.0f);
      const float m = magnitude(rng);
      for (float& v : row) v = value(rng) * m;
      run(1, kNormBlock, 0, [&] {
        add_rmsnorm_wide_kernel(row.data(), nullptr, norm_weight.data(), static_cast<int>(n_in),
                                eps, want_row.data(), unused_q.data(), unused_d.data(), false,
                                Q8KActivations{});
      });
    } else {
      want_row = normalized;
    }
    for (const int threads : {kGemvThreads, kPairedThreads}) {
      float scale = 0.0f;
      run(1, threads, 0, [&] {
        const float s = normalized_row_scale(row.data(), static_cast<int>(n_in), eps, threads);
        if (threadIdx.x == 0) scale = s;
      });
      for (int64_t i = 0; i < n_in; ++i)
        ASSERT_TRUE(same_bits(mul_rn(mul_rn(row[i], scale), norm_weight[i]), want_row[i]))
            << "row " << trial << ", " << threads << " threads, value " << i;
    }
  }
  const std::vector<float> want = one_row<kKind>(gate, x), want_up = one_row<kKind>(up, x);
  const RowNorm norm{h.data(), norm_weight.data(), eps};
  const int tiles = static_cast<int>((n_out + 15) / 16);
  const size_t shared = static_cast<size_t>(n_in + nb * 4);

  std::vector<float> y(static_cast<size_t>(n_out), -7.0f), paired(y);
  MatmulGroup group;
  group.count = 1;
  group.w[0] = gate.matrix;
  group.y[0] = y.data();
  group.norm = norm;
  run(tiles, kGemvThreads, shared,
      [&] { matmul_gemv_kernel<kKind>(group, nullptr, nullptr, QkvStore{}); });
  group.y[0] = paired.data();
  run(tiles, kPairedThreads, shared,
      [&] { matmul_gemv_paired_kernel<kKind>(group, nullptr, nullptr); });
  for (int64_t row = 0; row < n_out; ++row) {
    ASSERT_TRUE(same_bits(y[row], want[row])) << "one-row kernel, row " << row;
    ASSERT_TRUE(same_bits(paired[row], want[row])) << "paired kernel, row " << row;
  }

  // The gated kernel normalizing its input: SwiGLU of the values above.
  std::vector<float> out(static_cast<size_t>(n_out), -7.0f);
  run(static_cast<int>((n_out + 31) / 32), kGatedThreads, shared, [&] {
    matmul_gemv_gated_kernel<kKind>(gate.matrix, up.matrix, nullptr, nullptr, out.data(), nullptr,
                                    nullptr, norm);
  });
  for (int64_t row = 0; row < n_out; ++row)
    ASSERT_TRUE(same_bits(out[row], swiglu_value(want[row], want_up[row])))
        << "gated kernel, row " << row;

  // Accumulating into y: y + the kernel's value, in both one-row kernels.
  std::vector<float> base(static_cast<size_t>(n_out));
  for (float& v : base) v = value(rng);
  for (const bool two_lanes : {false, true}) {
    std::vector<float> sum(base);
    MatmulGroup add;
    add.count = 1;
    add.w[0] = gate.matrix;
    add.y[0] = sum.data();
    add.accumulate = true;
    if (two_lanes)
      run(tiles, kPairedThreads, shared,
          [&] { matmul_gemv_paired_kernel<kKind>(add, x.values.data(), x.scales.data()); });
    else
      run(tiles, kGemvThreads, shared,
          [&] { matmul_gemv_kernel<kKind>(add, x.values.data(), x.scales.data(), QkvStore{}); });
    for (int64_t row = 0; row < n_out; ++row)
      ASSERT_TRUE(same_bits(sum[row], add_rn(base[row], want[row])))
          << (two_lanes ? "paired" : "one-row") << " kernel accumulating, row " << row;
  }
}

TEST(CudaKernelsOnCpu, OneRowKernelsNormalizeTheirInputAsTheNormKernelDoes) {
  check_normed_input<WeightKind::kQ4_0>(4096, 40, 12, 1);  // every norm thread: 4 values
  check_normed_input<WeightKind::kQ8_0>(1280, 33, 6, 2);   // past dim for most threads
  check_normed_input<WeightKind::kQ4_0>(96, 16, 1, 3);
}

// PARSPEC_CUDA_FUSE=norm-once: a one-row matmul adding into h whose last
// block normalizes h gives h the bits that accumulating gives it, and the
// quantized row the norm kernel writes from that h; its count is back at zero.
template <WeightKind kKind>
void check_norm_after(int64_t n_in, int64_t n_out, unsigned seed) {
  SCOPED_TRACE("n_in " + std::to_string(n_in) + ", n_out " + std::to_string(n_out));
  std::mt19937 rng(seed);
  const Weights w(kKind, n_in, n_out, rng);
  const Activations x(n_in / 32, 1, rng);
  std::normal_distribution<float> value(0.0f, 2.0f), gain(1.0f, 0.2f);
  std::vector<float> base(static_cast<size_t>(n_out)), norm_weight(base.size());
  for (float& v : base) v = value(rng);
  for (float& v : norm_weight) v = gain(rng);
  const float eps = 1e-5f;
  const int tiles = static_cast<int>((n_out + 15) / 16);
  const size_t shared = static_cast<size_t>(n_in + n_in / 32 * 4);
  const std::vector<float> product = one_row<kKind>(w, x);
  std::vector<float> want_h(base), normalized(base.size());
  for (size_t i = 0; i < base.size(); ++i) want_h[i] = add_rn(base[i], product[i]);
  std::vector<int8_t> want_q(base.size());
  std::vector<float> want_d(base.size() / 32);
  run(1, kNormBlock, 0, [&] {
    add_rmsnorm_wide_kernel(want_h.data(), nullptr, norm_weight.data(), static_cast<int>(n_out),
                            eps, normalized.data(), want_q.data(), want_d.data(), false,
                            Q8KActivations{});
  });
  for (const bool two_lanes : {false, true}) {
    std::vector<float> h(base);
    std::vector<int8_t> q(want_q.size(), 99);
    std::vector<float> d(want_d.size(), -7.0f);
    int32_t counter = 0;
    MatmulGroup group;
    group.count = 1;
    group.w[0] = w.matrix;
    group.y[0] = h.data();
    group.accumulate = true;
    group.norm_after = NormAfter{norm_weight.data(), eps, q.data(), d.data(), &counter};
    if (two_lanes)
      run(tiles, kPairedThreads, shared,
          [&] { matmul_gemv_paired_kernel<kKind>(group, x.values.data(), x.scales.data()); });
    else
      run(tiles, kGemvThreads, shared,
          [&] { matmul_gemv_kernel<kKind>(group, x.values.data(), x.scales.data(), QkvStore{}); });
    const char* kernel = two_lanes ? "paired kernel" : "one-row kernel";
    for (size_t i = 0; i < h.size(); ++i)
      ASSERT_TRUE(same_bits(h[i], want_h[i])) << kernel << ", h " << i;
    EXPECT_EQ(q, want_q) << kernel;
    for (size_t b = 0; b < d.size(); ++b)
      ASSERT_TRUE(same_bits(d[b], want_d[b])) << kernel << ", scale " << b;
    EXPECT_EQ(counter, 0) << kernel;
  }
}

TEST(CudaKernelsOnCpu, ResidualMatmulNormalizesItsOutputAsTheNormKernelDoes) {
  check_norm_after<WeightKind::kQ4_0>(256, 64, 1);
  check_norm_after<WeightKind::kQ8_0>(1280, 96, 2);
  check_norm_after<WeightKind::kQ4_0>(128, 1056, 3);  // every norm thread: 2 values or fewer
}

// Q8_K activations of n rows of dim values, as the kernels lay them out.
struct Q8KRows {
  std::vector<int8_t> q;
  std::vector<float> d;
  std::vector<int16_t> bsums;
  Q8KRows(int n, int dim)
      : q(static_cast<size_t>(n) * dim, 99),
        d(static_cast<size_t>(n) * dim / kSuperBlock, -1.0f),
        bsums(static_cast<size_t>(n) * dim / 16, 999) {}
  Q8KActivations view() { return {q.data(), d.data(), bsums.data()}; }
};

// got has the bits of quantize_q8k_kernel's Q8_K of x, which are the CPU's
// quantize_row_q8_K's.
void expect_q8k_of(const std::vector<float>& x, Q8KRows& got, const std::string& what) {
  SCOPED_TRACE(what);
  const int64_t n_super = static_cast<int64_t>(x.size()) / kSuperBlock;
  Q8KRows want(1, static_cast<int>(x.size()));
  run(static_cast<unsigned>((n_super * kWarp + 255) / 256), 256, 0,
      [&] { quantize_q8k_kernel(x.data(), n_super, want.view()); });
  std::vector<BlockQ8_K> cpu(static_cast<size_t>(n_super));
  quantize_row_q8_K(x.data(), cpu.data(), static_cast<int64_t>(x.size()));
  for (int64_t sb = 0; sb < n_super; ++sb) {
    EXPECT_TRUE(same_bits(want.d[sb], cpu[sb].d)) << "the quantize kernel, super-block " << sb;
    EXPECT_TRUE(same_bits(got.d[sb], want.d[sb]))
        << "super-block " << sb << ": scale " << got.d[sb] << " instead of " << want.d[sb];
    for (int j = 0; j < kSuperBlock / 16; ++j)
      EXPECT_EQ(got.bsums[sb * 16 + j], want.bsums[sb * 16 + j])
          << "super-block " << sb << ", sum " << j;
  }
  int wrong = 0;
  for (size_t i = 0; i < x.size(); ++i) {
    EXPECT_EQ(want.q[i], cpu[i / kSuperBlock].qs[i % kSuperBlock]) << "the quantize kernel, " << i;
    if (got.q[i] != want.q[i] && ++wrong <= 3)
      ADD_FAILURE() << "value " << i << ": " << int(got.q[i]) << " instead of " << int(want.q[i]);
  }
  EXPECT_EQ(wrong, 0);
}

// PARSPEC_CUDA_FUSE=q8k: the norm kernel (with and without a residual) and
// the SwiGLU kernel write their output's Q8_K form with quantize_q8k_kernel's
// bits, beside the same floats (and Q8_0 blocks) as without it; a super-block
// of zeros has quants and scale 0.
TEST(CudaKernelsOnCpu, NormAndSwiGluKernelsWriteQ8KAsTheQuantizeKernelDoes) {
  std::mt19937 rng(11);
  std::normal_distribution<float> value(0.0f, 2.0f), gain(1.0f, 0.3f);
  for (const int dim : {256, 1280, 4096, 8192}) {
    for (const bool residual : {false, true}) {
      SCOPED_TRACE("norm, dim " + std::to_string(dim) + (residual ? ", a residual" : ""));
      const int n = 2;
      std::vector<float> h(static_cast<size_t>(n) * dim), r(h.size()), w(static_cast<size_t>(dim));
      for (float& v : h) v = value(rng);
      for (float& v : r) v = value(rng);
      for (float& v : w) v = gain(rng);
      for (int i = 0; i < kSuperBlock; ++i) w[static_cast<size_t>(dim - kSuperBlock + i)] = 0.0f;
      std::vector<float> h_plain = h, out_plain(h.size()), h_fused = h, out_fused(h.size());
      std::vector<int8_t> q_plain(h.size()), q_fused(h.size());
      std::vector<float> d_plain(h.size() / 32), d_fused(h.size() / 32);
      Q8KRows k8(n, dim);
      const float* res = residual ? r.data() : nullptr;
      run(static_cast<unsigned>(n), kNormBlock, 0, [&] {
        add_rmsnorm_wide_kernel(h_plain.data(), res, w.data(), dim, 1e-5f, out_plain.data(),
                                q_plain.data(), d_plain.data(), false, Q8KActivations{});
      });
      run(static_cast<unsigned>(n), kNormBlock, 0, [&] {
        add_rmsnorm_wide_kernel(h_fused.data(), res, w.data(), dim, 1e-5f, out_fused.data(),
                                q_fused.data(), d_fused.data(), false, k8.view());
      });
      EXPECT_EQ(std::memcmp(out_plain.data(), out_fused.data(), out_plain.size() * 4), 0);
      EXPECT_EQ(std::memcmp(h_plain.data(), h_fused.data(), h_plain.size() * 4), 0);
      EXPECT_EQ(q_plain, q_fused);
      EXPECT_EQ(std::memcmp(d_plain.data(), d_fused.data(), d_plain.size() * 4), 0);
      expect_q8k_of(out_fused, k8, "norm");
      EXPECT_EQ(k8.d[static_cast<size_t>(dim / kSuperBlock - 1)], 0.0f);
    }
  }
  for (const int dim : {256, 768, 14336}) {
    SCOPED_TRACE("SwiGLU, dim " + std::to_string(dim));
    const int n = 3;
    std::vector<float> gate(static_cast<size_t>(n) * dim), up(gate.size());
    for (float& v : gate) v = value(rng);
    for (float& v : up) v = value(rng);
    for (int i = 0; i < kSuperBlock; ++i) up[static_cast<size_t>(dim + i)] = 0.0f;  // row 1
    std::vector<float> plain = gate, fused = gate;
    std::vector<int8_t> q_plain(gate.size()), q_fused(gate.size());
    std::vector<float> d_plain(gate.size() / 32), d_fused(gate.size() / 32);
    Q8KRows k8(n, dim);
    const dim3 grid(static_cast<unsigned>(n), static_cast<unsigned>(dim / kNormThreads));
    run(grid, kNormThreads, 0, [&] {
      swiglu_kernel(plain.data(), up.data(), dim, q_plain.data(), d_plain.data(), false,
                    Q8KActivations{});
    });
    run(grid, kNormThreads, 0, [&] {
      swiglu_kernel(fused.data(), up.data(), dim, q_fused.data(), d_fused.data(), false, k8.view());
    });
    EXPECT_EQ(std::memcmp(plain.data(), fused.data(), plain.size() * 4), 0);
    EXPECT_EQ(q_plain, q_fused);
    EXPECT_EQ(std::memcmp(d_plain.data(), d_fused.data(), d_plain.size() * 4), 0);
    expect_q8k_of(fused, k8, "SwiGLU");
    EXPECT_EQ(k8.d[static_cast<size_t>(dim / kSuperBlock)], 0.0f);
  }
}

TEST(CudaKernelsOnCpu, OneRowKernelsGiveTheContractsBits) {
  check_one_row_kernels<WeightKind::kQ4_0>(128, 64, 1);
  check_one_row_kernels<WeightKind::kQ8_0>(128, 40, 2);
  check_one_row_kernels<WeightKind::kQ4_0>(1280, 96, 3);
  check_one_row_kernels<WeightKind::kQ8_0>(3072, 33, 4);
  check_one_row_kernels<WeightKind::kQ4_0>(96, 48, 5);
}

// The one- or two-row tensor-core kernel loading its first weights before
// it waits (kEarly) gives the bits of the one that loads them after.
template <WeightKind kKind, HalfEpilogue kEpilogue>
void check_half_early(int64_t n_in, int64_t n_out, int M, unsigned seed) {
  SCOPED_TRACE("n_in " + std::to_string(n_in) + ", n_out " + std::to_string(n_out) + ", M " +
               std::to_string(M));
  HalfPair<kKind> p(n_in, n_out, M, seed);
  using enum HalfInput;
  expect_same_pair_bits<kKind, kEpilogue>(
      p, n_out, M, nullptr,
      [&](const MatmulGroup& g) {
        matmul_half_mma_kernel<kKind, 1, kEpilogue, kPairs>(g, p.x.data(), M, QkvStore{});
      },
      [&](const MatmulGroup& g) {
        matmul_half_mma_kernel<kKind, 1, kEpilogue, kPairs, true>(g, p.x.data(), M, QkvStore{});
      });
}

// PARSPEC_CUDA_PREFETCH=operands: the one-row, few-rows and streamed kernels
// loading their first weights before they wait give the contract's bits, also
// where a launch's later slices of activation rows copy all their operands.
TEST(CudaKernelsOnCpu, KernelsLoadingWeightsBeforeTheirWaitGiveTheContractsBits) {
  struct Early {
    Early() { operands_early_wanted = true; }
    ~Early() { operands_early_wanted = false; }
  } early;
  check_one_row_kernels<WeightKind::kQ4_0>(1280, 96, 21);
  check_one_row_kernels<WeightKind::kQ8_0>(96, 40, 22);
  check_wide_rows<WeightKind::kQ4_0, 4, 2>(1280, {16, 8, 33}, 3, 23);
  check_wide_rows<WeightKind::kQ8_0, 2, 4>(32, {5}, 2, 24);
  check_streamed<WeightKind::kQ4_0, 1, 4>(1280, {70}, 8, 8, 0, 25);
  check_streamed<WeightKind::kQ8_0, 4, 1>(192, {17}, 70, 72, 1, 26);  // three slices
  check_streamed<WeightKind::kQ4_0, 2, 2>(640, {20, 8, 12}, 13, 20, 4, 27);
  // F16/BF16, one or two rows: the first chunk before the wait, the rest after.
  check_half_early<WeightKind::kF16, HalfEpilogue::kPlain>(1024, 40, 1, 28);
  check_half_early<WeightKind::kBF16, HalfEpilogue::kGated>(96, 24, 2, 29);
  check_half_early<WeightKind::kF16, HalfEpilogue::kPlain>(64, 17, 2, 30);
}

// A row's view of a cache of `capacity` cells per layer, from layer 0.
AttentionRow cache_row(std::vector<float>& k, std::vector<float>& v, int capacity) {
  AttentionRow r;
  r.k = k.data();
  r.v = v.data();
  r.layer_first = 0;
  r.capacity = capacity;
  return r;
}

// What launch_bias_rope_store makes of q, k and v rows (n rows, as the
// matmul wrote them): the biases added, q and k rotated, q in place, k and v
// into each row's cache slot. The reference for the fused q/k/v kernels.
struct QkvCase {
  HeadShape shape;
  int n = 0, layer = 1, capacity = 41;    // prime: the rows' slots below are distinct
  std::vector<float> bq, bk, bv, angles;  // biases (empty: none); cos, sin per (row, pair)
  std::vector<AttentionRow> rows;
  std::vector<float> cache_k, cache_v;

  QkvCase(bool neox, bool biases, int rows_, std::mt19937& rng) : n(rows_) {
    shape = HeadShape{4, 2, 32, 32, neox};
    std::uniform_real_distribution<float> u(-1.0f, 1.0f);
    if (biases) {
      for (int i = 0; i < 4 * 32; ++i) bq.push_back(u(rng));
      for (int i = 0; i < 2 * 32; ++i) bk.push_back(u(rng));
      for (int i = 0; i < 2 * 32; ++i) bv.push_back(u(rng));
    }
    for (int i = 0; i < n * 16; ++i) {
      const float a = u(rng) * 3.0f;
      angles.push_back(std::cos(a));
      angles.push_back(std::sin(a));
    }
    const int kv_dim = 2 * 32;
    cache_k.assign(static_cast<size_t>(2 * capacity * kv_dim), -7.0f);
    cache_v = cache_k;
    for (int i = 0; i < n; ++i) {
      AttentionRow r = cache_row(cache_k, cache_v, capacity);
      r.write_slot = (3 * i + 1) % capacity;
      rows.push_back(r);
    }
  }
  QkvStore store(float* q) const {
    QkvStore st;
    st.bias_q = bq.empty() ? nullptr : bq.data();
    st.bias_k = bk.empty() ? nullptr : bk.data();
    st.bias_v = bv.empty() ? nullptr : bv.data();
    st.angles = reinterpret_cast<const float2*>(angles.data());
    st.rows = rows.data();
    st.q = q;
    st.layer = layer;
    st.shape = shape;
    return st;
  }
  // q, k, v as a matmul wrote them (row-major, n rows) to the expected q and caches.
  void reference(std::vector<float> q, std::vector<float> kk, std::vector<float> v,
                 std::vector<float>& q_out, std::vector<float>& k_cache,
                 std::vector<float>& v_cache) const {
    const int hd = shape.head_dim, n_pairs = shape.rope_dims / 2;
    auto add_bias = [](std::vector<float>& x, const std::vector<float>& b, int width) {
      if (b.empty()) return;
      for (size_t i = 0; i < x.size(); ++i) x[i] = add_rn(x[i], b[i % width]);
    };
    add_bias(q, bq, 4 * hd);
    add_bias(kk, bk, 2 * hd);
    add_bias(v, bv, 2 * hd);
    auto rotate = [&](std::vector<float>& x, int heads) {
      for (int row = 0; row < n; ++row)
        for (int h = 0; h < heads; ++h) {
          float* head = &x[static_cast<size_t>((row * heads + h) * hd)];
          for (int i = 0; i < n_pairs; ++i) {
            const float c = angles[2 * (row * n_pairs + i)],
                        s = angles[2 * (row * n_pairs + i) + 1];
            const int a = shape.neox ? i : 2 * i, b = shape.neox ? i + n_pairs : 2 * i + 1;
            const float x0 = head[a], x1 = head[b];
            head[a] = sub_rn(mul_rn(x0, c), mul_rn(x1, s));
            head[b] = add_rn(mul_rn(x0, s), mul_rn(x1, c));
          }
        }
    };
    rotate(q, 4);
    rotate(kk, 2);
    q_out = q;
    k_cache = cache_k;
    v_cache = cache_v;
    const int kv_dim = 2 * hd;
    for (int row = 0; row < n; ++row) {
      const int64_t at = (static_cast<int64_t>(layer) * capacity + rows[row].write_slot) * kv_dim;
      for (int j = 0; j < kv_dim; ++j) {
        k_cache[at + j] = kk[row * kv_dim + j];
        v_cache[at + j] = v[row * kv_dim + j];
      }
    }
  }
};

void expect_same(const std::vector<float>& got, const std::vector<float>& want, const char* what) {
  ASSERT_EQ(got.size(), want.size());
  for (size_t i = 0; i < got.size(); ++i)
    ASSERT_TRUE(same_bits(got[i], want[i]))
        << what << " " << i << ": " << got[i] << " instead of " << want[i];
}

// F16/BF16 q, k and v through the q/k/v tensor-core kernel (PARSPEC_CUDA_FUSE=rope)
// against the plain kernel followed by the bias, RoPE and store steps.
template <WeightKind kKind, int kTiles>
void check_qkv_half(bool neox, bool biases, int M, unsigned seed) {
  SCOPED_TRACE(std::string(neox ? "neox" : "adjacent pairs") + (biases ? ", biases" : "") + ", M " +
               std::to_string(M));
  std::mt19937 rng(seed);
  QkvCase qc(neox, biases, M, rng);
  const int64_t n_in = 64;
  std::uniform_real_distribution<float> u(-1.0f, 1.0f);
  std::vector<std::vector<uint16_t>> w(3);
  const int64_t outs[3] = {4 * 32, 2 * 32, 2 * 32};
  for (int i = 0; i < 3; ++i)
    for (int64_t e = 0; e < outs[i] * n_in; ++e) {
      const __half h = __float2half(u(rng) * 0.2f);
      uint16_t bits;
      std::memcpy(&bits, &h, 2);
      if (kKind == WeightKind::kBF16) {
        const __nv_bfloat16 b = __float2bfloat16(u(rng) * 0.2f);
        std::memcpy(&bits, &b, 2);
      }
      w[i].push_back(bits);
    }
  std::vector<float> x(static_cast<size_t>(M * n_in));
  for (float& v : x) v = u(rng);
  MatmulGroup group;
  group.count = 3;
  std::vector<std::vector<float>> y(3);
  int blocks = 0;
  for (int i = 0; i < 3; ++i) {
    group.w[i].kind = kKind;
    group.w[i].n_in = n_in;
    group.w[i].n_out = outs[i];
    group.w[i].q = w[i].data();
    y[i].assign(static_cast<size_t>(M * outs[i]), -7.0f);
    group.y[i] = y[i].data();
    blocks += static_cast<int>(outs[i] / 16);
  }
  run(blocks, kMmaWarps * kWarp, 0,
      [&] { matmul_half_mma_kernel<kKind, kTiles>(group, x.data(), M, QkvStore{}); });
  std::vector<float> want_q, want_k, want_v;
  qc.reference(y[0], y[1], y[2], want_q, want_k, want_v);
  std::vector<float> q(y[0].size(), -7.0f);
  const QkvStore st = qc.store(q.data());
  run(blocks, kMmaWarps * kWarp, 0,
      [&] { matmul_half_mma_kernel<kKind, kTiles, HalfEpilogue::kQkv>(group, x.data(), M, st); });
  expect_same(q, want_q, "q");
  expect_same(qc.cache_k, want_k, "k cache");
  expect_same(qc.cache_v, want_v, "v cache");
}

TEST(CudaKernelsOnCpu, QkvHalfMatmulDoesTheBiasRopeAndStoreSteps) {
  check_qkv_half<WeightKind::kF16, 1>(false, false, 3, 1);
  check_qkv_half<WeightKind::kF16, 1>(true, true, 5, 2);
  check_qkv_half<WeightKind::kBF16, 4>(true, false, 37, 3);
  check_qkv_half<WeightKind::kF16, 2>(false, true, 12, 4);
}

// One row of Q8_0/Q4_0 q, k and v through the one-row kernel's q/k/v form.
template <WeightKind kKind>
void check_qkv_one_row(bool neox, bool biases, unsigned seed) {
  SCOPED_TRACE(std::string(neox ? "neox" : "adjacent pairs") + (biases ? ", biases" : ""));
  std::mt19937 rng(seed);
  QkvCase qc(neox, biases, 1, rng);
  const int64_t n_in = 256;
  const Weights wq(kKind, n_in, 4 * 32, rng), wk(kKind, n_in, 2 * 32, rng),
      wv(kKind, n_in, 2 * 32, rng);
  const Activations x(n_in / 32, 1, rng);
  std::vector<float> want_q, want_k, want_v;
  qc.reference(one_row<kKind>(wq, x), one_row<kKind>(wk, x), one_row<kKind>(wv, x), want_q, want_k,
               want_v);
  MatmulGroup group;
  group.count = 3;
  group.w[0] = wq.matrix;
  group.w[1] = wk.matrix;
  group.w[2] = wv.matrix;
  std::vector<float> q(4 * 32, -7.0f);
  const QkvStore st = qc.store(q.data());
  run(8 + 4 + 4, kGemvThreads, static_cast<size_t>(n_in + n_in / 32 * 4),
      [&] { matmul_gemv_kernel<kKind, true>(group, x.values.data(), x.scales.data(), st); });
  expect_same(q, want_q, "q");
  expect_same(qc.cache_k, want_k, "k cache");
  expect_same(qc.cache_v, want_v, "v cache");
}

TEST(CudaKernelsOnCpu, QkvOneRowMatmulDoesTheBiasRopeAndStoreSteps) {
  check_qkv_one_row<WeightKind::kQ4_0>(false, true, 1);
  check_qkv_one_row<WeightKind::kQ8_0>(true, false, 2);
  check_qkv_one_row<WeightKind::kQ4_0>(true, true, 3);
}

// Attention over a cache of committed keys and each row's speculative cells:
// every kernel (per head, its keys read in place or staged; merged by a second
// kernel or by the last split to finish; grouped per KV head; prestaged, where
// a row's only split merges itself) gives the same bits, and those are softmax
// attention up to float rounding. With `quantized`, the merged rows' Q8_0
// quantization (as merge_splits writes it) follows the outputs in each result.
struct AttentionCase {
  HeadShape shape;
  int n, layer = 1, capacity;
  float scale;
  std::vector<float> cache_k, cache_v, q;
  std::vector<AttentionRow> rows;
  std::vector<int32_t> spec_slots;
  bool quantized = false;
  std::vector<int8_t> q8;
  std::vector<float> q8_scales;

  AttentionCase(int n_rows, int committed, int head_dim, unsigned seed)
      : shape{4, 2, head_dim, head_dim, false}, n(n_rows), capacity(committed + 2 * n_rows) {
    std::mt19937 rng(seed);
    std::uniform_real_distribution<float> u(-1.0f, 1.0f);
    const int kv_dim = shape.n_head_kv * head_dim;
    cache_k.resize(static_cast<size_t>(2 * capacity * kv_dim));
    for (float& x : cache_k) x = u(rng);
    cache_v = cache_k;
    for (float& x : cache_v) x = u(rng);
    q.resize(static_cast<size_t>(n * shape.n_head * head_dim));
    for (float& x : q) x = u(rng);
    scale = 1.0f / std::sqrt(static_cast<float>(head_dim));
    // Row i: the committed keys, then cells committed..committed+i (a chain).
    for (int i = 0; i < n; ++i) {
      AttentionRow r = cache_row(cache_k, cache_v, capacity);
      r.n_committed = committed;
      r.spec_offset = static_cast<int32_t>(spec_slots.size());
      r.spec_count = i + 1;
      for (int c = 0; c <= i; ++c) spec_slots.push_back(committed + c);
      rows.push_back(r);
    }
  }

  // kStaged, kMergeInSplit: attention_split_kernel's; grouped: the grouped kernel.
  template <bool kStaged, bool kMergeInSplit>
  std::vector<float> run_per_head() {
    std::vector<float> partial(
        static_cast<size_t>(attention_partial_floats(n, shape.n_head, shape.head_dim)), -7.0f);
    std::vector<float> out(q.size(), -7.0f);
    std::vector<int32_t> counters(static_cast<size_t>(n * shape.n_head), 0);
    AttentionMerge merge = merge_into(out);
    merge.split_counters = kMergeInSplit ? counters.data() : nullptr;
    run(dim3(n, shape.n_head, kAttentionSplits), kAttnThreads, 0, [&] {
      attention_split_kernel<kStaged, kMergeInSplit>(q.data(), rows.data(), spec_slots.data(),
                                                     layer, shape, scale, partial.data(), merge);
    });
    if (!kMergeInSplit) combine(partial, merge);
    for (int32_t c : counters) EXPECT_EQ(c, 0) << "the split counters are left at zero";
    return with_quantized(out);
  }
  std::vector<float> run_prestaged() {
    std::vector<float> partial(
        static_cast<size_t>(attention_partial_floats(n, shape.n_head, shape.head_dim)), -7.0f);
    std::vector<float> out(q.size(), -7.0f);
    AttentionMerge merge = merge_into(out);
    const size_t shared =
        2 * kAttnKeys * static_cast<size_t>(prestaged_row_floats(shape.head_dim)) * sizeof(float);
    run(dim3(n, shape.n_head, kAttentionSplits), kAttnThreads, shared, [&] {
      attention_prestaged_kernel(q.data(), rows.data(), spec_slots.data(), layer, shape, scale,
                                 partial.data(), merge);
    });
    merge.single_splits_merged = true;
    combine(partial, merge);
    return with_quantized(out);
  }
  // Where the merge writes: `out`, and the case's Q8_0 buffers when quantized.
  AttentionMerge merge_into(std::vector<float>& out) {
    AttentionMerge merge;
    merge.out = out.data();
    if (quantized) {
      q8.assign(q.size(), int8_t{-7});
      q8_scales.assign(q.size() / 32, -7.0f);
      merge.q = q8.data();
      merge.scales = q8_scales.data();
    }
    return merge;
  }
  // out, followed by the quantized rows' values and scales when quantized.
  std::vector<float> with_quantized(std::vector<float> out) const {
    if (!quantized) return out;
    for (int8_t v : q8) out.push_back(static_cast<float>(v));
    out.insert(out.end(), q8_scales.begin(), q8_scales.end());
    return out;
  }
  std::vector<float> run_grouped() {
    std::vector<float> partial(
        static_cast<size_t>(attention_partial_floats(n, shape.n_head, shape.head_dim)), -7.0f);
    std::vector<float> out(q.size(), -7.0f);
    AttentionMerge merge;
    merge.out = out.data();
    run(dim3(n, shape.n_head_kv, kAttentionSplits), kAttnThreads, 0, [&] {
      attention_split_grouped_kernel(q.data(), rows.data(), spec_slots.data(), layer, shape, scale,
                                     partial.data());
    });
    combine(partial, merge);
    return out;
  }
  void combine(const std::vector<float>& partial, const AttentionMerge& merge) {
    run(dim3(n, shape.n_head), kAttnThreads, 0,
        [&] { attention_combine_kernel(rows.data(), shape, partial.data(), merge); });
  }
  // Softmax attention in double.
  double reference(int row, int head, int d) const {
    const int hd = shape.head_dim, kv_dim = shape.n_head_kv * hd;
    const int kv_head = head / (shape.n_head / shape.n_head_kv);
    std::vector<int> slots;
    for (int s = 0; s < rows[row].n_committed; ++s) slots.push_back(s);
    for (int c = 0; c < rows[row].spec_count; ++c)
      slots.push_back(spec_slots[rows[row].spec_offset + c]);
    std::vector<double> scores;
    double mx = -1e300;
    for (int slot : slots) {
      const float* key =
          &cache_k[(static_cast<size_t>(layer) * capacity + slot) * kv_dim + kv_head * hd];
      double dot = 0;
      for (int i = 0; i < hd; ++i) dot += double(q[(row * shape.n_head + head) * hd + i]) * key[i];
      scores.push_back(dot * scale);
      mx = std::max(mx, scores.back());
    }
    double total = 0, acc = 0;
    for (size_t i = 0; i < slots.size(); ++i) {
      const double w = std::exp(scores[i] - mx);
      total += w;
      acc +=
          w *
          cache_v[(static_cast<size_t>(layer) * capacity + slots[i]) * kv_dim + kv_head * hd + d];
    }
    return acc / total;
  }
};

void check_attention(int n, int committed, int head_dim, unsigned seed) {
  SCOPED_TRACE(std::to_string(n) + " rows after " + std::to_string(committed) + " keys, head " +
               std::to_string(head_dim));
  AttentionCase a(n, committed, head_dim, seed);
  const std::vector<float> direct = a.run_per_head<false, false>();
  for (int row = 0; row < n; ++row)
    for (int head = 0; head < a.shape.n_head; ++head)
      for (int d = 0; d < head_dim; ++d)
        ASSERT_NEAR(direct[(row * a.shape.n_head + head) * head_dim + d], a.reference(row, head, d),
                    1e-5)
            << "row " << row << ", head " << head << ", dimension " << d;
  expect_same(a.run_per_head<true, false>(), direct, "staged");
  expect_same(a.run_per_head<false, true>(), direct, "merged in the split");
  expect_same(a.run_per_head<true, true>(), direct, "staged, merged in the split");
  expect_same(a.run_grouped(), direct, "grouped");
  expect_same(a.run_prestaged(), direct, "prestaged");
  // The merge's Q8_0 quantization too, from the combine kernel and from a
  // prestaged block that merged its row's only split.
  a.quantized = true;
  expect_same(a.run_prestaged(), a.run_per_head<true, false>(), "prestaged, quantized");
}

TEST(CudaKernelsOnCpu, AttentionKernelsGiveTheSameBits) {
  check_attention(2, 300, 64, 1);  // three chunks of keys: three splits
  check_attention(2, 40, 32, 2);   // a head narrower than the block
  check_attention(3, 126, 64, 3);  // one split: row 2's last key opens a second chunk
}

}  // namespace
}  // namespace parspec::cuda::emulated
