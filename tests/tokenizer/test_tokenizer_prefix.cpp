// Tokenizer::encode_prefix: the first N tokens of encode(), found by cutting
// the text into chunks. The texts here are long (chunks are 64 KiB) and mix
// what makes a cut hard: long words and runs of spaces across it, digits,
// punctuation, contractions, non-Latin scripts, invalid UTF-8 and special
// tokens; every vocabulary family is checked, real ones where installed.
#include <gtest/gtest.h>

#include <cstdint>
#include <fstream>
#include <nlohmann/json.hpp>
#include <random>
#include <string>
#include <vector>

#include "real_vocab.h"
#include "tokenizer/pretokenizer.h"
#include "tokenizer/tokenizer.h"
#include "tokenizer/vocab_builder.h"

namespace parspec {
namespace {

using Ids = std::vector<int32_t>;

// About `bytes` bytes of text in which every kind of piece meets every other,
// with a few runs far longer than the cut margin and one word longer than a chunk.
std::string hard_long_text(size_t bytes, uint32_t seed, const std::vector<std::string>& extra) {
  std::vector<std::string> parts = {
      "the",   " quick",   " brown",     "Fox", "it's",     " we'll",      "DON'T",    "12345678",
      " 2024", "-01-01",   "!!!",        "...", " ?!",      "\n",          "\n\n",     "\r\n",
      "\t",    " ",        "  ",         "   ", "你好世界", " こんにちは", "é",        "👋🏽",
      "\xff",  "\xe4\xbd", "<|eot_id|>", "<s>", "\xc2\xa0", "x1",          "__init__", "a+b=c"};
  parts.insert(parts.end(), extra.begin(), extra.end());
  std::mt19937 rng(seed);
  std::string text;
  while (text.size() < bytes) {
    const uint32_t roll = rng() % 1000;
    if (roll == 0) {
      text += std::string(300 + rng() % 3000, ' ');  // a run of spaces
    } else if (roll == 1) {
      text += std::string(300 + rng() % 3000, 'a');  // a long word
    } else if (roll == 2) {
      text += std::string(500 + rng() % 500, '7');  // a long number
    } else {
      text += parts[rng() % parts.size()];
    }
  }
  // One word longer than a chunk, then more text after it.
  text.insert(text.size() / 2, std::string(150'000, 'b'));
  return text;
}

// encode_prefix(text, n) == the first n tokens of encode(text), for every n
// that matters: none, a few, cuts inside the text, all, more than all.
void expect_prefixes_of_encode(const Tokenizer& tok, const std::string& text,
                               const std::string& what) {
  for (bool parse_special : {false, true}) {
    const Ids all = tok.encode(text, true, parse_special);
    ASSERT_GT(all.size(), 1000u) << what;
    EXPECT_EQ(tok.encode_prefix(text, true, parse_special, SIZE_MAX), all)
        << what << ": cutting into chunks changed the tokens";
    for (size_t n : {size_t{0}, size_t{1}, size_t{2}, size_t{777}, all.size() / 3,
                     all.size() / 2 + 1, all.size() - 1, all.size(), all.size() + 10}) {
      const Ids prefix = tok.encode_prefix(text, true, parse_special, n);
      ASSERT_EQ(prefix.size(), std::min(n, all.size())) << what << " n=" << n;
      EXPECT_TRUE(std::equal(prefix.begin(), prefix.end(), all.begin()))
          << what << " n=" << n << " parse_special=" << parse_special;
    }
  }
}

TEST(TokenizerPrefix, ByteLevelFamilies) {
  std::string corpus;
  for (int i = 0; i < 8; ++i)
    corpus +=
        "the quick brown fox jumps over the lazy dog. The Quick Brown Fox! hello world hello "
        "there, 1234567890 and 2024-01-01. it's what we'll do. 你好世界 こんにちは\n    indented "
        "code(x) { return a+b; }\n";
  for (const char* pre : {"gpt2", "llama-bpe", "qwen2", "default"}) {
    VocabSpec spec = byte_level_vocab(pre);
    train_byte_level_bpe(spec, corpus, *pre_tokenizer_from_name(pre), 300);
    spec.bos = spec.add("<|begin_of_text|>", TokenType::kControl);
    spec.add("<|eot_id|>", TokenType::kControl);
    spec.add("    ", TokenType::kUserDefined);  // matched even without special parsing
    spec.add_bos = true;
    spec.add_eos = true;
    spec.eos = spec.add("<|end_of_text|>", TokenType::kControl);
    const auto tok = spec.build_tokenizer();
    expect_prefixes_of_encode(*tok, hard_long_text(300'000, 7, {"<|begin_of_text|>"}), pre);
  }
}

TEST(TokenizerPrefix, RealVocabularies) {
  int tested = 0;
  for (const testing_support::RealVocab& v : testing_support::kRealVocabs) {
    const std::string json_path = testing_support::real_vocab_json(v);
    if (json_path.empty()) continue;
    const auto tok = testing_support::vocab_from_tokenizer_json(v, json_path).build_tokenizer();
    std::ifstream in(std::string(PARSPEC_SOURCE_DIR) + "/tests/data/real_vocab_cases.json");
    const std::vector<std::string> cases = nlohmann::json::parse(in).at("cases");
    expect_prefixes_of_encode(*tok, hard_long_text(400'000, 11, cases), v.name);
    ++tested;
  }
  if (tested == 0) GTEST_SKIP() << "no real vocabulary installed: run scripts/install-deps.sh";
}

// A SentencePiece vocabulary with a token that holds U+2581 inside cannot be
// cut at spaces: encode_prefix tokenizes such text whole, still exactly.
TEST(TokenizerPrefix, SentencePieceWithSpacesInsideTokens) {
  VocabSpec spec;
  spec.model = "llama";
  spec.unk = spec.add("<unk>", TokenType::kUnknown);
  spec.bos = spec.add("<s>", TokenType::kControl);
  for (int b = 0; b < 256; ++b) {
    char name[8];
    std::snprintf(name, sizeof(name), "<0x%02X>", b);
    spec.add(name, TokenType::kByte);
  }
  float score = 0.0f;
  for (const char* piece : {"▁", "a", "b", "▁a", "▁b", "ab", "▁ab", "a▁b", "▁▁", "7", "77"})
    spec.add(piece, TokenType::kNormal, score -= 1.0f);
  const auto tok = spec.build_tokenizer();
  std::string text;
  for (int i = 0; i < 40'000; ++i) text += (i % 3 == 0) ? "a b " : (i % 3 == 1 ? "ab  " : "77 ");
  const Ids all = tok->encode(text, true, false);
  EXPECT_EQ(tok->encode_prefix(text, true, false, SIZE_MAX), all);
  const Ids some = tok->encode_prefix(text, true, false, 5000);
  EXPECT_TRUE(std::equal(some.begin(), some.end(), all.begin()));
}

// The point of the bound: a text of tens of MiB yields its first tokens
// without tokenizing the rest (tokenizing it whole would take seconds and
// hundreds of MiB), and they are encode()'s first tokens of the same text.
TEST(TokenizerPrefix, HugeTextStopsAtTheLimit) {
  VocabSpec spec = byte_level_vocab("llama-bpe");
  train_byte_level_bpe(spec, "hello world, hello there. hello world!\n", PreTokenizer::kLlama3, 40);
  const auto tok = spec.build_tokenizer();
  std::string text;
  while (text.size() < (size_t{48} << 20)) text += "hello world, hello there 12345. ";
  const Ids prefix = tok->encode_prefix(text, false, false, 4097);
  ASSERT_EQ(prefix.size(), 4097u);
  const Ids head = tok->encode(std::string_view(text).substr(0, 200'000), false, false);
  EXPECT_TRUE(std::equal(prefix.begin(), prefix.end(), head.begin()));
}

TEST(TokenizerPrefix, MaxTokenBytesBoundsTheText) {
  VocabSpec spec = byte_level_vocab("gpt2");
  spec.add("<|a-rather-long-control-token-text|>", TokenType::kControl);
  const auto tok = spec.build_tokenizer();
  EXPECT_EQ(tok->max_token_bytes(), std::string("<|a-rather-long-control-token-text|>").size());
}

}  // namespace
}  // namespace parspec
