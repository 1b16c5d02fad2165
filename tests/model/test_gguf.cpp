// GGUF reader/writer: round trips, typed getters, writer errors, opening files.
// Malformed input: test_gguf_malformed.cpp.
#include <fcntl.h>
#include <gtest/gtest.h>
#include <sys/mman.h>
#include <unistd.h>

#include <csignal>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <limits>
#include <random>

#include "core/error.h"
#include "model/gguf.h"
#include "model/gguf_test_bytes.h"
#include "test_helpers.h"

namespace parspec {
namespace {

using testing_support::TempDir;
using namespace gguf_test;

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

  // A file is read into memory unless the caller asks for a mapping; either way the same bytes.
  for (WeightLoading loading : {WeightLoading::kAuto, WeightLoading::kMap, WeightLoading::kCopy}) {
    const auto file = GgufFile::open(path, loading);
    EXPECT_EQ(file->copied(), loading != WeightLoading::kMap);
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

// Reads every byte of a tensor through a volatile pointer (a fault cannot be
// optimized away).
uint64_t sum_bytes(const GgufFile& file, const GgufTensorInfo& tensor) {
  const volatile uint8_t* data = file.tensor_data(tensor);
  uint64_t sum = 0;
  for (uint64_t i = 0; i < tensor.n_bytes; ++i) sum += data[i];
  return sum;
}

TEST(GgufOpen, FileTruncatedAfterOpen) {
  const TempDir dir;
  const auto bytes = small_valid_file();
  const auto reference = GgufFile::from_memory(bytes.data(), bytes.size());
  const GgufTensorInfo& last = reference->tensors().back();
  const uint64_t expected = sum_bytes(*reference, last);
  const std::string path = dir.file("shrinking.gguf");

  // Read into memory: the file on disk no longer matters.
  for (WeightLoading loading : {WeightLoading::kAuto, WeightLoading::kCopy}) {
    std::ofstream(path, std::ios::binary)
        .write(reinterpret_cast<const char*>(bytes.data()),
               static_cast<std::streamsize>(bytes.size()));
    const auto file = GgufFile::open(path, loading);
    std::filesystem::resize_file(path, 0);
    EXPECT_EQ(sum_bytes(*file, *file->find_tensor(last.name)), expected);
  }

  // Mapped: the lost pages end the process with a message naming the file.
  std::ofstream(path, std::ios::binary)
      .write(reinterpret_cast<const char*>(bytes.data()),
             static_cast<std::streamsize>(bytes.size()));
  const auto mapped = GgufFile::open(path, WeightLoading::kMap);
  std::filesystem::resize_file(path, 0);
  EXPECT_EXIT(sum_bytes(*mapped, *mapped->find_tensor(last.name)), testing::ExitedWithCode(1),
              path + ": the model file changed while in use");
}

// The handler claims only the pages of model files: a bus error anywhere else
// is still the signal it was (here a mapping of a truncated file no guard covers).
TEST(GgufOpen, OtherBusErrorsStayASignal) {
#if defined(__SANITIZE_ADDRESS__) || defined(__SANITIZE_THREAD__)
  GTEST_SKIP() << "a sanitizer's own handler turns an unclaimed SIGBUS into a report and exit 1";
#endif
  const TempDir dir;
  const auto bytes = small_valid_file();
  const std::string path = dir.file("guarded.gguf");
  std::ofstream(path, std::ios::binary)
      .write(reinterpret_cast<const char*>(bytes.data()),
             static_cast<std::streamsize>(bytes.size()));
  const auto guarded = GgufFile::open(path, WeightLoading::kMap);  // installs the handler
  const std::string other = dir.file("other.bin");
  std::ofstream(other) << std::string(8192, 'x');
  const int fd = ::open(other.c_str(), O_RDONLY);
  ASSERT_GE(fd, 0);
  void* mapping = mmap(nullptr, 8192, PROT_READ, MAP_PRIVATE, fd, 0);
  ::close(fd);
  ASSERT_NE(mapping, MAP_FAILED);
  std::filesystem::resize_file(other, 0);
  EXPECT_EXIT(
      {
        const volatile char* p = static_cast<const char*>(mapping);
        std::printf("%d", p[100]);
      },
      testing::KilledBySignal(SIGBUS), "");
  munmap(mapping, 8192);
}

}  // namespace
}  // namespace parspec
