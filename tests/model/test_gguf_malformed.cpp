// The GGUF reader rejects malformed files with a message naming the file and
// the problem, and never reads outside the bytes it was given.
#include <gtest/gtest.h>

#include <cstring>
#include <limits>

#include "core/error.h"
#include "model/gguf.h"
#include "model/gguf_test_bytes.h"

namespace parspec {
namespace {

using namespace gguf_test;

// ------------------------------------------------------------------------------------------
// Malformed input

TEST(GgufMalformed, SmallValidFileParses) {
  const auto bytes = small_valid_file();
  EXPECT_EQ(parse_error(bytes), "");
}

TEST(GgufMalformed, TruncatedAtEveryOffset) {
  const auto bytes = small_valid_file();
  for (size_t n = 0; n < bytes.size(); ++n) {
    const std::vector<uint8_t> prefix(bytes.begin(), bytes.begin() + static_cast<ptrdiff_t>(n));
    const std::string msg = parse_error(prefix);
    EXPECT_FALSE(msg.empty()) << "prefix of " << n << " bytes parsed";
    EXPECT_TRUE(msg.find("truncat") != std::string::npos ||
                msg.find("past the end") != std::string::npos ||
                msg.find("exceeds") != std::string::npos)
        << "prefix " << n << ": " << msg;
  }
}

TEST(GgufMalformed, EveryByteCorruptedNeverCrashes) {
  // Flipping any single byte must either parse or throw Error: never crash or hang.
  const auto bytes = small_valid_file();
  size_t rejected = 0;
  for (size_t i = 0; i < bytes.size(); ++i) {
    for (uint8_t mask : {uint8_t{0xff}, uint8_t{0x80}, uint8_t{0x01}}) {
      auto corrupt = bytes;
      corrupt[i] ^= mask;
      if (!parse_error(corrupt).empty()) ++rejected;
    }
  }
  EXPECT_GT(rejected, bytes.size() / 4);
}

TEST(GgufMalformed, TruncationMessageNamesTheKey) {
  Bytes body;
  body.kv_u32("general.alignment", 32).kv_u32("a", 1).kv_u32("b", 2);
  body.str("llama.block_count").put<uint32_t>(uint32_t(GgufType::U32)).put<uint16_t>(0);
  Bytes f;
  f.put(kMagic).put<uint32_t>(3).put<uint64_t>(0).put<uint64_t>(4).append(body);
  EXPECT_PARSE_ERROR(f.b,
                     "test.gguf: truncated while reading metadata key #3 ('llama.block_count') "
                     "value");
}

TEST(GgufMalformed, BadMagic) {
  auto bytes = small_valid_file();
  bytes[0] = 'X';
  EXPECT_PARSE_ERROR(bytes, "magic");
}

TEST(GgufMalformed, BadVersion) {
  EXPECT_PARSE_ERROR(raw_file(0, 0, {}, 0, 32, 1), "version 1");
  EXPECT_PARSE_ERROR(raw_file(0, 0, {}, 0, 32, 4), "version 4");
  EXPECT_PARSE_ERROR(raw_file(0, 0, {}, 0, 32, 0x03000000), "big-endian");
}

TEST(GgufMalformed, AbsurdCounts) {
  EXPECT_PARSE_ERROR(raw_file(kHuge, 0, {}), "tensor count");
  EXPECT_PARSE_ERROR(raw_file(0, kHuge, {}), "kv count");
  EXPECT_PARSE_ERROR(raw_file(std::numeric_limits<uint64_t>::max(), 0, {}), "tensor count");

  Bytes long_key;
  long_key.put<uint64_t>(kHuge).put<uint32_t>(4).put<uint32_t>(0);
  EXPECT_PARSE_ERROR(raw_file(0, 1, long_key), "string length");

  Bytes long_value;
  long_value.str("k").put<uint32_t>(uint32_t(GgufType::STRING)).put<uint64_t>(kHuge);
  EXPECT_PARSE_ERROR(raw_file(0, 1, long_value), "string length");

  Bytes long_array;
  long_array.str("k").put<uint32_t>(uint32_t(GgufType::ARRAY));
  long_array.put<uint32_t>(uint32_t(GgufType::U8)).put<uint64_t>(kHuge);
  EXPECT_PARSE_ERROR(raw_file(0, 1, long_array), "array count");

  // Strings need 8 bytes each: the 15 bytes of padding after the count cannot hold 8 strings.
  Bytes string_array;
  string_array.str("k").put<uint32_t>(uint32_t(GgufType::ARRAY));
  string_array.put<uint32_t>(uint32_t(GgufType::STRING)).put<uint64_t>(8);
  EXPECT_PARSE_ERROR(raw_file(0, 1, string_array), "array count");

  Bytes long_name;
  long_name.put<uint64_t>(kHuge);
  EXPECT_PARSE_ERROR(raw_file(1, 0, long_name, 64), "tensor #0 name: string length");
}

TEST(GgufMalformed, TooManyMetadataValues) {
  // Each decoded value costs far more memory than its byte in the file: the total is capped.
  const uint64_t count = (uint64_t{1} << 23) + 1;
  Bytes many;
  many.str("k").put<uint32_t>(uint32_t(GgufType::ARRAY));
  many.put<uint32_t>(uint32_t(GgufType::U8)).put<uint64_t>(count);
  EXPECT_PARSE_ERROR(raw_file(0, 1, many, count), "too many metadata values");
  // kv entries count too.
  EXPECT_PARSE_ERROR(raw_file(0, count, {}, count * 13), "too many metadata values");
}

TEST(GgufMalformed, TooManyTensors) {
  const uint64_t count = (uint64_t{1} << 20) + 1;
  EXPECT_PARSE_ERROR(raw_file(count, 0, {}, count * 32), "exceeds the limit");
}

TEST(GgufMalformed, BadValueTypes) {
  Bytes bad;
  bad.kv_u32("a", 1).str("b").put<uint32_t>(13).put<uint32_t>(0);
  EXPECT_PARSE_ERROR(raw_file(0, 2, bad), "metadata key #1 ('b'): bad value type 13");

  Bytes bad_elem;
  bad_elem.str("arr").put<uint32_t>(uint32_t(GgufType::ARRAY)).put<uint32_t>(77).put<uint64_t>(0);
  EXPECT_PARSE_ERROR(raw_file(0, 1, bad_elem), "bad array element type 77");

  Bytes bad_bool;
  bad_bool.str("flag").put<uint32_t>(uint32_t(GgufType::BOOL)).put<uint8_t>(2);
  EXPECT_PARSE_ERROR(raw_file(0, 1, bad_bool), "bool");
}

TEST(GgufMalformed, ArraysNestedTooDeep) {
  Bytes deep;
  deep.str("deep").put<uint32_t>(uint32_t(GgufType::ARRAY));
  for (int level = 0; level < 4; ++level) {
    deep.put<uint32_t>(uint32_t(GgufType::ARRAY)).put<uint64_t>(1);
  }
  deep.put<uint32_t>(uint32_t(GgufType::U8)).put<uint64_t>(1).put<uint8_t>(1);
  EXPECT_PARSE_ERROR(raw_file(0, 1, deep), "nested");
}

TEST(GgufMalformed, BadTensorType) {
  Bytes unknown;
  unknown.tensor("w", {32}, 99, 0);
  EXPECT_PARSE_ERROR(raw_file(1, 0, unknown, 128),
                     "tensor #0 ('w'): unknown or unsupported tensor type id 99");
  Bytes q8k;
  q8k.tensor("w", {256}, uint32_t(DType::Q8_K), 0);
  EXPECT_PARSE_ERROR(raw_file(1, 0, q8k, 512), "tensor type id 15");
}

TEST(GgufMalformed, BadDims) {
  Bytes zero_dims;
  zero_dims.tensor("w", {}, 0, 0);
  EXPECT_PARSE_ERROR(raw_file(1, 0, zero_dims, 64), "n_dims = 0");
  Bytes five_dims;
  five_dims.tensor("w", {1, 1, 1, 1, 1}, 0, 0);
  EXPECT_PARSE_ERROR(raw_file(1, 0, five_dims, 64), "n_dims = 5");
  Bytes zero_dim;
  zero_dim.tensor("w", {4, 0}, 0, 0);
  EXPECT_PARSE_ERROR(raw_file(1, 0, zero_dim, 64), "dims[1] is 0");
  Bytes overflow;
  overflow.tensor("w", {uint64_t{1} << 32, uint64_t{1} << 32}, 0, 0);
  EXPECT_PARSE_ERROR(raw_file(1, 0, overflow, 64), "overflow");
  Bytes huge_dim;
  huge_dim.tensor("w", {kHuge}, 0, 0);
  EXPECT_PARSE_ERROR(raw_file(1, 0, huge_dim, 64), "overflow");
  Bytes bytes_overflow;  // element count fits in int64 but the f32 byte size does not fit in u64
  bytes_overflow.tensor("w", {uint64_t{1} << 62}, 0, 0);
  EXPECT_PARSE_ERROR(raw_file(1, 0, bytes_overflow, 64), "overflow");
  Bytes partial_block;
  partial_block.tensor("w", {48, 2}, uint32_t(DType::Q4_0), 0);
  EXPECT_PARSE_ERROR(raw_file(1, 0, partial_block, 128), "block size 32");
}

TEST(GgufMalformed, TensorDataPlacement) {
  Bytes misaligned;
  misaligned.tensor("w", {4}, 0, 4);
  EXPECT_PARSE_ERROR(raw_file(1, 0, misaligned, 64), "misaligned");

  Bytes past_eof;
  past_eof.tensor("w", {1024}, 0, 0);
  EXPECT_PARSE_ERROR(raw_file(1, 0, past_eof, 64), "past the end");

  Bytes far_offset;
  far_offset.tensor("w", {8}, 0, uint64_t{1} << 60);
  EXPECT_PARSE_ERROR(raw_file(1, 0, far_offset, 64), "past the end");

  Bytes overlap;
  overlap.tensor("a", {16}, 0, 0).tensor("b", {16}, 0, 32);
  EXPECT_PARSE_ERROR(raw_file(2, 0, overlap, 128), "overlap");

  Bytes disjoint;  // same layout without the overlap is accepted
  disjoint.tensor("a", {16}, 0, 0).tensor("b", {16}, 0, 64);
  EXPECT_EQ(parse_error(raw_file(2, 0, disjoint, 128)), "");

  Bytes no_padding;  // the header is complete but the file ends before the data section
  no_padding.put(kMagic).put<uint32_t>(3).put<uint64_t>(1).put<uint64_t>(0);
  no_padding.tensor("w", {4}, 0, 0);
  ASSERT_NE(no_padding.b.size() % 32, 0u);
  EXPECT_PARSE_ERROR(no_padding.b, "data section");
}

TEST(GgufMalformed, Duplicates) {
  Bytes keys;
  keys.kv_u32("a", 1).kv_string("b", "x").kv_u32("a", 2);
  EXPECT_PARSE_ERROR(raw_file(0, 3, keys), "duplicate metadata key 'a'");

  Bytes names;
  names.tensor("w", {8}, 0, 0).tensor("w", {8}, 0, 32);
  EXPECT_PARSE_ERROR(raw_file(2, 0, names, 64), "duplicate tensor name 'w'");
}

TEST(GgufMalformed, BadAlignment) {
  for (uint32_t bad : {0u, 48u, 3u}) {
    Bytes body;
    body.kv_u32("general.alignment", bad);
    EXPECT_PARSE_ERROR(raw_file(0, 1, body), "power of two");
  }
  Bytes wrong_type;
  wrong_type.kv_string("general.alignment", "32");
  EXPECT_PARSE_ERROR(raw_file(0, 1, wrong_type), "must be u32");

  // Offsets must follow the file's alignment, not the default.
  Bytes aligned16;
  aligned16.kv_u32("general.alignment", 16).tensor("w", {4}, 0, 16);
  EXPECT_EQ(parse_error(raw_file(1, 1, aligned16, 32, 16)), "");
  Bytes misaligned64;
  misaligned64.kv_u32("general.alignment", 64).tensor("w", {4}, 0, 32);
  EXPECT_PARSE_ERROR(raw_file(1, 1, misaligned64, 128, 64), "alignment 64");
}

}  // namespace
}  // namespace parspec
