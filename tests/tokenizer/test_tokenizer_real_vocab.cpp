// The tokenizer on real vocabularies (Llama 3, Qwen 3, a Llama-2-style
// SentencePiece one) against llama.cpp's: the ids llama.cpp gives for the hard
// strings of tests/data/real_vocab_cases.json were recorded with
// scripts/record_llama_cpp_tokens.sh (llama.cpp's llama_tokenize on the same
// GGUF vocabularies) into tests/data/real_vocab_llama_cpp.json.
#include <gtest/gtest.h>

#include <cstdlib>
#include <ctime>
#include <fstream>
#include <iterator>
#include <nlohmann/json.hpp>

#include "real_vocab.h"
#include "tokenizer/unicode_classes.h"

namespace parspec {
namespace {

using testing_support::kRealVocabs;
using testing_support::RealVocab;

nlohmann::json read_json(const std::string& relative) {
  std::ifstream in(std::string(PARSPEC_SOURCE_DIR) + "/" + relative);
  return nlohmann::json::parse(in);
}

std::string escaped(const std::string& s) {
  return nlohmann::json(s).dump(-1, ' ', true);
}

class RealVocabTest : public ::testing::TestWithParam<RealVocab> {};

TEST_P(RealVocabTest, HardStringsTokenizeAsInLlamaCpp) {
  const RealVocab& v = GetParam();
  const std::string json_path = testing_support::real_vocab_json(v);
  if (json_path.empty())
    GTEST_SKIP() << v.package << " is not installed: run scripts/install-deps.sh";
  const auto tokenizer = testing_support::vocab_from_tokenizer_json(v, json_path).build_tokenizer();
  const nlohmann::json cases = read_json("tests/data/real_vocab_cases.json").at("cases");
  const nlohmann::json expected =
      read_json("tests/data/real_vocab_llama_cpp.json").at("vocabs").at(v.name);
  ASSERT_EQ(expected.at("parse_special").size(), cases.size()) << "re-run the record script";
  int mismatches = 0;
  for (bool parse_special : {true, false}) {
    const nlohmann::json& lists = expected.at(parse_special ? "parse_special" : "plain");
    for (size_t i = 0; i < cases.size(); ++i) {
      const std::string text = cases[i];
      const std::vector<int32_t> ids = tokenizer->encode(text, true, parse_special);
      const std::vector<int32_t> want = lists[i];
      if (ids != want && ++mismatches <= 10)
        ADD_FAILURE() << v.name << (parse_special ? " (special parsing)" : "") << ": "
                      << escaped(text) << "\n  llama.cpp " << nlohmann::json(want).dump()
                      << "\n  parspec   " << nlohmann::json(ids).dump();
    }
  }
  EXPECT_EQ(mismatches, 0);
}

INSTANTIATE_TEST_SUITE_P(Vocabularies, RealVocabTest, ::testing::ValuesIn(kRealVocabs),
                         [](const auto& param_info) { return std::string(param_info.param.name); });

// Writes the GGUF vocabularies for scripts/record_llama_cpp_tokens.sh into
// $PARSPEC_VOCAB_OUT (run with --gtest_also_run_disabled_tests).
TEST(RealVocab, DISABLED_WriteGgufFiles) {
  const char* out = std::getenv("PARSPEC_VOCAB_OUT");
  ASSERT_NE(out, nullptr) << "set PARSPEC_VOCAB_OUT to a folder";
  for (const RealVocab& v : kRealVocabs) {
    const std::string json_path = testing_support::real_vocab_json(v);
    ASSERT_FALSE(json_path.empty()) << v.package << " is not installed";
    testing_support::write_vocab_gguf(testing_support::vocab_from_tokenizer_json(v, json_path),
                                      std::string(out) + "/vocab-" + v.name + ".gguf");
  }
}

// Encode speed on a real vocabulary, for docs/tokenizer.md (compare with
// scripts/llama_cpp_tokenize VOCAB --time on the same text): run with
// --gtest_also_run_disabled_tests, PARSPEC_BENCH_TEXT=FILE. Thread CPU time,
// best of 5, so that other processes on the machine count less.
TEST(RealVocab, DISABLED_EncodeThroughput) {
  const char* path = std::getenv("PARSPEC_BENCH_TEXT");
  ASSERT_NE(path, nullptr) << "set PARSPEC_BENCH_TEXT to a text file";
  std::ifstream in(path, std::ios::binary);
  const std::string text((std::istreambuf_iterator<char>(in)), {});
  for (const RealVocab& v : kRealVocabs) {
    const std::string json_path = testing_support::real_vocab_json(v);
    ASSERT_FALSE(json_path.empty()) << v.package << " is not installed";
    const auto tokenizer =
        testing_support::vocab_from_tokenizer_json(v, json_path).build_tokenizer();
    double best = 1e30;
    size_t n = 0;
    for (int rep = 0; rep < 5; ++rep) {
      timespec t0{}, t1{};
      clock_gettime(CLOCK_THREAD_CPUTIME_ID, &t0);
      n = tokenizer->encode(text, false, false).size();
      clock_gettime(CLOCK_THREAD_CPUTIME_ID, &t1);
      best = std::min(best, (t1.tv_sec - t0.tv_sec) + (t1.tv_nsec - t0.tv_nsec) * 1e-9);
    }
    std::printf("parspec %s: %zu bytes -> %zu tokens in %.3f s: %.2f MB/s\n", v.name, text.size(),
                n, best, text.size() / best / 1e6);
  }
}

// The class rewriting itself: llama.cpp's whitespace replaces PCRE2's \s, the
// Unicode 15 additions join \p{L} and \p{N}, inside brackets and outside.
TEST(UnicodeClasses, RewritesLettersDigitsAndWhitespace) {
  const std::string out = with_llama_cpp_classes(R"(\s+(?!\S)|[^\s\p{L}\p{N}]+|\p{N}{1,3}|\r\n)");
  EXPECT_EQ(out.find(R"(\s)"), std::string::npos) << out;
  EXPECT_EQ(out.find(R"(\S)"), std::string::npos) << out;
  EXPECT_NE(out.find(R"([^\t-\r\x{20})"), std::string::npos) << out;    // \S outside brackets
  EXPECT_NE(out.find(R"([\p{N}\x{11F50})"), std::string::npos) << out;  // \p{N} outside
  EXPECT_NE(out.find(R"(\p{L}\x{1123F})"), std::string::npos) << out;   // \p{L} inside
  EXPECT_EQ(out.find(R"(\x{180E})"), std::string::npos) << out;
  EXPECT_NE(out.find(R"(|\r\n)"), std::string::npos) << out;  // other escapes kept
}

}  // namespace
}  // namespace parspec
