#pragma once
// Hand-made GGUF bytes and error checks shared by the GGUF tests.
#include <gtest/gtest.h>

#include <cstdint>
#include <random>
#include <string>
#include <string_view>
#include <vector>

#include "core/error.h"
#include "model/gguf.h"

namespace parspec::gguf_test {

constexpr uint32_t kMagic = 0x46554747;
constexpr uint64_t kHuge = uint64_t{1} << 63;

// Little-endian byte builder for hand-made (often malformed) files.
struct Bytes {
  std::vector<uint8_t> b;
  template <class T>
  Bytes& put(T v) {
    const auto* p = reinterpret_cast<const uint8_t*>(&v);
    b.insert(b.end(), p, p + sizeof(T));
    return *this;
  }
  Bytes& str(std::string_view s) {
    put<uint64_t>(s.size());
    b.insert(b.end(), s.begin(), s.end());
    return *this;
  }
  Bytes& append(const Bytes& other) {
    b.insert(b.end(), other.b.begin(), other.b.end());
    return *this;
  }
  Bytes& kv_u32(std::string_view key, uint32_t v) {
    return str(key).put<uint32_t>(uint32_t(GgufType::U32)).put(v);
  }
  Bytes& kv_string(std::string_view key, std::string_view v) {
    return str(key).put<uint32_t>(uint32_t(GgufType::STRING)).str(v);
  }
  Bytes& tensor(std::string_view name, std::vector<uint64_t> dims, uint32_t type, uint64_t offset) {
    str(name).put<uint32_t>(static_cast<uint32_t>(dims.size()));
    for (uint64_t d : dims) put(d);
    return put(type).put(offset);
  }
};

// Header + `body` (kv entries then tensor infos), padded to `alignment`, then `data_bytes` zeros.
inline std::vector<uint8_t> raw_file(uint64_t n_tensors, uint64_t n_kv, const Bytes& body,
                                     size_t data_bytes = 0, size_t alignment = 32,
                                     uint32_t version = 3) {
  Bytes f;
  f.put(kMagic).put(version).put(n_tensors).put(n_kv).append(body);
  f.b.resize((f.b.size() + alignment - 1) / alignment * alignment, 0);
  f.b.resize(f.b.size() + data_bytes, 0);
  return f.b;
}

// Parses a copy of `bytes` in an exactly sized buffer (so sanitizers see any overread);
// returns the error message, or "" if the bytes parsed.
inline std::string parse_error(const std::vector<uint8_t>& bytes) {
  const std::vector<uint8_t> exact(bytes.begin(), bytes.end());
  try {
    GgufFile::from_memory(exact.data(), exact.size(), "test.gguf");
  } catch (const Error& e) {
    return e.what();
  }
  return "";
}

#define EXPECT_PARSE_ERROR(bytes, word)                                           \
  do {                                                                            \
    const std::string msg_ = parse_error(bytes);                                  \
    EXPECT_EQ(msg_.rfind("test.gguf: ", 0), 0u) << "message: '" << msg_ << "'";   \
    EXPECT_NE(msg_.find(word), std::string::npos) << "message: '" << msg_ << "'"; \
  } while (0)

template <class F>
std::string error_of(F&& f) {
  try {
    f();
  } catch (const Error& e) {
    return e.what();
  }
  return "";
}

#define EXPECT_ERROR_WITH(expr, word)                                             \
  do {                                                                            \
    const std::string msg_ = error_of([&] { (void)(expr); });                     \
    EXPECT_NE(msg_.find(word), std::string::npos) << "message: '" << msg_ << "'"; \
  } while (0)

inline bool same_value(const GgufValue& a, const GgufValue& b) {
  if (a.type != b.type || a.value.index() != b.value.index()) return false;
  if (const auto* arr = std::get_if<GgufArray>(&a.value)) {
    const auto& other = std::get<GgufArray>(b.value);
    if (arr->elem_type != other.elem_type || arr->items.size() != other.items.size()) return false;
    for (size_t i = 0; i < arr->items.size(); ++i) {
      if (!same_value(arr->items[i], other.items[i])) return false;
    }
    return true;
  }
  if (const auto* u = std::get_if<uint64_t>(&a.value)) return *u == std::get<uint64_t>(b.value);
  if (const auto* i = std::get_if<int64_t>(&a.value)) return *i == std::get<int64_t>(b.value);
  if (const auto* d = std::get_if<double>(&a.value)) return *d == std::get<double>(b.value);
  if (const auto* x = std::get_if<bool>(&a.value)) return *x == std::get<bool>(b.value);
  return std::get<std::string>(a.value) == std::get<std::string>(b.value);
}

inline std::vector<uint8_t> random_bytes(size_t n, uint32_t seed) {
  std::mt19937 rng(seed);
  std::vector<uint8_t> v(n);
  for (auto& x : v) x = static_cast<uint8_t>(rng());
  return v;
}

// A small valid file whose last tensor ends exactly at the end of the file (no trailing
// padding), so that every proper prefix is invalid.
inline std::vector<uint8_t> small_valid_file() {
  GgufWriter w;
  w.set("general.architecture", GgufValue::string("llama"));
  w.set("llama.block_count", GgufValue::u32(2));
  w.set("llama.rope.freq_base", GgufValue::f32(10000.0f));
  w.set("tokenizer.ggml.add_bos_token", GgufValue::boolean(true));
  w.set("tokenizer.ggml.tokens", GgufValue::string_array({"a", "bc", ""}));
  w.set("nested", GgufValue::array(GgufType::ARRAY,
                                   {GgufValue::i32_array({1, -2}), GgufValue::i32_array({})}));
  const auto q8 = random_bytes(68, 1);
  w.add_tensor("blk.0.attn_q.weight", {32, 2}, DType::Q8_0, q8.data(), q8.size());
  const auto f32 = random_bytes(32, 2);
  w.add_tensor("output_norm.weight", {8}, DType::F32, f32.data(), f32.size());
  return w.to_bytes();
}

}  // namespace parspec::gguf_test
