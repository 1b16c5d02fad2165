// GGUF reader/writer: round trips, typed getters, and rejection of malformed files.
#include <gtest/gtest.h>

#include <cstring>
#include <filesystem>
#include <fstream>
#include <limits>
#include <random>

#include "core/error.h"
#include "model/gguf.h"
#include "test_helpers.h"

namespace parspec {
namespace {

using testing_support::TempDir;

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
std::vector<uint8_t> raw_file(uint64_t n_tensors, uint64_t n_kv, const Bytes& body,
                              size_t data_bytes = 0, size_t alignment = 32, uint32_t version = 3) {
  Bytes f;
  f.put(kMagic).put(version).put(n_tensors).put(n_kv).append(body);
  f.b.resize((f.b.size() + alignment - 1) / alignment * alignment, 0);
  f.b.resize(f.b.size() + data_bytes, 0);
  return f.b;
}

// Parses a copy of `bytes` in an exactly sized buffer (so sanitizers see any overread);
// returns the error message, or "" if the bytes parsed.
std::string parse_error(const std::vector<uint8_t>& bytes) {
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

bool same_value(const GgufValue& a, const GgufValue& b) {
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

std::vector<uint8_t> random_bytes(size_t n, uint32_t seed) {
  std::mt19937 rng(seed);
  std::vector<uint8_t> v(n);
  for (auto& x : v) x = static_cast<uint8_t>(rng());
  return v;
}

// A small valid file whose last tensor ends exactly at the end of the file (no trailing
// padding), so that every proper prefix is invalid.
std::vector<uint8_t> small_valid_file() {
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

// ------------------------------------------------------------------------------------------
// Round trips

TEST(GgufRoundTrip, EveryMetadataType) {
  std::vector<std::pair<std::string, GgufValue>> values = {
      {"u8", GgufValue::u8(250)},
      {"i8", {GgufType::I8, int64_t{-128}}},
      {"u16", {GgufType::U16, uint64_t{65535}}},
      {"i16", {GgufType::I16, int64_t{-32768}}},
      {"u32", GgufValue::u32(4000000000u)},
      {"i32", GgufValue::i32(-2000000000)},
      {"f32", GgufValue::f32(1e-5f)},
      {"bool.true", GgufValue::boolean(true)},
      {"bool.false", GgufValue::boolean(false)},
      {"string", GgufValue::string("héllo\nworld")},
      {"string.empty", GgufValue::string("")},
      {"u64", GgufValue::u64(std::numeric_limits<uint64_t>::max())},
      {"i64", {GgufType::I64, std::numeric_limits<int64_t>::min()}},
      {"f64", {GgufType::F64, 3.141592653589793}},
      {"array.f32", GgufValue::f32_array({0.5f, -1.25f})},
      {"array.empty", GgufValue::array(GgufType::U16, {})},
      {"array.bool",
       GgufValue::array(GgufType::BOOL, {GgufValue::boolean(false), GgufValue::boolean(true)})},
      {"array.strings", GgufValue::string_array({"x", "", "yz"})},
      {"array.nested",
       GgufValue::array(GgufType::ARRAY,
                        {GgufValue::array(GgufType::ARRAY, {GgufValue::string_array({"deep"})}),
                         GgufValue::array(GgufType::ARRAY, {})})},
  };
  // Four levels of arrays is the deepest accepted nesting.
  GgufValue deepest = GgufValue::array(GgufType::U8, {GgufValue::u8(7)});
  for (int level = 0; level < 3; ++level) deepest = GgufValue::array(GgufType::ARRAY, {deepest});
  values.emplace_back("array.depth4", deepest);

  GgufWriter w;
  for (const auto& [k, v] : values) w.set(k, v);
  const auto bytes = w.to_bytes();
  const auto file = GgufFile::from_memory(bytes.data(), bytes.size());
  EXPECT_EQ(file->version(), 3u);
  EXPECT_EQ(file->alignment(), 32u);
  EXPECT_TRUE(file->tensors().empty());
  ASSERT_EQ(file->metadata().size(), values.size());
  for (size_t i = 0; i < values.size(); ++i) {
    EXPECT_EQ(file->metadata()[i].first, values[i].first);  // file order kept
    EXPECT_TRUE(same_value(file->metadata()[i].second, values[i].second)) << values[i].first;
  }
}

TEST(GgufRoundTrip, WriterOutputMatchesTheSpecLayout) {
  GgufWriter w;
  w.set("general.architecture", GgufValue::string("llama"));
  w.set("n", GgufValue::u32(7));
  const float values[2] = {1.0f, -2.0f};
  w.add_tensor("w", {2}, DType::F32, values, sizeof(values));

  Bytes expected;  // laid out by hand from the format description
  expected.put(kMagic).put<uint32_t>(3).put<uint64_t>(1).put<uint64_t>(2);
  expected.kv_string("general.architecture", "llama").kv_u32("n", 7);
  expected.tensor("w", {2}, 0, 0);
  expected.b.resize(128, 0);  // header is 119 bytes: padded to the 32-byte alignment
  expected.put(values[0]).put(values[1]);
  expected.b.resize(160, 0);
  EXPECT_EQ(w.to_bytes(), expected.b);
}

TEST(GgufRoundTrip, SetReplacesExistingKey) {
  GgufWriter w;
  w.set("a", GgufValue::u32(1));
  w.set("b", GgufValue::u32(2));
  w.set("a", GgufValue::string("again"));
  const auto bytes = w.to_bytes();
  const auto file = GgufFile::from_memory(bytes.data(), bytes.size());
  ASSERT_EQ(file->metadata().size(), 2u);
  EXPECT_EQ(file->metadata()[0].first, "a");
  EXPECT_EQ(file->get_string("a"), "again");
}

TEST(GgufRoundTrip, EveryTensorType) {
  struct Case {
    DType type;
    int64_t block;
    size_t block_bytes;
  };
  const Case cases[] = {{DType::F32, 1, 4},    {DType::F16, 1, 2},      {DType::Q4_0, 32, 18},
                        {DType::Q8_0, 32, 34}, {DType::Q4_K, 256, 144}, {DType::Q6_K, 256, 210},
                        {DType::BF16, 1, 2}};
  GgufWriter w;
  std::vector<std::vector<uint8_t>> payloads;
  for (const auto& c : cases) {
    const std::vector<int64_t> dims = {c.block * 2, 3};
    payloads.push_back(random_bytes(c.block_bytes * 2 * 3, static_cast<uint32_t>(c.type)));
    w.add_tensor("t." + std::to_string(static_cast<int>(c.type)), dims, c.type,
                 payloads.back().data(), payloads.back().size());
  }
  // A 4-d tensor too.
  const auto four_d = random_bytes(2 * 3 * 4 * 5 * 4, 99);
  w.add_tensor("four_d", {2, 3, 4, 5}, DType::F32, four_d.data(), four_d.size());

  const auto bytes = w.to_bytes();
  const auto file = GgufFile::from_memory(bytes.data(), bytes.size());
  ASSERT_EQ(file->tensors().size(), std::size(cases) + 1);
  for (size_t i = 0; i < std::size(cases); ++i) {
    const auto& info = file->tensors()[i];
    EXPECT_EQ(info.name, "t." + std::to_string(static_cast<int>(cases[i].type)));
    EXPECT_EQ(info.type, cases[i].type);
    EXPECT_EQ(info.dims, (std::vector<int64_t>{cases[i].block * 2, 3}));
    EXPECT_EQ(info.n_elements, static_cast<uint64_t>(cases[i].block * 6));
    EXPECT_EQ(info.n_bytes, payloads[i].size());
    EXPECT_EQ(info.offset % 32, 0u);
    EXPECT_EQ(std::memcmp(file->tensor_data(info), payloads[i].data(), payloads[i].size()), 0);
    EXPECT_EQ((file->tensor_data(info) - bytes.data()) % 32, 0);
  }
  const GgufTensorInfo* t4 = file->find_tensor("four_d");
  ASSERT_NE(t4, nullptr);
  EXPECT_EQ(t4->dims, (std::vector<int64_t>{2, 3, 4, 5}));
  EXPECT_EQ(t4->n_elements, 120u);
  EXPECT_EQ(std::memcmp(file->tensor_data(*t4), four_d.data(), four_d.size()), 0);
  EXPECT_EQ(file->find_tensor("absent"), nullptr);
}

TEST(GgufRoundTrip, CustomAlignment) {
  GgufWriter w;
  w.set("general.alignment", GgufValue::u32(64));
  const auto a = random_bytes(12, 3), b = random_bytes(8, 4);
  w.add_tensor("a", {3}, DType::F32, a.data(), a.size());
  w.add_tensor("b", {4}, DType::F16, b.data(), b.size());
  const auto bytes = w.to_bytes();
  const auto file = GgufFile::from_memory(bytes.data(), bytes.size());
  EXPECT_EQ(file->alignment(), 64u);
  EXPECT_EQ(file->tensors()[1].offset, 64u);
  for (const auto& t : file->tensors()) {
    EXPECT_EQ((file->tensor_data(t) - bytes.data()) % 64, 0);
  }
  EXPECT_EQ(std::memcmp(file->tensor_data(file->tensors()[1]), b.data(), b.size()), 0);
}

TEST(GgufRoundTrip, AcceptsVersion2) {
  auto bytes = small_valid_file();
  bytes[4] = 2;
  const auto file = GgufFile::from_memory(bytes.data(), bytes.size());
  EXPECT_EQ(file->version(), 2u);
  EXPECT_EQ(file->tensors().size(), 2u);
}

TEST(GgufRoundTrip, WriteToDiskMatchesToBytesAndOpens) {
  const auto bytes = small_valid_file();
  const auto reparsed = GgufFile::from_memory(bytes.data(), bytes.size());
  GgufWriter w;
  for (const auto& [k, v] : reparsed->metadata()) w.set(k, v);
  for (const auto& t : reparsed->tensors()) {
    w.add_tensor(t.name, t.dims, t.type, reparsed->tensor_data(t), t.n_bytes);
  }
  EXPECT_EQ(w.to_bytes(), bytes);  // parse -> write reproduces the file exactly

  const TempDir dir;
  const std::string path = dir.file("written.gguf");
  std::ofstream(path) << "old contents";  // write() replaces an existing file
  w.write(path);
  std::ifstream in(path, std::ios::binary);
  const std::vector<uint8_t> on_disk((std::istreambuf_iterator<char>(in)), {});
  EXPECT_EQ(on_disk, bytes);
  for (const auto& entry :
       std::filesystem::directory_iterator(std::filesystem::path(path).parent_path())) {
    EXPECT_EQ(entry.path().string().find(path + ".tmp"), std::string::npos) << "temp file left";
  }

  // A small file is mapped unless the caller asks for a copy; either way the same bytes.
  for (WeightLoading loading : {WeightLoading::kAuto, WeightLoading::kMap, WeightLoading::kCopy}) {
    const auto file = GgufFile::open(path, loading);
    EXPECT_EQ(file->copied(), loading == WeightLoading::kCopy);
    EXPECT_EQ(file->path(), path);
    EXPECT_EQ(file->get_string("general.architecture"), "llama");
    const auto* norm = file->find_tensor("output_norm.weight");
    ASSERT_NE(norm, nullptr);
    EXPECT_EQ(std::memcmp(file->tensor_data(*norm), reparsed->tensor_data(*norm), 32), 0);
  }
}

// ------------------------------------------------------------------------------------------
// Writer errors

TEST(GgufWriterErrors, RejectsBadTensors) {
  GgufWriter w;
  const auto data = random_bytes(1024, 5);
  EXPECT_ERROR_WITH(w.add_tensor("x", {32}, DType::Q8_0, data.data(), 33), "expected 34");
  EXPECT_ERROR_WITH(w.add_tensor("x", {256}, DType::Q8_K, data.data(), 292), "tensor type");
  EXPECT_ERROR_WITH(w.add_tensor("x", {16}, DType::Q4_0, data.data(), 9), "block size");
  EXPECT_ERROR_WITH(w.add_tensor("x", {0}, DType::F32, data.data(), 0), "dims[0]");
  EXPECT_ERROR_WITH(w.add_tensor("x", {}, DType::F32, data.data(), 0), "n_dims");
  EXPECT_ERROR_WITH(w.add_tensor("x", {1, 1, 1, 1, 1}, DType::F32, data.data(), 4), "n_dims");
  w.add_tensor("x", {4}, DType::F32, data.data(), 16);
  EXPECT_ERROR_WITH(w.add_tensor("x", {4}, DType::F32, data.data(), 16), "duplicate");
}

TEST(GgufWriterErrors, RejectsBadValues) {
  GgufWriter w;
  EXPECT_ERROR_WITH(w.set("k", GgufValue{GgufType::U8, uint64_t{256}}), "out-of-range");
  EXPECT_ERROR_WITH(w.set("k", GgufValue{GgufType::I16, int64_t{40000}}), "out-of-range");
  EXPECT_ERROR_WITH(w.set("k", GgufValue{GgufType::STRING, uint64_t{1}}), "mismatched");
  EXPECT_ERROR_WITH(GgufValue::array(GgufType::U32, {GgufValue::i32(1)}), "holds an item");
  EXPECT_ERROR_WITH(w.set("", GgufValue::u32(1)), "empty");
  GgufValue too_deep = GgufValue::array(GgufType::U8, {});
  for (int level = 0; level < 4; ++level) {
    too_deep = GgufValue{GgufType::ARRAY, GgufArray{GgufType::ARRAY, {too_deep}}};
  }
  EXPECT_ERROR_WITH(w.set("k", too_deep), "nested");
}

TEST(GgufWriterErrors, RejectsBadAlignmentAndPath) {
  GgufWriter w;
  w.set("general.alignment", GgufValue::u32(48));
  EXPECT_ERROR_WITH(w.to_bytes(), "power of two");
  w.set("general.alignment", GgufValue::u64(64));
  EXPECT_ERROR_WITH(w.to_bytes(), "u32");
  GgufWriter ok;
  EXPECT_ERROR_WITH(ok.write("/nonexistent-dir-parspec/x.gguf"), "cannot create");
}

// ------------------------------------------------------------------------------------------
// Getters

class GgufGetters : public testing::Test {
 protected:
  void SetUp() override {
    GgufWriter w;
    w.set("s", GgufValue::string("text"));
    w.set("u8", GgufValue::u8(7));
    w.set("i32", GgufValue::i32(-5));
    w.set("u64.big", GgufValue::u64(uint64_t{1} << 63));
    w.set("f32", GgufValue::f32(0.25f));
    w.set("flag", GgufValue::boolean(true));
    w.set("strings", GgufValue::string_array({"a", "b"}));
    w.set("ints", GgufValue::i32_array({3, -4}));
    w.set("u16s", GgufValue::array(GgufType::U16, {GgufValue{GgufType::U16, uint64_t{9}}}));
    w.set("floats", GgufValue::f32_array({1.5f, -2.0f}));
    bytes_ = w.to_bytes();
    file_ = GgufFile::from_memory(bytes_.data(), bytes_.size(), "model.gguf");
  }
  std::vector<uint8_t> bytes_;
  std::unique_ptr<GgufFile> file_;
};

TEST_F(GgufGetters, ReturnValues) {
  EXPECT_EQ(file_->get_string("s"), "text");
  EXPECT_EQ(file_->get_int("u8"), 7);
  EXPECT_EQ(file_->get_int("i32"), -5);
  EXPECT_EQ(file_->get_int("flag"), 1);
  EXPECT_DOUBLE_EQ(file_->get_float("f32"), 0.25);
  EXPECT_DOUBLE_EQ(file_->get_float("i32"), -5.0);
  EXPECT_TRUE(file_->get_bool("flag"));
  EXPECT_EQ(file_->get_string_array("strings"), (std::vector<std::string>{"a", "b"}));
  EXPECT_EQ(file_->get_int_array("ints"), (std::vector<int64_t>{3, -4}));
  EXPECT_EQ(file_->get_int_array("u16s"), (std::vector<int64_t>{9}));
  EXPECT_EQ(file_->get_float_array("floats"), (std::vector<float>{1.5f, -2.0f}));
  EXPECT_EQ(file_->get_float_array("ints"), (std::vector<float>{3.0f, -4.0f}));
  EXPECT_TRUE(file_->has("s"));
  EXPECT_FALSE(file_->has("nope"));
  ASSERT_NE(file_->find("u8"), nullptr);
  EXPECT_EQ(file_->find("u8")->type, GgufType::U8);
  EXPECT_EQ(file_->find("nope"), nullptr);
}

TEST_F(GgufGetters, Fallbacks) {
  EXPECT_EQ(file_->get_string("nope", "dflt"), "dflt");
  EXPECT_EQ(file_->get_int("nope", 42), 42);
  EXPECT_DOUBLE_EQ(file_->get_float("nope", 1e4), 1e4);
  EXPECT_FALSE(file_->get_bool("nope", false));
  EXPECT_EQ(file_->get_int("u8", 42), 7);  // present: the fallback is ignored
  EXPECT_ERROR_WITH(file_->get_int("f32", 1), "expected an integer");  // wrong type still throws
  EXPECT_ERROR_WITH(file_->get_string("u8", "x"), "expected a string");
}

TEST_F(GgufGetters, Errors) {
  EXPECT_ERROR_WITH(file_->get_int("x"), "model.gguf: missing metadata key 'x'");
  EXPECT_ERROR_WITH(file_->get_string_array("x"), "missing metadata key 'x'");
  EXPECT_ERROR_WITH(file_->get_int("f32"), "metadata key 'f32' is f32, expected an integer");
  EXPECT_ERROR_WITH(file_->get_int("u64.big"), "does not fit");
  EXPECT_ERROR_WITH(file_->get_float("s"), "expected a number");
  EXPECT_ERROR_WITH(file_->get_float("flag"), "expected a number");
  EXPECT_ERROR_WITH(file_->get_bool("u8"), "expected a bool");
  EXPECT_ERROR_WITH(file_->get_string("strings"), "is array of string");
  EXPECT_ERROR_WITH(file_->get_string_array("ints"), "expected an array of string");
  EXPECT_ERROR_WITH(file_->get_int_array("floats"), "expected an array of integers");
  EXPECT_ERROR_WITH(file_->get_int_array("s"), "expected an array of integers");
  EXPECT_ERROR_WITH(file_->get_float_array("strings"), "expected an array of numbers");
}

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

// ------------------------------------------------------------------------------------------
// open()

TEST(GgufOpen, ReportsFileProblems) {
  const TempDir dir;
  const std::string missing = dir.file("missing.gguf");
  EXPECT_ERROR_WITH(GgufFile::open(missing), missing + ": cannot open");
  EXPECT_ERROR_WITH(GgufFile::open(testing::TempDir()), "not a regular file");

  const std::string empty = dir.file("empty.gguf");
  std::ofstream(empty).close();
  EXPECT_ERROR_WITH(GgufFile::open(empty), empty + ": empty file");

  const std::string junk = dir.file("junk.gguf");
  std::ofstream(junk) << "this is not a model file at all";
  EXPECT_ERROR_WITH(GgufFile::open(junk), junk + ": not a GGUF file");
}

}  // namespace
}  // namespace parspec
