// `parspec tokenize` end to end: a vocabulary written to a GGUF file, the
// binary run on it, its output checked.
#include <gtest/gtest.h>

#include <cstdio>
#include <fstream>
#include <string>

#include "cli_helpers.h"
#include "model/gguf.h"
#include "test_helpers.h"
#include "tokenizer/tokenizer.h"
#include "tokenizer/unicode.h"
#include "tokenizer/vocab_builder.h"

namespace parspec {
namespace {

using testing_support::CommandResult;

// stdout and stderr together.
CommandResult run_parspec(const std::string& args) {
  return testing_support::run_parspec(args, true);
}

class TokenizeCommand : public ::testing::Test {
 protected:
  void SetUp() override {
    VocabSpec spec = byte_level_vocab("llama-bpe");
    spec.merges.push_back(map_bytes("h") + " " + map_bytes("i"));
    hi_ = spec.add(map_bytes("hi"));
    bos_ = spec.bos = spec.add("<|begin_of_text|>", TokenType::kControl);
    eot_ = spec.add("<|eot_id|>", TokenType::kControl);
    GgufWriter writer;
    writer.set("general.architecture", GgufValue::string("llama"));
    spec.write_to(writer);
    model_ = dir_.file("vocab.gguf");
    writer.write(model_);
  }
  testing_support::TempDir dir_;
  std::string model_;
  int32_t hi_ = -1, bos_ = -1, eot_ = -1;
};

TEST_F(TokenizeCommand, PrintsIdsAsOneList) {
  const CommandResult r = run_parspec("tokenize -m " + model_ + " -p 'hi there<|eot_id|>' --ids");
  ASSERT_EQ(r.exit_code, 0) << r.output;
  // BOS (llama-bpe adds it), "hi", then bytes of " there", then the parsed EOT.
  EXPECT_EQ(r.output, "[" + std::to_string(bos_) + ", " + std::to_string(hi_) +
                          ", 32, 116, 104, 101, 114, 101, " + std::to_string(eot_) + "]\n");
  const CommandResult no_bos = run_parspec("tokenize -m " + model_ + " -p hi --ids --no-bos");
  EXPECT_EQ(no_bos.output, "[" + std::to_string(hi_) + "]\n");
  const CommandResult plain =
      run_parspec("tokenize -m " + model_ + " -p '<|eot_id|>' --ids --no-bos --no-parse-special");
  EXPECT_EQ(plain.output.find(std::to_string(eot_)), std::string::npos) << plain.output;
}

TEST_F(TokenizeCommand, PrintsOneLinePerTokenFromAFile) {
  const std::string text_file = dir_.file("text.txt");
  std::ofstream(text_file, std::ios::binary) << "hi\n\xC3\xA9";
  const CommandResult r =
      run_parspec("tokenize -m " + model_ + " -f " + text_file + " --show-count");
  ASSERT_EQ(r.exit_code, 0) << r.output;
  // A token holding part of a UTF-8 character is shown as an escape.
  EXPECT_EQ(r.output, "   " + std::to_string(bos_) + " -> '<|begin_of_text|>'\n" + "   " +
                          std::to_string(hi_) +
                          " -> 'hi'\n"
                          "    10 -> '\\n'\n"
                          "   195 -> '\\xc3'\n"
                          "   169 -> '\\xa9'\n"
                          "Total number of tokens: 5\n");
}

TEST_F(TokenizeCommand, ReportsMissingArguments) {
  EXPECT_NE(run_parspec("tokenize -p hi").output.find("no model given"), std::string::npos);
  const CommandResult no_text = run_parspec("tokenize -m " + model_);
  EXPECT_NE(no_text.exit_code, 0);
  EXPECT_NE(no_text.output.find("no text given"), std::string::npos) << no_text.output;
  const CommandResult both = run_parspec("tokenize -m " + model_ + " -p a -f b");
  EXPECT_NE(both.output.find("either -p or -f"), std::string::npos) << both.output;
}

// The vocabulary of parspec's random-weight test models: every byte its own token.
TEST(TokenizerRandomModel, EncodesEveryByteAsItsToken) {
  testing_support::TempDir dir;
  RandomModelSpec spec;
  spec.n_vocab = 300;
  const std::string path = testing_support::write_model(dir, "random.gguf", spec);
  const auto file = GgufFile::open(path);
  const auto tok = Tokenizer::from_gguf(*file);
  EXPECT_EQ(tok->n_vocab(), 300);
  const std::string text = "héllo <s> wörld\n\xFF";
  std::vector<int32_t> expected{tok->bos()};
  for (char c : text) expected.push_back(static_cast<unsigned char>(c));
  EXPECT_EQ(tok->encode(text, true, false), expected);
  EXPECT_EQ(tok->decode(expected, false), text);
  EXPECT_TRUE(tok->is_end_of_generation(tok->eos()));
}

}  // namespace
}  // namespace parspec
