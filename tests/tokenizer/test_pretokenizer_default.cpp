// The "default" pre-tokenizer means what llama.cpp's LLAMA_VOCAB_PRE_TYPE_DEFAULT
// means (four patterns in sequence), and the zoo names its GPT-2 pattern the way
// llama.cpp does ("gpt-2"). Expected pieces below were checked against
// llama.cpp's llama-tokenize; where a llama.cpp build is available
// (LLAMA_CPP_DIR), the last test compares with it directly.
#include <gtest/gtest.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "core/error.h"
#include "model/gguf.h"
#include "test_helpers.h"
#include "tokenizer/pretokenizer.h"
#include "tokenizer/tokenizer.h"

namespace parspec {
namespace {

using Pieces = std::vector<std::string>;

Pieces split(PreTokenizer pre, const std::string& text, std::vector<bool>* matched = nullptr) {
  std::vector<TextPiece> pieces;
  RegexSplitter::for_family(pre)->split(text, pieces);
  Pieces out;
  size_t pos = 0;
  for (const TextPiece& p : pieces) {
    EXPECT_EQ(p.begin, pos) << "pieces must cover the text in order";
    pos = p.end;
    out.push_back(text.substr(p.begin, p.end - p.begin));
    if (matched) matched->push_back(p.matched);
  }
  EXPECT_EQ(pos, text.size());
  return out;
}

std::string zoo_path(const char* name) {
  return std::string(PARSPEC_SOURCE_DIR) + "/models/" + name;
}

TEST(PreTokenizerDefault, NamesFollowLlamaCpp) {
  EXPECT_EQ(pre_tokenizer_from_name("default"), PreTokenizer::kDefault);
  EXPECT_EQ(pre_tokenizer_from_name("gpt-2"), PreTokenizer::kGpt2);
  EXPECT_EQ(pre_tokenizer_from_name("gpt2"), PreTokenizer::kGpt2);
  EXPECT_EQ(pre_tokenizer_name(PreTokenizer::kGpt2), "gpt-2");
  EXPECT_EQ(pre_tokenizer_name(PreTokenizer::kDefault), "default");
  EXPECT_EQ(pre_tokenizer_regexes(PreTokenizer::kDefault).size(), 4u);
  EXPECT_EQ(pre_tokenizer_regexes(PreTokenizer::kGpt2).size(), 1u);
  EXPECT_THROW(pre_tokenizer_regex(PreTokenizer::kDefault), Error);
}

TEST(PreTokenizerDefault, SplitsLikeLlamaCpp) {
  // Punctuation runs are cut out first, digits go in runs and then in triples.
  EXPECT_EQ(split(PreTokenizer::kDefault, "  # 123 456"),
            (Pieces{"  ", "#", " ", "123", " ", "456"}));
  EXPECT_EQ(split(PreTokenizer::kGpt2, "  # 123 456"), (Pieces{" ", " #", " 123", " 456"}));
  EXPECT_EQ(split(PreTokenizer::kDefault, "x 2024"), (Pieces{"x", " ", "202", "4"}));
  EXPECT_EQ(split(PreTokenizer::kDefault, "12345678"), (Pieces{"123", "456", "78"}));
  // The apostrophe is punctuation: contractions are cut before GPT-2's pattern sees them.
  EXPECT_EQ(split(PreTokenizer::kDefault, "I'm fine, a+=b"),
            (Pieces{"I", "'", "m", " fine", ",", " a", "+=", "b"}));
  // $ + < = > ^ ~ | join punctuation runs; ` does not.
  EXPECT_EQ(split(PreTokenizer::kDefault, "a<=>b ~|$ `x`"),
            (Pieces{"a", "<=>", "b", " ", "~|$", " `", "x", "`"}));
  // Unicode punctuation and numbers (« » are Pi/Pf, ½ is No).
  EXPECT_EQ(split(PreTokenizer::kDefault, "«q» café ½"),
            (Pieces{"«", "q", "»", " café", " ", "½"}));
  // Whitespace before a cut stays whole: the lookahead stops at the piece end.
  EXPECT_EQ(split(PreTokenizer::kDefault, "f(x)  \n"), (Pieces{"f", "(", "x", ")", "  \n"}));
  EXPECT_TRUE(split(PreTokenizer::kDefault, "").empty());
}

TEST(PreTokenizerDefault, InvalidUtf8StaysUnmatched) {
  std::vector<bool> matched;
  EXPECT_EQ(split(PreTokenizer::kDefault, "a\xFF!b", &matched), (Pieces{"a", "\xFF", "!", "b"}));
  EXPECT_EQ(matched, (std::vector<bool>{true, false, true, true}));
}

// The zoo's tokenizer with another tokenizer.ggml.pre (metadata only).
std::unique_ptr<Tokenizer> zoo_tokenizer_named(const std::string& pre,
                                               std::vector<uint8_t>& bytes) {
  const auto zoo = GgufFile::open(zoo_path("target.gguf"));
  GgufWriter writer;
  for (const auto& [key, value] : zoo->metadata())
    if (key.starts_with("tokenizer.") || key == "general.architecture") writer.set(key, value);
  writer.set("tokenizer.ggml.pre", GgufValue::string(pre));
  bytes = writer.to_bytes();
  const auto file = GgufFile::from_memory(bytes.data(), bytes.size());
  return Tokenizer::from_gguf(*file);
}

TEST(PreTokenizerDefault, ZooNamesTheGpt2PatternAsLlamaCppDoes) {
  for (const char* name :
       {"target.gguf", "draft.gguf", "draft-code.gguf", "draft-prose.gguf", "draft-math.gguf"})
    EXPECT_EQ(GgufFile::open(zoo_path(name))->get_string("tokenizer.ggml.pre"), "gpt-2") << name;
  // Under "default" the zoo's vocabulary cuts the same text into other tokens.
  std::vector<uint8_t> gpt2_bytes, default_bytes;
  const auto gpt2 = zoo_tokenizer_named("gpt-2", gpt2_bytes);
  const auto fallback = zoo_tokenizer_named("default", default_bytes);
  const std::string text = "  # 123 456";
  EXPECT_NE(gpt2->encode(text, false, false), fallback->encode(text, false, false));
  // llama-tokenize --ids --no-bos on the zoo target as it was named before (pre "default").
  EXPECT_EQ(fallback->encode(text, false, false),
            (std::vector<int32_t>{256, 35, 32, 909, 51, 32, 1141, 54}));
}

std::string llama_tokenize_binary() {
  const char* dir = std::getenv("LLAMA_CPP_DIR");
  if (dir == nullptr) return "";
  for (const char* rel : {"/build/bin/llama-tokenize", "/bin/llama-tokenize"}) {
    const std::string path = std::string(dir) + rel;
    if (std::filesystem::exists(path)) return path;
  }
  return "";
}

std::vector<int32_t> llama_tokenize(const std::string& binary, const std::string& model,
                                    const std::string& text_path) {
  const std::string command = binary + " -m " + model + " -f " + text_path +
                              " --ids --no-bos --no-escape --no-parse-special --log-disable "
                              "2>/dev/null";
  FILE* pipe = popen(command.c_str(), "r");
  std::string out;
  char buf[4096];
  for (size_t n; pipe && (n = fread(buf, 1, sizeof buf, pipe)) > 0;) out.append(buf, n);
  if (pipe) pclose(pipe);
  const size_t last_line = out.find_last_of('[');
  if (last_line == std::string::npos) return {-1};
  return nlohmann::json::parse(out.substr(last_line)).get<std::vector<int32_t>>();
}

TEST(PreTokenizerDefault, MatchesLlamaCppWhereAvailable) {
  const std::string binary = llama_tokenize_binary();
  if (binary.empty()) GTEST_SKIP() << "set LLAMA_CPP_DIR to a llama.cpp build to compare";
  testing_support::TempDir dir;
  // The zoo's vocabulary under both names, as model files llama.cpp can load.
  const auto zoo = GgufFile::open(zoo_path("target.gguf"));
  std::vector<std::string> texts = {
      "  # 123 456",
      "def f(x):\n    return x**2 + 1  # square\n\n\n",
      "I'm sure they'll say it's 3.14159, isn't it? <tag attr=\"v\">$100</tag>",
      "«Ελληνικά» naïve café — ½ ² ٣٤٥ 日本語 😀 \t\r\n end",
      "a<=>b ~|$ `x` __init__ @decorator [1,2,3] {k: v}",
  };
  for (const char* set : {"code", "math", "prose", "config", "chat"}) {
    std::ifstream in(std::string(PARSPEC_SOURCE_DIR) + "/bench/prompts/" + set + ".jsonl");
    for (std::string line; std::getline(in, line);)
      if (!line.empty()) texts.push_back(nlohmann::json::parse(line).at("prompt"));
  }
  for (const char* pre : {"gpt-2", "default"}) {
    SCOPED_TRACE(pre);
    GgufWriter writer;
    for (const auto& [key, value] : zoo->metadata()) writer.set(key, value);
    writer.set("tokenizer.ggml.pre", GgufValue::string(pre));
    for (const GgufTensorInfo& t : zoo->tensors())
      writer.add_tensor(t.name, t.dims, t.type, zoo->tensor_data(t), t.n_bytes);
    const std::string model = dir.file(std::string(pre) + ".gguf");
    writer.write(model);
    const auto tokenizer = Tokenizer::from_gguf(*GgufFile::open(model));
    for (size_t i = 0; i < texts.size(); ++i) {
      const std::string path = dir.file("text.txt");
      std::ofstream(path, std::ios::binary) << texts[i];
      EXPECT_EQ(tokenizer->encode(texts[i], false, false), llama_tokenize(binary, model, path))
          << "text " << i << ": " << texts[i];
    }
  }
}

}  // namespace
}  // namespace parspec
