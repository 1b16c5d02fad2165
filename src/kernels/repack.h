#pragma once
// Q4_0, Q8_0, Q4_K and Q6_K weights repacked once, at load, into the lane layout the
// tile kernels consume, so that a tile of 16 weight rows is one sequential
// stream and no kernel transposes blocks in registers.
//
// Q4_0 and Q8_0:
// A group holds 16 consecutive rows. Its blocks come in pairs, each pair laid
// out as [scales of block b (32 bytes) | scales of b+1 | quants of b | quants
// of b+1] (an unpaired last block: [scales | quants]; a group 32 bytes past a
// line first has block 0 alone, see Group), so every quant vector is one
// aligned 64-byte line:
// - scales: the 16 rows' f16 block scales, row r at bytes 2r, 2r+1;
// - quants: one 64-byte vector per 4 bytes of a block's qs (Q4_0: 4, Q8_0: 8);
//   vector d holds bytes 4d..4d+3 of each row's qs (row r at 4r), as in the
//   file (Q4_0 nibbles: low = elements 4d..4d+3, high = 16+4d..16+4d+3).
// One 64-byte vector is thus one 512-bit operand for 16 rows, or two 256-bit
// operands for rows 0-7 and 8-15.
//
// Q4_K (see KGroup): each super-block of the 16 rows is 36 lines of 64 bytes,
// line L holding dword L (bytes 4L..4L+3) of the 16 rows' blocks, row r at 4r:
// line 0 the f16 d and dmin, lines 1-3 the packed scales, lines 4-35 the quants.
//
// Q6_K (see K6Group): each super-block of the 16 rows is 52 lines (dword L of
// the 16 rows' ql, qh and scales, as Q4_K's) and half a line with their 16 f16 d.
//
// A group takes exactly the bytes of its 16 rows, so a matrix repacks in place;
// the n_out % 16 rows after the last whole group stay row-major where they were.
#include <cstdint>
#include <functional>

#include "core/worker.h"
#include "kernels/isa.h"
#include "kernels/quant.h"

namespace parspec::repack {

constexpr int kGroupRows = 16;

// Whether weights of this type can be repacked.
constexpr bool repackable(DType type) {
  return type == DType::Q4_0 || type == DType::Q8_0 || type == DType::Q4_K || type == DType::Q6_K;
}

// Whether repacking this type at load speeds up the kernels of `isa`: Q4_0 and
// Q8_0 always; Q4_K and Q6_K with AVX-512 only, where at M = 1 Q4_K streams
// 27% more and Q6_K twice as much (build/kernel_throughput 2048 262144 q4_K;
// 2048 65536 q6_K). The 8-lane builds read a group's lines once per half and
// lost to the row-major tiles from M = 3 (Q4_K) or M = 5 (Q6_K) on.
constexpr bool repack_pays(DType type, Isa isa) {
  const bool k_quant = type == DType::Q4_K || type == DType::Q6_K;
  return repackable(type) && (!k_quant || isa == Isa::kAvx512);
}

// Bytes of one block's quants for the 16 rows of a group (Q4_0 or Q8_0).
constexpr int64_t quant_bytes(DType type) {
  return type == DType::Q4_0 ? 4 * 64 : 8 * 64;
}

// Addresses of a block's scales and quants inside one group of `nb` blocks per row.
// A group that starts 32 bytes past a 64-byte line (GGUF aligns tensors to 32
// bytes) leads with block 0 alone ([scales | quants]) and pairs the blocks
// after it, so that every quant vector still fills one line: a 512-bit load
// across two lines costs two. The layout so depends on where the group lies:
// packed bytes never move.
struct Group {
  const uint8_t* base;
  int64_t nb;
  int64_t quant_bytes;  // repack::quant_bytes of the type
  int64_t lead() const { return (reinterpret_cast<uintptr_t>(base) & 63) == 32 ? 1 : 0; }
  const uint8_t* scales(int64_t b) const {
    const int64_t lone = lead();
    if (b < lone) return base;
    const int64_t c = b - lone;
    return base + lone * (32 + quant_bytes) + (c >> 1) * (64 + 2 * quant_bytes) + (c & 1) * 32;
  }
  const uint8_t* quants(int64_t b) const {
    const int64_t lone = lead();
    if (b < lone) return base + 32;
    const int64_t c = b - lone, pair = c >> 1;
    // After the scales of a pair, or of a lone last block.
    const int64_t head = 2 * pair + 1 < nb - lone ? 64 : 32;
    return base + lone * (32 + quant_bytes) + pair * (64 + 2 * quant_bytes) + head +
           (c & 1) * quant_bytes;
  }
};

// A group of 16 Q4_K rows: line i = 36 b + L is dword L of block b. A group
// that starts 32 bytes past a 64-byte line would split every line; it instead
// keeps line 0 in two halves, rows 0-7 in its first 32 bytes and rows 8-15 in
// its last 32, and every line after it on a line boundary.
struct KGroup {
  static constexpr int64_t kLinesPerBlock = sizeof(BlockQ4_K) / 4;
  const uint8_t* base;
  int64_t nb;
  int64_t lead() const { return (reinterpret_cast<uintptr_t>(base) & 63) == 32 ? 1 : 0; }
  int64_t bytes() const { return nb * kLinesPerBlock * 64; }
  // Line i (not line 0 of a group with a lead).
  const uint8_t* line(int64_t i) const { return base - 32 * lead() + 64 * i; }
  // Row r's dword of line i, split line included.
  const uint8_t* dword(int64_t i, int r) const {
    if (i == 0 && lead() != 0) return r < 8 ? base + 4 * r : base + bytes() - 32 + 4 * (r - 8);
    return line(i) + 4 * r;
  }
};

// A group of 16 Q6_K rows: super-block b is 52 lines (line L = dword L of the
// 16 rows' blocks, row r at 4r: ql in lines 0-31, qh in 32-47, the scales in
// 48-51) and the rows' 16 f16 d in half a line. 16 blocks of 210 bytes are
// 52.5 lines, so every other block starts 32 bytes past a line: such a block
// leads with its d, the others end with it, and every line lies on a line
// boundary (a block's place follows from its address: packed bytes never move).
struct K6Group {
  static constexpr int64_t kLinesPerBlock = (sizeof(BlockQ6_K) - 2) / 4;
  static constexpr int64_t kBlockBytes = kGroupRows * sizeof(BlockQ6_K);
  const uint8_t* base;
  int64_t nb;
  const uint8_t* block(int64_t b) const { return base + b * kBlockBytes; }
  bool leads_with_d(int64_t b) const { return (reinterpret_cast<uintptr_t>(block(b)) & 63) == 32; }
  // Line l of block b.
  const uint8_t* line(int64_t b, int64_t l) const {
    return block(b) + (leads_with_d(b) ? 32 : 0) + 64 * l;
  }
  // The 16 f16 d of block b.
  const uint8_t* d(int64_t b) const {
    return leads_with_d(b) ? block(b) : block(b) + 64 * kLinesPerBlock;
  }
};

// Bytes of one group: those of its 16 rows.
inline size_t group_bytes(DType type, int64_t n_in) {
  return kGroupRows * row_bytes(type, n_in);
}

// Packs 16 row-major rows of n_in elements, `stride` bytes apart, into one
// group at `out` (which must not overlap them).
void pack_group(DType type, int64_t n_in, const uint8_t* rows, size_t stride, uint8_t* out);

// Supplies n bytes at byte `at` of a row-major matrix into dst; false on a
// failure (the supplier keeps why), which stops the packing.
using ByteReader = std::function<bool(size_t at, size_t n, uint8_t* dst)>;

// A row-major n_out × n_in matrix, as `read` supplies it, packed into `out`
// (its bytes): the n_out / 16 whole groups in the layout above, the rows after
// them row-major. On the worker's threads, a few groups per read, each read
// into a buffer that stays in cache before its groups are written: so `out`
// may be where `read` copies from, and loading a file packs while reading it.
void pack_matrix(Worker& worker, DType type, int64_t n_in, int64_t n_out, const ByteReader& read,
                 uint8_t* out);

// pack_matrix of row-major `data` into itself.
void repack_in_place(Worker& worker, DType type, int64_t n_in, int64_t n_out, uint8_t* data);

// The inverse: row `o` of an n_out-row matrix repacked by repack_in_place (in
// a group or after the last) as the row-major bytes it was. For the scalar
// reference and tests.
void unpack_row(DType type, int64_t n_in, int64_t n_out, const uint8_t* data, int64_t o,
                uint8_t* row);

}  // namespace parspec::repack
