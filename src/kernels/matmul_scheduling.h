#pragma once
// How matmul runs a weight matrix's tiles: the kernel tables of the ISA in
// use, the tiles' row pointers and stores, and per weight layout the order in
// which groups of tiles go through the 32-, 16- and 8-row kernels, activation
// rows in chunks. Internal to matmul.cpp, the one translation unit that
// includes it (after matmul_avx2_tiles.h), so that these drivers inline the
// kernels.
#include <algorithm>
#include <cstring>
#include <vector>

#include "kernels/isa.h"
#include "kernels/matmul.h"
#include "kernels/matmul_avx2_tiles.h"
#include "kernels/repack.h"

namespace parspec {

namespace {

constexpr int64_t kChunkRows = 64;  // activation rows applied per pass over a weight tile

// The kernel table of the ISA in use (kernels/isa.h), one argument per ISA.
template <class Table>
const Table& for_active_isa(const Table& avx2, const Table& vnni, const Table& avx512) {
  switch (active_isa()) {
    case Isa::kAvxVnni:
      return vnni;
    case Isa::kAvx512:
      return avx512;
    case Isa::kAvx2:
      break;
  }
  return avx2;
}

// The tile kernels of the ISA in use (kernels/isa.h).
const q8tiles::TileKernels& active_tiles() {
  static const q8tiles::TileKernels vnni =
      cpu_supports(Isa::kAvxVnni) ? q8tiles::vnni_tile_kernels() : q8tiles::TileKernels{};
  static const q8tiles::TileKernels avx512 =
      cpu_supports(Isa::kAvx512) ? q8tiles::avx512_tile_kernels() : q8tiles::TileKernels{};
  return for_active_isa(kAvx2Tiles, vnni, avx512);
}

// The repacked Q4_0/Q8_0 kernels of the ISA in use, with its row-major 8-row
// tiles for the rows after the last group. Not through active_tiles(): a
// second caller changed how the compiler inlines it into the Q8_0 driver.
const q8tiles::PackedKernels& active_packed() {
  auto with_rows = [](q8tiles::PackedKernels k, const q8tiles::TileKernels& tiles) {
    k.rows_q4_0 = tiles.q4_0;
    k.rows_q8_0 = tiles.q8_0;
    return k;
  };
  static const q8tiles::PackedKernels vnni =
      cpu_supports(Isa::kAvxVnni)
          ? with_rows(q8tiles::vnni_packed_kernels(), q8tiles::vnni_tile_kernels())
          : q8tiles::PackedKernels{};
  static const q8tiles::PackedKernels avx512 =
      cpu_supports(Isa::kAvx512)
          ? with_rows(q8tiles::avx512_packed_kernels(), q8tiles::avx512_tile_kernels())
          : q8tiles::PackedKernels{};
  return for_active_isa(kAvx2Packed, vnni, avx512);
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

// acc holds kTileRows results per activation row, `acc_stride` apart.
void store_tile(const Problem& p, int64_t t, int64_t m0, int64_t m1, const float* acc,
                int64_t acc_stride = kTileRows) {
  const int64_t o0 = t * kTileRows;
  if (o0 >= p.w.n_out) return;
  const int64_t valid = std::min<int64_t>(kTileRows, p.w.n_out - o0);
  for (int64_t m = m0; m < m1; ++m) {
    float* dst = p.y + m * p.w.n_out + o0;
    const float* src = acc + (m - m0) * acc_stride;
    if (valid == kTileRows) {  // a constant size: vector moves, not a loop of 8-byte ones
      std::memcpy(dst, src, sizeof(float) * kTileRows);
    } else {
      std::memcpy(dst, src, static_cast<size_t>(valid) * sizeof(float));
    }
  }
}

// Tiles [t, t1): pairs through the 16-row kernel where there is one (acc rows
// 16 wide), the rest one by one through the 8-row kernel; activation rows in
// chunks of kChunkRows. Shared by the Q8_0/Q4_0 and the Q4_K/Q6_K tiles.
template <class Act, class Tile16, class Tile8>
void run_tile_pairs_then_singles(const Problem& p, const Act& act, int64_t nb, int64_t t,
                                 int64_t t1, Tile16 tile16, Tile8 tile, float* acc) {
  for (; tile16 != nullptr && t + 1 < t1; t += 2) {
    const uint8_t* rows[2 * kTileRows];
    tile_rows(p, t, rows);
    tile_rows(p, t + 1, rows + kTileRows);
    for (int64_t m0 = 0; m0 < p.M; m0 += kChunkRows) {
      const int64_t m1 = std::min(p.M, m0 + kChunkRows);
      tile16(rows, p.row_stride, nb, act, m0, m1, acc);
      store_tile(p, t, m0, m1, acc, 2 * kTileRows);
      store_tile(p, t + 1, m0, m1, acc + kTileRows, 2 * kTileRows);
    }
  }
  for (; t < t1; ++t) {
    const uint8_t* rows[kTileRows];
    tile_rows(p, t, rows);
    for (int64_t m0 = 0; m0 < p.M; m0 += kChunkRows) {
      const int64_t m1 = std::min(p.M, m0 + kChunkRows);
      tile(rows, p.row_stride, nb, act, m0, m1, acc);
      store_tile(p, t, m0, m1, acc);
    }
  }
}

void run_q8_tiles(const Problem& p, const Q8Activations& act, int64_t t0, int64_t t1) {
  const q8tiles::TileKernels& kernels = active_tiles();
  const bool q4 = p.w.type == DType::Q4_0;
  const q8tiles::TileKernel tile = q4 ? kernels.q4_0 : kernels.q8_0;
  const q8tiles::TileKernel16 tile16 = q4 ? kernels.q4_0_16 : kernels.q8_0_16;
  const q8tiles::TileKernel32 tile32 =
      p.M > q8tiles::kMaxRegisterRows ? (q4 ? kernels.q4_0_32 : kernels.q8_0_32) : nullptr;
  thread_local std::vector<float> acc;
  acc.resize(static_cast<size_t>(kChunkRows * q8tiles::kTileRows32));
  const int64_t nb = p.w.n_in / kQK;
  int64_t t = t0;
  // Groups of four tiles for large batches; acc rows are 32 wide.
  for (; tile32 != nullptr && t + 3 < t1; t += 4) {
    const uint8_t* rows[q8tiles::kTileRows32];
    for (int i = 0; i < 4; ++i) tile_rows(p, t + i, rows + i * kTileRows);
    for (int64_t m0 = 0; m0 < p.M; m0 += kChunkRows) {
      const int64_t m1 = std::min(p.M, m0 + kChunkRows);
      tile32(rows, p.row_stride, nb, act, m0, m1, acc.data());
      for (int i = 0; i < 4; ++i)
        store_tile(p, t + i, m0, m1, acc.data() + i * kTileRows, q8tiles::kTileRows32);
    }
  }
  run_tile_pairs_then_singles(p, act, nb, t, t1, tile16, tile, acc.data());
}

// A repacked Q4_0/Q8_0/Q4_K/Q6_K matrix (kernels/repack.h) counts its whole groups of 16
// rows as tiles 0..groups-1, then the 8-row tiles of the row-major rows after
// them; any other matrix its 8-row tiles.
int64_t packed_groups(const WeightMatrix& w) {
  return w.repacked ? w.n_out / repack::kGroupRows : 0;
}

int64_t tile_count(const WeightMatrix& w) {
  const int64_t groups = packed_groups(w);
  return groups + (w.n_out - groups * repack::kGroupRows + kTileRows - 1) / kTileRows;
}

// Tiles [t0, t1) of a repacked Q4_0 or Q8_0 matrix: its groups in pairs
// through the 32-row kernel for large batches, the rest one by one
// (activation rows in chunks of kChunkRows), then the row-major rows after
// the last group. Not through run_q8_tiles: a second caller changed how the
// compiler inlines it.
void run_packed_tiles(const Problem& p, const Q8Activations& act, int64_t t0, int64_t t1) {
  const q8tiles::PackedKernels& kernels = active_packed();
  const bool q4 = p.w.type == DType::Q4_0;
  const q8tiles::PackedKernel single = q4 ? kernels.q4_0 : kernels.q8_0;
  const q8tiles::PackedKernel32 pair =
      p.M > q8tiles::kMaxRegisterRows ? (q4 ? kernels.q4_0_32 : kernels.q8_0_32) : nullptr;
  const int64_t groups = packed_groups(p.w);
  const size_t bytes = repack::group_bytes(p.w.type, p.w.n_in);
  const int64_t nb = p.w.n_in / kQK;
  thread_local std::vector<float> acc;
  acc.resize(static_cast<size_t>(kChunkRows * q8tiles::kTileRows32));
  // Group g holds tiles 2g and 2g + 1 of the row-major numbering.
  for (int64_t g = t0; g < std::min(t1, groups);) {
    const int64_t count = pair != nullptr && g + 1 < std::min(t1, groups) ? 2 : 1;
    const uint8_t* data = p.w.data + static_cast<size_t>(g) * bytes;
    const int64_t width = count * repack::kGroupRows;
    for (int64_t m0 = 0; m0 < p.M; m0 += kChunkRows) {
      const int64_t m1 = std::min(p.M, m0 + kChunkRows);
      if (count == 2) {
        pair(data, data + bytes, nb, act, m0, m1, acc.data());
      } else {
        single(data, nb, act, m0, m1, acc.data());
      }
      for (int64_t i = 0; i < 2 * count; ++i)
        store_tile(p, 2 * g + i, m0, m1, acc.data() + i * kTileRows, width);
    }
    g += count;
  }
  // The row-major tiles after the groups (at most two): numbered on from 2 · groups.
  t0 = std::max(t0, groups) + groups;
  t1 += groups;
  if (t0 < t1)
    run_tile_pairs_then_singles(p, act, nb, t0, t1, q8tiles::TileKernel16{nullptr},
                                q4 ? kernels.rows_q4_0 : kernels.rows_q8_0, acc.data());
}

template <DType T>
void run_float_tiles(const Problem& p, int64_t t0, int64_t t1) {
  const int64_t n = p.w.n_in;
  const int64_t n_tiles = (p.w.n_out + kTileRows - 1) / kTileRows;
  const bool avx512 = active_isa() == Isa::kAvx512;
  // Large batches (prefill) in blocks of activation rows small enough to stay
  // in L2 (~512 KiB) while every weight tile of the chunk passes over them;
  // without blocking, each tile streamed all M rows from memory.
  const int64_t block =
      std::clamp<int64_t>((int64_t{128} << 10) / std::max<int64_t>(n, 1) / 6 * 6, 6, 48);
  for (int64_t m0 = 0; m0 < p.M; m0 += block) {
    const int64_t rows_here = std::min(block, p.M - m0);
    const float* x = p.x + m0 * n;
    for (int64_t t = t0; t < t1; ++t) {
      // This tile's rows, then the next one's (to prefetch; past the end of
      // this job's range too, where it is most often this thread's next job).
      const uint8_t* rows[2 * kTileRows];
      tile_rows(p, t, rows);
      const bool has_next = t + 1 < n_tiles;
      if (has_next) tile_rows(p, t + 1, rows + kTileRows);
      const uint8_t* const* next = has_next ? rows + kTileRows : nullptr;
      const int64_t o0 = t * kTileRows;
      const int valid = static_cast<int>(std::min<int64_t>(kTileRows, p.w.n_out - o0));
      float* y = p.y + m0 * p.w.n_out + o0;
      if (avx512) {
        float_tiles::avx512_tile(T, rows, next, valid, x, rows_here, n, y, p.w.n_out);
      } else if (rows_here > 1) {
        float_tiles::column_tile<Ops256, T>(rows, next, valid, x, rows_here, n, y, p.w.n_out);
      } else {
        // 4 rows × both halves in one pass: 8 chains, contiguous loads
        float out[4];
        for (int r0 = 0; r0 < valid; r0 += 4) {
          tile_float<T, 4, 1>(rows + r0, x, n, out);
          std::memcpy(y + r0, out, static_cast<size_t>(std::min(4, valid - r0)) * sizeof(float));
        }
      }
    }
  }
}

// The vpdpbusd builds of the Q4_K/Q6_K tiles (kernels/k_tiles.h) for the ISA
// in use; under avx2 only the repacked Q4_K kernel (row-major: the kernels above).
const ktiles::KTileKernels& active_k_tiles() {
  static const ktiles::KTileKernels avx2 = ktiles::avx2_k_tile_kernels();
  static const ktiles::KTileKernels vnni =
      cpu_supports(Isa::kAvxVnni) ? ktiles::vnni_k_tile_kernels() : avx2;
  static const ktiles::KTileKernels avx512 =
      cpu_supports(Isa::kAvx512) ? ktiles::avx512_k_tile_kernels() : avx2;
  return for_active_isa(avx2, vnni, avx512);
}

// Pairs of tiles through the 16-row kernel where there is one, the rest one by one.
void run_k_tiles_dpbusd(const Problem& p, const K8Activations& act, int64_t t0, int64_t t1,
                        const ktiles::KTileKernels& kernels) {
  const bool q4 = p.w.type == DType::Q4_K;
  const ktiles::KTile8 tile = q4 ? kernels.q4_K : kernels.q6_K;
  const ktiles::KTile16 tile16 = q4 ? kernels.q4_K_16 : kernels.q6_K_16;
  thread_local std::vector<float> acc;
  acc.resize(static_cast<size_t>(kChunkRows * 2 * kTileRows));
  const int64_t nb = p.w.n_in / kQKK;
  run_tile_pairs_then_singles(p, act, nb, t0, t1, tile16, tile, acc.data());
}

void run_k_tiles(const Problem& p, const K8Activations& act, int64_t t0, int64_t t1);

// Tiles [t0, t1) of a repacked Q4_K or Q6_K matrix: its groups (activation rows in
// chunks of kChunkRows), then the row-major rows after the last group.
void run_packed_k_tiles(const Problem& p, const K8Activations& act, int64_t t0, int64_t t1) {
  const ktiles::KPacked kernel =
      p.w.type == DType::Q4_K ? active_k_tiles().q4_K_packed : active_k_tiles().q6_K_packed;
  const int64_t groups = packed_groups(p.w);
  const size_t bytes = repack::group_bytes(p.w.type, p.w.n_in);
  const int64_t nb = p.w.n_in / kQKK;
  thread_local std::vector<float> acc;
  acc.resize(static_cast<size_t>(kChunkRows * repack::kGroupRows));
  for (int64_t g = t0; g < std::min(t1, groups); ++g) {
    const uint8_t* data = p.w.data + static_cast<size_t>(g) * bytes;
    for (int64_t m0 = 0; m0 < p.M; m0 += kChunkRows) {
      const int64_t m1 = std::min(p.M, m0 + kChunkRows);
      kernel(data, nb, act, m0, m1, acc.data());
      for (int64_t i = 0; i < 2; ++i)
        store_tile(p, 2 * g + i, m0, m1, acc.data() + i * kTileRows, repack::kGroupRows);
    }
  }
  // The row-major tiles after the groups (at most two): numbered on from 2 · groups.
  t0 = std::max(t0, groups) + groups;
  t1 += groups;
  if (t0 < t1) run_k_tiles(p, act, t0, t1);
}

void run_k_tiles(const Problem& p, const K8Activations& act, int64_t t0, int64_t t1) {
  const ktiles::KTileKernels& kernels = active_k_tiles();
  // The 8-row AVX-VNNI tiles pass over the weights once per 4 activation rows;
  // from M = 8 on the AVX2 tiles (one pass for all) were as fast or faster
  // (bench/kernel_throughput), so they take those batches: same results.
  if (kernels.q4_K != nullptr && (kernels.q4_K_16 != nullptr || p.M <= 4))
    return run_k_tiles_dpbusd(p, act, t0, t1, kernels);
  thread_local std::vector<float> total;
  thread_local std::vector<int32_t> isum;
  total.resize(static_cast<size_t>(kChunkRows * kTileRows));
  isum.resize(static_cast<size_t>(kChunkRows * kTileRows));
  const int64_t nb = p.w.n_in / kQKK;
  for (int64_t t = t0; t < t1; ++t) {
    const uint8_t* rows[kTileRows];
    tile_rows(p, t, rows);
    for (int64_t m0 = 0; m0 < p.M; m0 += kChunkRows) {
      const int64_t m1 = std::min(p.M, m0 + kChunkRows);
      if (p.w.type == DType::Q4_K) {
        tile_q4_K(rows, p.row_stride, nb, act, m0, m1, total.data(), isum.data());
      } else {
        tile_q6_K(rows, p.row_stride, nb, act, m0, m1, total.data(), isum.data());
      }
      store_tile(p, t, m0, m1, total.data());
    }
  }
}

}  // namespace

}  // namespace parspec
