#pragma once
// What the GGUF reader and writer share: the format's constants and the checks
// and helpers both apply (value consistency, tensor sizes, alignment). Internal
// to src/model/gguf_*.cpp.
#include <cstdint>
#include <span>
#include <string>
#include <string_view>
#include <utility>

#include "model/gguf.h"

namespace parspec::gguf_format {

constexpr uint32_t kMagic = 0x46554747;  // "GGUF" read as a little-endian u32
constexpr uint32_t kDefaultAlignment = 32;
constexpr uint32_t kMaxDims = 4;
// Arrays of arrays are legal but nothing real nests deeply; the limit bounds recursion.
constexpr int kMaxArrayDepth = 4;
// Each decoded value costs ~50 bytes of memory for as little as 1 byte of file: cap the total
// (keys and array items) so a hostile file cannot make us allocate many times its size. Real
// models (vocab 256k: tokens, scores, types, merges) stay far below.
constexpr uint64_t kMaxMetadataValues = uint64_t{1} << 23;
// Real models have at most a few thousand tensors.
constexpr uint64_t kMaxTensors = uint64_t{1} << 20;
// Vectors sized from a count in the file grow as items are actually read, beyond this.
constexpr uint64_t kMaxReserve = 4096;
// Smallest encodings, used to reject counts the remaining bytes cannot possibly hold.
constexpr uint64_t kMinKvBytes = 8 + 4 + 1;  // key length, type, 1-byte value
constexpr uint64_t kMinTensorInfoBytes =
    8 + 4 + 8 + 4 + 8;  // name length, n_dims, 1 dim, type, offset

bool is_known_value_type(uint32_t id);
// Fixed encoded size of a scalar type; 0 for string and array.
uint64_t scalar_size(GgufType type);
// Smallest encoding of a value of `type`.
uint64_t min_encoded_size(GgufType type);
bool is_unsigned_int(GgufType t);
bool is_signed_int(GgufType t);
bool is_float(GgufType t);
// `s` in single quotes, for messages.
std::string quoted(std::string_view s);

// Throws unless `value` is internally consistent (variant matches type, integers fit the
// declared width, array items all of the element type, nesting bounded).
void validate_value(const GgufValue& value, const std::string& where, int depth);

// Checks a tensor shape and type; returns {n_elements, n_bytes}. `where` prefixes messages.
std::pair<uint64_t, uint64_t> tensor_size(const std::string& where, std::span<const uint64_t> dims,
                                          uint32_t type_id);

uint64_t align_up(uint64_t value, uint64_t alignment);

// Description of a value's kind for getter errors.
std::string kind_of(const GgufValue& value);

// general.alignment (a u32 power of two) where given, else the default. `who`
// prefixes messages (the file's path, or the writer).
uint32_t alignment_of(const GgufValue* value, const std::string& who);

}  // namespace parspec::gguf_format
