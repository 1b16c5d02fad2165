#include "kernels/repack.h"

#include <algorithm>
#include <atomic>
#include <cstring>
#include <vector>

#include "core/error.h"

namespace parspec::repack {

namespace {

// Elements per block of a repackable type.
int64_t block_elems(DType type) {
  return type_info(type).block_elems;
}

void pack_k_group(int64_t n_in, const uint8_t* rows, size_t stride, uint8_t* out) {
  const KGroup group{out, n_in / kQKK};
  for (int64_t b = 0; b < group.nb; ++b)
    for (int64_t l = 0; l < KGroup::kLinesPerBlock; ++l)
      for (int r = 0; r < kGroupRows; ++r)
        std::memcpy(const_cast<uint8_t*>(group.dword(b * KGroup::kLinesPerBlock + l, r)),
                    rows + r * stride + b * sizeof(BlockQ4_K) + 4 * l, 4);
}

void unpack_k_row(int64_t n_in, const uint8_t* group_data, int r, uint8_t* row) {
  const KGroup group{group_data, n_in / kQKK};
  for (int64_t b = 0; b < group.nb; ++b)
    for (int64_t l = 0; l < KGroup::kLinesPerBlock; ++l)
      std::memcpy(row + b * sizeof(BlockQ4_K) + 4 * l,
                  group.dword(b * KGroup::kLinesPerBlock + l, r), 4);
}

void pack_k6_group(int64_t n_in, const uint8_t* rows, size_t stride, uint8_t* out) {
  const K6Group group{out, n_in / kQKK};
  for (int64_t b = 0; b < group.nb; ++b)
    for (int r = 0; r < kGroupRows; ++r) {
      const uint8_t* src = rows + r * stride + b * sizeof(BlockQ6_K);
      for (int64_t l = 0; l < K6Group::kLinesPerBlock; ++l)
        std::memcpy(const_cast<uint8_t*>(group.line(b, l)) + 4 * r, src + 4 * l, 4);
      std::memcpy(const_cast<uint8_t*>(group.d(b)) + 2 * r, src + 4 * K6Group::kLinesPerBlock, 2);
    }
}

void unpack_k6_row(int64_t n_in, const uint8_t* group_data, int r, uint8_t* row) {
  const K6Group group{group_data, n_in / kQKK};
  for (int64_t b = 0; b < group.nb; ++b) {
    uint8_t* dst = row + b * sizeof(BlockQ6_K);
    for (int64_t l = 0; l < K6Group::kLinesPerBlock; ++l)
      std::memcpy(dst + 4 * l, group.line(b, l) + 4 * r, 4);
    std::memcpy(dst + 4 * K6Group::kLinesPerBlock, group.d(b) + 2 * r, 2);
  }
}

}  // namespace

void pack_group(DType type, int64_t n_in, const uint8_t* rows, size_t stride, uint8_t* out) {
  if (type == DType::Q4_K) return pack_k_group(n_in, rows, stride, out);
  if (type == DType::Q6_K) return pack_k6_group(n_in, rows, stride, out);
  const int64_t nb = n_in / kQK, vectors = quant_bytes(type) / 64;
  const size_t block = type_info(type).block_bytes;
  const Group group{out, nb, quant_bytes(type)};
  for (int64_t b = 0; b < nb; ++b) {
    auto* scales = const_cast<uint8_t*>(group.scales(b));
    auto* quants = const_cast<uint8_t*>(group.quants(b));
    for (int r = 0; r < kGroupRows; ++r) {
      const uint8_t* src = rows + r * stride + b * block;
      std::memcpy(scales + 2 * r, src, 2);  // the f16 scale leads each block
      for (int64_t d = 0; d < vectors; ++d)
        std::memcpy(quants + 64 * d + 4 * r, src + 2 + 4 * d, 4);
    }
  }
}

void pack_matrix(Worker& worker, DType type, int64_t n_in, int64_t n_out, const ByteReader& read,
                 uint8_t* out) {
  check(repackable(type), "repack: ", type_info(type).name, " weights cannot be repacked");
  check(n_in % block_elems(type) == 0, "repack: rows of ", n_in, " elements are not whole blocks");
  const int64_t groups = n_out / kGroupRows;
  const size_t bytes = group_bytes(type, n_in);
  const size_t stride = row_bytes(type, n_in);
  // Groups per read: ~256 KiB, well inside a core's L2.
  const int64_t per_read = std::max<int64_t>(1, (size_t{256} << 10) / bytes);
  // ~0.1 ns per byte on one thread (read into cache, scatter out).
  const int threads = worker.threads_for(0.1 * static_cast<double>(bytes * groups));
  std::atomic<bool> failed{false};
  worker.parallel_chunks(groups, per_read, threads, [&](int64_t g0, int64_t g1) {
    thread_local std::vector<uint8_t> buffer;
    for (int64_t g = g0; g < g1 && !failed.load(std::memory_order_relaxed); g += per_read) {
      const int64_t n = std::min(per_read, g1 - g);
      buffer.resize(static_cast<size_t>(n) * bytes);
      if (!read(static_cast<size_t>(g) * bytes, buffer.size(), buffer.data())) {
        failed = true;
        return;
      }
      for (int64_t i = 0; i < n; ++i)
        pack_group(type, n_in, buffer.data() + i * bytes, stride, out + (g + i) * bytes);
    }
  });
  const size_t packed = static_cast<size_t>(groups) * bytes;
  const size_t rest = static_cast<size_t>(n_out) * stride - packed;
  if (!failed && rest > 0) read(packed, rest, out + packed);
}

void repack_in_place(Worker& worker, DType type, int64_t n_in, int64_t n_out, uint8_t* data) {
  const size_t groups_bytes = static_cast<size_t>(n_out / kGroupRows) * group_bytes(type, n_in);
  pack_matrix(
      worker, type, n_in, n_out,
      [&](size_t at, size_t n, uint8_t* dst) {
        // The rows after the groups are already where they belong.
        if (at < groups_bytes) std::memcpy(dst, data + at, n);
        return true;
      },
      data);
}

void unpack_row(DType type, int64_t n_in, int64_t n_out, const uint8_t* data, int64_t o,
                uint8_t* row) {
  check(repackable(type), "repack: ", type_info(type).name, " weights are never repacked");
  const size_t stride = row_bytes(type, n_in);
  if (o >= n_out / kGroupRows * kGroupRows) {  // after the last whole group: where it was
    std::memcpy(row, data + o * stride, stride);
    return;
  }
  const int64_t r = o % kGroupRows;
  const uint8_t* group_data = data + o / kGroupRows * group_bytes(type, n_in);
  if (type == DType::Q4_K) return unpack_k_row(n_in, group_data, static_cast<int>(r), row);
  if (type == DType::Q6_K) return unpack_k6_row(n_in, group_data, static_cast<int>(r), row);
  const int64_t nb = n_in / kQK, vectors = quant_bytes(type) / 64;
  const size_t block = type_info(type).block_bytes;
  const Group group{group_data, nb, quant_bytes(type)};
  for (int64_t b = 0; b < nb; ++b) {
    uint8_t* dst = row + b * block;
    std::memcpy(dst, group.scales(b) + 2 * r, 2);
    for (int64_t d = 0; d < vectors; ++d)
      std::memcpy(dst + 2 + 4 * d, group.quants(b) + 64 * d + 4 * r, 4);
  }
}

}  // namespace parspec::repack
