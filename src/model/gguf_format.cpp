// The parts of the GGUF format the reader and the writer share.
#include "model/gguf_format.h"

#include <bit>
#include <limits>

#include "core/error.h"

namespace parspec {

namespace gguf_format {

bool is_known_value_type(uint32_t id) {
  return id <= static_cast<uint32_t>(GgufType::F64);
}

uint64_t scalar_size(GgufType type) {
  switch (type) {
    case GgufType::U8:
    case GgufType::I8:
    case GgufType::BOOL:
      return 1;
    case GgufType::U16:
    case GgufType::I16:
      return 2;
    case GgufType::U32:
    case GgufType::I32:
    case GgufType::F32:
      return 4;
    case GgufType::U64:
    case GgufType::I64:
    case GgufType::F64:
      return 8;
    case GgufType::STRING:
    case GgufType::ARRAY:
      return 0;
  }
  return 0;
}

uint64_t min_encoded_size(GgufType type) {
  if (type == GgufType::STRING) return 8;  // u64 length
  if (type == GgufType::ARRAY) return 12;  // u32 element type + u64 count
  return scalar_size(type);
}

bool is_unsigned_int(GgufType t) {
  return t == GgufType::U8 || t == GgufType::U16 || t == GgufType::U32 || t == GgufType::U64;
}
bool is_signed_int(GgufType t) {
  return t == GgufType::I8 || t == GgufType::I16 || t == GgufType::I32 || t == GgufType::I64;
}
bool is_float(GgufType t) {
  return t == GgufType::F32 || t == GgufType::F64;
}

std::string quoted(std::string_view s) {
  std::string out = "'";
  out += s;
  out += "'";
  return out;
}

void validate_value(const GgufValue& value, const std::string& where, int depth) {
  const auto expect = [&](bool ok) {
    check(ok, where, ": value of type ", gguf_type_name(value.type),
          " holds a mismatched or out-of-range payload");
  };
  switch (value.type) {
    case GgufType::U8:
    case GgufType::U16:
    case GgufType::U32:
    case GgufType::U64: {
      expect(std::holds_alternative<uint64_t>(value.value));
      const uint64_t v = std::get<uint64_t>(value.value);
      const unsigned bits = 8 * static_cast<unsigned>(scalar_size(value.type));
      expect(bits == 64 || v < (uint64_t{1} << bits));
      return;
    }
    case GgufType::I8:
    case GgufType::I16:
    case GgufType::I32:
    case GgufType::I64: {
      expect(std::holds_alternative<int64_t>(value.value));
      const int64_t v = std::get<int64_t>(value.value);
      const unsigned bits = 8 * static_cast<unsigned>(scalar_size(value.type));
      const int64_t limit = bits == 64 ? 0 : int64_t{1} << (bits - 1);
      expect(bits == 64 || (v >= -limit && v < limit));
      return;
    }
    case GgufType::F32:
    case GgufType::F64:
      expect(std::holds_alternative<double>(value.value));
      return;
    case GgufType::BOOL:
      expect(std::holds_alternative<bool>(value.value));
      return;
    case GgufType::STRING:
      expect(std::holds_alternative<std::string>(value.value));
      return;
    case GgufType::ARRAY: {
      expect(std::holds_alternative<GgufArray>(value.value));
      const auto& array = std::get<GgufArray>(value.value);
      check(is_known_value_type(static_cast<uint32_t>(array.elem_type)), where,
            ": bad array element type ", static_cast<uint32_t>(array.elem_type));
      check(depth + 1 < kMaxArrayDepth || array.elem_type != GgufType::ARRAY, where,
            ": arrays nested deeper than ", kMaxArrayDepth, " levels");
      for (const auto& item : array.items) {
        check(item.type == array.elem_type, where, ": array of ", gguf_type_name(array.elem_type),
              " holds an item of type ", gguf_type_name(item.type));
        validate_value(item, where, depth + 1);
      }
      return;
    }
  }
  fail(where, ": bad value type ", static_cast<uint32_t>(value.type));
}

std::pair<uint64_t, uint64_t> tensor_size(const std::string& where, std::span<const uint64_t> dims,
                                          uint32_t type_id) {
  // Q8_K is not a weight type: it only ever holds activations.
  check(is_weight_type(type_id), where, ": unknown or unsupported tensor type id ", type_id);
  const TypeInfo& layout = type_info(static_cast<DType>(type_id));
  const auto block_elems = static_cast<uint64_t>(layout.block_elems);
  uint64_t n_elements = 1;
  for (size_t d = 0; d < dims.size(); ++d) {
    check(dims[d] >= 1, where, ": dims[", d, "] is 0 (every dimension must be at least 1)");
    const auto max_elements = static_cast<uint64_t>(std::numeric_limits<int64_t>::max());
    check(dims[d] <= max_elements / n_elements, where, ": dims overflow (element count exceeds ",
          max_elements, ")");
    n_elements *= dims[d];
  }
  check(dims[0] % block_elems == 0, where, ": dims[0] = ", dims[0],
        " is not a multiple of the block size ", block_elems, " of type ", layout.name);
  const uint64_t n_blocks = n_elements / block_elems;
  check(n_blocks <= std::numeric_limits<uint64_t>::max() / layout.block_bytes, where,
        ": byte size overflows");
  return {n_elements, n_blocks * layout.block_bytes};
}

uint64_t align_up(uint64_t value, uint64_t alignment) {
  const uint64_t rem = value % alignment;
  return rem == 0 ? value : value + (alignment - rem);
}

std::string kind_of(const GgufValue& value) {
  std::string s(gguf_type_name(value.type));
  if (value.type == GgufType::ARRAY) {
    s += " of ";
    s += gguf_type_name(std::get<GgufArray>(value.value).elem_type);
  }
  return s;
}

uint32_t alignment_of(const GgufValue* value, const std::string& who) {
  if (value == nullptr) return kDefaultAlignment;
  check(value->type == GgufType::U32, who, ": metadata key 'general.alignment' must be u32, found ",
        kind_of(*value));
  const uint64_t a = std::get<uint64_t>(value->value);
  check(std::has_single_bit(a), who, ": general.alignment = ", a, " is not a nonzero power of two");
  return static_cast<uint32_t>(a);
}

}  // namespace gguf_format

using namespace gguf_format;

std::string_view gguf_type_name(GgufType type) {
  switch (type) {
    case GgufType::U8:
      return "u8";
    case GgufType::I8:
      return "i8";
    case GgufType::U16:
      return "u16";
    case GgufType::I16:
      return "i16";
    case GgufType::U32:
      return "u32";
    case GgufType::I32:
      return "i32";
    case GgufType::F32:
      return "f32";
    case GgufType::BOOL:
      return "bool";
    case GgufType::STRING:
      return "string";
    case GgufType::ARRAY:
      return "array";
    case GgufType::U64:
      return "u64";
    case GgufType::I64:
      return "i64";
    case GgufType::F64:
      return "f64";
  }
  return "unknown";
}

GgufValue GgufValue::array(GgufType elem_type, std::vector<GgufValue> items) {
  GgufValue v{GgufType::ARRAY, GgufArray{elem_type, std::move(items)}};
  validate_value(v, "GgufValue::array", 0);
  return v;
}

GgufValue GgufValue::string_array(const std::vector<std::string>& items) {
  GgufArray array{GgufType::STRING, {}};
  array.items.reserve(items.size());
  for (const auto& s : items) array.items.push_back(string(s));
  return {GgufType::ARRAY, std::move(array)};
}

GgufValue GgufValue::f32_array(const std::vector<float>& items) {
  GgufArray array{GgufType::F32, {}};
  array.items.reserve(items.size());
  for (float f : items) array.items.push_back(f32(f));
  return {GgufType::ARRAY, std::move(array)};
}

GgufValue GgufValue::i32_array(const std::vector<int32_t>& items) {
  GgufArray array{GgufType::I32, {}};
  array.items.reserve(items.size());
  for (int32_t i : items) array.items.push_back(i32(i));
  return {GgufType::ARRAY, std::move(array)};
}

}  // namespace parspec
