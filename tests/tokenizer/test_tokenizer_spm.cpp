// SentencePiece ("llama") vocabularies: score-ordered merges, the leading-space
// convention, byte fallback, special tokens and round trips.
#include <gtest/gtest.h>

#include <algorithm>
#include <string>
#include <vector>

#include "core/error.h"
#include "tokenizer/tokenizer.h"
#include "tokenizer/vocab_builder.h"

namespace parspec {
namespace {

using Ids = std::vector<int32_t>;

constexpr int32_t kUnk = 0, kBos = 1, kEos = 2;
int32_t byte_token(unsigned char b) {
  return 3 + b;
}  // <0x00> is id 3

// Llama 2's layout: <unk>, <s>, </s>, the 256 byte tokens, then pieces.
struct SpmVocab {
  VocabSpec spec;
  int32_t space, a, b, c, ab, bc, sp_a, sp_ab, aa, hello, sp_hello;
  explicit SpmVocab(bool byte_fallback = true) {
    spec.model = "llama";
    spec.add("<unk>", TokenType::kUnknown);
    spec.add("<s>", TokenType::kControl);
    spec.add("</s>", TokenType::kControl);
    if (byte_fallback) {
      constexpr char kHex[] = "0123456789ABCDEF";
      for (int v = 0; v < 256; ++v)
        spec.add(std::string("<0x") + kHex[v >> 4] + kHex[v & 15] + ">", TokenType::kByte);
    }
    space = spec.add("\xE2\x96\x81", TokenType::kNormal, -10);
    a = spec.add("a", TokenType::kNormal, -10);
    b = spec.add("b", TokenType::kNormal, -10);
    c = spec.add("c", TokenType::kNormal, -10);
    ab = spec.add("ab", TokenType::kNormal, -1);
    bc = spec.add("bc", TokenType::kNormal, -2);
    sp_a = spec.add(
        "\xE2\x96\x81"
        "a",
        TokenType::kNormal, -3);
    sp_ab = spec.add(
        "\xE2\x96\x81"
        "ab",
        TokenType::kNormal, -0.5f);
    aa = spec.add("aa", TokenType::kNormal, -1);
    for (const char* ch : {"h", "e", "l", "o", "w", "r", "d", "x"})
      spec.add(ch, TokenType::kNormal, -10);
    spec.add("he", TokenType::kNormal, -4);
    spec.add("ll", TokenType::kNormal, -4);
    spec.add("hell", TokenType::kNormal, -5);
    hello = spec.add("hello", TokenType::kNormal, -6);
    sp_hello = spec.add(
        "\xE2\x96\x81"
        "hello",
        TokenType::kNormal, -7);
    spec.bos = kBos;
    spec.eos = kEos;
    spec.unk = kUnk;
  }
};

TEST(TokenizerSpm, HandDerivedScoreOrderedMerges) {
  SpmVocab v;
  const auto tok = v.spec.build_tokenizer();
  EXPECT_EQ(tok->kind(), VocabKind::kSentencePiece);
  // "abc" -> "▁abc": pairs ▁a(-3) ab(-1) bc(-2): ab first; then ▁ab(-0.5) beats nothing else.
  EXPECT_EQ(tok->encode("abc", false, false), (Ids{v.sp_ab, v.c}));
  // "cab" -> "▁cab": only ab merges; "▁c" and "cab" are no tokens.
  EXPECT_EQ(tok->encode("cab", false, false), (Ids{v.space, v.c, v.ab}));
  // "bca": bc(-2) is the only candidate, then ▁ stays alone.
  EXPECT_EQ(tok->encode("bca", false, false), (Ids{v.space, v.bc, v.a}));
  // "aaa": aa(-1) at positions 1 and 2 tie; the leftmost wins.
  EXPECT_EQ(tok->encode("aaa", false, false), (Ids{v.space, v.aa, v.a}));
  // Spaces are "▁": "a b" -> "▁a▁b" -> ▁a ▁ b.
  EXPECT_EQ(tok->encode("a b", false, false), (Ids{v.sp_a, v.space, v.b}));
  // "hello" -> ▁ h e l l o -> ▁ he ll o -> ▁ hell o -> ▁ hello -> ▁hello.
  EXPECT_EQ(tok->encode("hello", false, false), (Ids{v.sp_hello}));
  EXPECT_EQ(tok->encode("xhello", false, false), (Ids{v.space, tok->find_token("x"), v.hello}));
}

TEST(TokenizerSpm, ByteFallbackForUnknownCharacters) {
  SpmVocab v;
  const auto tok = v.spec.build_tokenizer();
  EXPECT_NE(tok->describe().find("llama SentencePiece"), std::string::npos);
  EXPECT_NE(tok->describe().find("byte fallback"), std::string::npos);
  // "é" is no piece: its two UTF-8 bytes become <0xC3> <0xA9>.
  EXPECT_EQ(tok->encode("é", false, false), (Ids{v.space, byte_token(0xC3), byte_token(0xA9)}));
  EXPECT_EQ(tok->encode("a😀", false, false),
            (Ids{v.sp_a, byte_token(0xF0), byte_token(0x9F), byte_token(0x98), byte_token(0x80)}));
  // Invalid UTF-8: each invalid byte on its own.
  EXPECT_EQ(tok->encode("a\xFF", false, false), (Ids{v.sp_a, byte_token(0xFF)}));
  EXPECT_EQ(tok->decode(Ids{v.space, byte_token(0xC3), byte_token(0xA9)}), "é");
  EXPECT_EQ(tok->token_text(byte_token(0x41)), "A");
  // Byte-token text in the input is plain text, never the byte token.
  const Ids ids = tok->encode("<0x41>", false, true);
  EXPECT_EQ(std::count(ids.begin(), ids.end(), byte_token(0x41)), 0);
  EXPECT_EQ(tok->decode(ids), "<0x41>");
}

TEST(TokenizerSpm, UnknownTokenWithoutByteFallback) {
  SpmVocab v(false);
  const auto tok = v.spec.build_tokenizer();
  EXPECT_NE(tok->describe().find("no byte fallback"), std::string::npos);
  // One <unk> per unknown character.
  EXPECT_EQ(tok->encode("aé😀", false, false), (Ids{v.sp_a, kUnk, kUnk}));
}

TEST(TokenizerSpm, LeadingSpaceConventionAndSpecialTokens) {
  SpmVocab v;
  const auto tok = v.spec.build_tokenizer();
  EXPECT_TRUE(tok->add_bos());  // SentencePiece default
  EXPECT_EQ(tok->encode("ab", true, false), (Ids{kBos, v.sp_ab}));
  // Decoding removes the space that encoding put in front.
  EXPECT_EQ(tok->decode(Ids{v.sp_ab}), "ab");
  EXPECT_EQ(tok->decode(Ids{kBos, v.sp_ab}), "<s>ab");
  EXPECT_EQ(tok->decode(Ids{kBos, v.sp_ab}, false), "ab");
  // A text that starts with a space keeps it.
  EXPECT_EQ(tok->encode(" ab", false, false), (Ids{v.space, v.sp_ab}));
  EXPECT_EQ(tok->decode(tok->encode(" ab", false, false)), " ab");
  // A text fragment after a special token gets its own leading space.
  EXPECT_EQ(tok->encode("ab</s>ab", false, true), (Ids{v.sp_ab, kEos, v.sp_ab}));
  EXPECT_EQ(tok->decode(Ids{v.sp_ab, kEos, v.sp_ab}), "ab</s>ab");
  EXPECT_EQ(tok->encode("ab</s>ab", false, false).size(), 6u);  // ▁ab < / s > ab
  // token_text keeps every space (a generated "▁ab" continues with " ab").
  EXPECT_EQ(tok->token_text(v.sp_ab), " ab");
  // Without the prefix convention nothing is added or removed.
  v.spec.add_space_prefix = false;
  const auto plain = v.spec.build_tokenizer();
  EXPECT_EQ(plain->encode("ab", false, false), (Ids{v.ab}));
  EXPECT_EQ(plain->decode(Ids{v.sp_ab}), " ab");
}

TEST(TokenizerSpm, RoundTripsTrickyStrings) {
  SpmVocab v;
  const auto tok = v.spec.build_tokenizer();
  const std::vector<std::string> strings = {"",
                                            " ",
                                            "  ",
                                            "ab cab  bca",
                                            "   leading",
                                            "trailing   ",
                                            "tabs\tand\nnewlines\r\n",
                                            "日本語 😀👍🏽 e\xCC\x81",
                                            "<s>look-alike</s> <unk>",
                                            "digits 12345",
                                            "it's",
                                            "\xFF\xFE \xC3 \xED\xA0\x80",
                                            std::string("nul\0", 4)};
  for (const std::string& s : strings) {
    for (bool parse_special : {false, true}) {
      const Ids ids = tok->encode(s, false, parse_special);
      EXPECT_EQ(tok->decode(ids), s) << "parse_special=" << parse_special;
    }
    EXPECT_EQ(tok->decode(tok->encode(s, true, false), false), s);
  }
}

TEST(TokenizerSpm, LoadErrors) {
  SpmVocab v(false);
  v.spec.token_types[kUnk] = static_cast<int32_t>(TokenType::kNormal);
  v.spec.tokens[kUnk] = "nothing";
  v.spec.unk = -1;
  try {
    v.spec.build_tokenizer();
    ADD_FAILURE() << "expected an error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("neither all 256 <0xNN> byte tokens nor an unknown token"),
              std::string::npos)
        << e.what();
  }
  // Some byte tokens but not all, and no <unk>: a byte could not be encoded.
  SpmVocab partial;
  partial.spec.tokens[kUnk] = "nothing";
  partial.spec.token_types[kUnk] = static_cast<int32_t>(TokenType::kNormal);
  partial.spec.unk = -1;
  partial.spec.tokens[byte_token(0x41)] = "<0x41x>";
  EXPECT_THROW(partial.spec.build_tokenizer(), Error);
  partial.spec.tokens[byte_token(0x41)] = "<0x41>";
  EXPECT_EQ(partial.spec.build_tokenizer()->encode("A", false, false),
            (Ids{partial.space, byte_token(0x41)}));
  SpmVocab short_scores;
  short_scores.spec.scores.resize(5);
  EXPECT_THROW(short_scores.spec.build_tokenizer(), Error);
}

}  // namespace
}  // namespace parspec
