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
//
// The AVX2 kernels are in matmul_avx2_tiles.h, the drivers that run a matrix's
// tiles through the kernels of the ISA in use in matmul_scheduling.h; both are
// part of this translation unit. Here: activation quantization and the entry
// points.
#include "kernels/matmul.h"

#include <immintrin.h>

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <vector>

#include "core/error.h"
#include "kernels/isa.h"
#include "kernels/kquants.h"
#include "kernels/matmul_avx2_tiles.h"
#include "kernels/matmul_scheduling.h"
#include "kernels/q8_tiles.h"
#include "kernels/repack.h"

namespace parspec {

namespace {

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
