// Byte-level BPE: hand-built vocabularies with known merges, pre-tokenizer
// splits, special tokens, loading errors, invalid UTF-8 and round trips.
#include <gtest/gtest.h>

#include <algorithm>
#include <climits>
#include <cstdint>
#include <map>
#include <random>
#include <string>
#include <vector>

#include "core/error.h"
#include "model/gguf.h"
#include "tokenizer/pretokenizer.h"
#include "tokenizer/tokenizer.h"
#include "tokenizer/unicode.h"
#include "tokenizer/vocab_builder.h"

namespace parspec {
namespace {

using Ids = std::vector<int32_t>;

// Byte tokens have id = byte value in byte_level_vocab().
int32_t byte_id(char c) {
  return static_cast<unsigned char>(c);
}

Ids byte_ids(std::string_view text) {
  Ids ids;
  for (char c : text) ids.push_back(byte_id(c));
  return ids;
}

// Adds the merge "left right" and its result token; returns the result's id.
int32_t add_merge(VocabSpec& vocab, const std::string& left, const std::string& right) {
  vocab.merges.push_back(map_bytes(left) + " " + map_bytes(right));
  const std::string joined = map_bytes(left + right);
  const int32_t existing = vocab.find(joined);
  return existing >= 0 ? existing : vocab.add(joined);
}

std::vector<std::string> split(PreTokenizer pre, std::string_view text) {
  RegexSplitter splitter(pre_tokenizer_regex(pre));
  std::vector<TextPiece> pieces;
  splitter.split(text, pieces);
  std::vector<std::string> out;
  for (const auto& p : pieces) out.emplace_back(text.substr(p.begin, p.end - p.begin));
  return out;
}

using Pieces = std::vector<std::string>;

TEST(TokenizerUnicode, ByteMappingIsGpt2s) {
  EXPECT_EQ(map_bytes(" "), "\xC4\xA0");   // U+0120 'Ġ'
  EXPECT_EQ(map_bytes("\n"), "\xC4\x8A");  // U+010A 'Ċ'
  EXPECT_EQ(map_bytes("a!~"), "a!~");
  EXPECT_EQ(map_bytes("\xAD"), "\xC5\x83");  // soft hyphen is remapped: U+0143
  std::string all;
  for (int b = 0; b < 256; ++b) all += static_cast<char>(b);
  std::string back;
  ASSERT_TRUE(unmap_bytes(map_bytes(all), back));
  EXPECT_EQ(back, all);
  std::string junk;
  EXPECT_FALSE(unmap_bytes("\xE4\xBD\xA0", junk));  // U+4F60 is not part of the mapping
}

TEST(TokenizerUnicode, ClassifiesWellFormedAndIllFormedSequences) {
  EXPECT_TRUE(utf8::is_valid("a\xC3\xA9\xE4\xBD\xA0\xF0\x9F\x98\x80"));
  EXPECT_FALSE(utf8::is_valid("\xC0\xAF"));          // overlong
  EXPECT_FALSE(utf8::is_valid("\xED\xA0\x80"));      // surrogate
  EXPECT_FALSE(utf8::is_valid("\xF4\x90\x80\x80"));  // above U+10FFFF
  EXPECT_FALSE(utf8::is_valid("\xE4\xBD"));          // cut off
  const utf8::Seq cut = utf8::classify("\xF0\x9F\x98", 0);
  EXPECT_EQ(cut.kind, utf8::SeqKind::kIncomplete);
  EXPECT_EQ(cut.length, 3u);
  const utf8::Seq broken = utf8::classify(
      "\xE4\xBD"
      "a",
      0);
  EXPECT_EQ(broken.kind, utf8::SeqKind::kInvalid);
  EXPECT_EQ(broken.length, 2u);
}

TEST(TokenizerPreTokenizer, Llama3SplitsDigitsInThreesAndContractions) {
  EXPECT_EQ(split(PreTokenizer::kLlama3, "Hello world"), (Pieces{"Hello", " world"}));
  EXPECT_EQ(split(PreTokenizer::kLlama3, "12345"), (Pieces{"123", "45"}));
  EXPECT_EQ(split(PreTokenizer::kLlama3, "I'm don't WE'LL"),
            (Pieces{"I", "'m", " don", "'t", " WE", "'LL"}));
  EXPECT_EQ(split(PreTokenizer::kLlama3, "  x"), (Pieces{" ", " x"}));
  EXPECT_EQ(split(PreTokenizer::kLlama3, "a\n\nb"), (Pieces{"a", "\n\n", "b"}));
  EXPECT_EQ(split(PreTokenizer::kLlama3, "a\tb"), (Pieces{"a", "\tb"}));
  EXPECT_EQ(split(PreTokenizer::kLlama3, "ok!!!\n"), (Pieces{"ok", "!!!\n"}));
  EXPECT_EQ(split(PreTokenizer::kLlama3, "end   "), (Pieces{"end", "   "}));
  // \p{L} and \p{N} are Unicode-aware: CJK letters, accented letters, Arabic-Indic digits.
  EXPECT_EQ(split(PreTokenizer::kLlama3, "日本語123 café"), (Pieces{"日本語", "123", " café"}));
  EXPECT_EQ(split(PreTokenizer::kLlama3, "\xD9\xA1\xD9\xA2\xD9\xA3\xD9\xA4"),
            (Pieces{"\xD9\xA1\xD9\xA2\xD9\xA3", "\xD9\xA4"}));
  EXPECT_EQ(split(PreTokenizer::kLlama3, " 😀😀 x"), (Pieces{" 😀😀", " x"}));
}

TEST(TokenizerPreTokenizer, Qwen2SplitsEveryDigitAndGpt2NoDigit) {
  EXPECT_EQ(split(PreTokenizer::kQwen2, "x 2024"), (Pieces{"x", " ", "2", "0", "2", "4"}));
  EXPECT_EQ(split(PreTokenizer::kGpt2, "x 2024"), (Pieces{"x", " 2024"}));
  EXPECT_EQ(split(PreTokenizer::kGpt2, "I'm  fine\n\n"), (Pieces{"I", "'m", " ", " fine", "\n\n"}));
  // GPT-2's contractions are lower case only.
  EXPECT_EQ(split(PreTokenizer::kGpt2, "I'M"), (Pieces{"I", "'", "M"}));
}

TEST(TokenizerPreTokenizer, InvalidUtf8BecomesUnmatchedPieces) {
  RegexSplitter splitter(pre_tokenizer_regex(PreTokenizer::kLlama3));
  std::vector<TextPiece> pieces;
  const std::string text = "ab\xFF\xFE cd\xC3";
  splitter.split(text, pieces);
  ASSERT_EQ(pieces.size(), 4u);
  EXPECT_EQ(text.substr(pieces[0].begin, pieces[0].end - pieces[0].begin), "ab");
  EXPECT_TRUE(pieces[0].matched);
  EXPECT_EQ(text.substr(pieces[1].begin, pieces[1].end - pieces[1].begin), "\xFF\xFE");
  EXPECT_FALSE(pieces[1].matched);
  EXPECT_EQ(text.substr(pieces[2].begin, pieces[2].end - pieces[2].begin), " cd");
  EXPECT_EQ(text.substr(pieces[3].begin, pieces[3].end - pieces[3].begin), "\xC3");
  EXPECT_FALSE(pieces[3].matched);
}

TEST(TokenizerPreTokenizer, LongRunsDoNotFail) {
  // Runs far longer than any real word exercise PCRE2's JIT stack and backtracking.
  const std::string spaces(200000, ' ');
  EXPECT_EQ(split(PreTokenizer::kLlama3, spaces + "x"), (Pieces{spaces.substr(1), " x"}));
  const std::string letters(300000, 'a');
  EXPECT_EQ(split(PreTokenizer::kLlama3, letters), (Pieces{letters}));
  const std::string newlines(100000, '\n');
  EXPECT_EQ(split(PreTokenizer::kQwen2, " \t" + newlines), (Pieces{" \t" + newlines}));
}

// The vocabulary of the hand-derived examples: 256 bytes plus these merges.
struct HelloVocab {
  VocabSpec spec = byte_level_vocab("gpt2");
  int32_t he, ll, hell, hello, sp_w, orr, sp_wor, ld, sp_world;
  HelloVocab() {
    he = add_merge(spec, "h", "e");
    ll = add_merge(spec, "l", "l");
    hell = add_merge(spec, "he", "ll");
    hello = add_merge(spec, "hell", "o");
    sp_w = add_merge(spec, " ", "w");
    orr = add_merge(spec, "o", "r");
    sp_wor = add_merge(spec, " w", "or");
    ld = add_merge(spec, "l", "d");
    sp_world = add_merge(spec, " wor", "ld");
  }
};

TEST(TokenizerBpe, HandDerivedMerges) {
  HelloVocab v;
  const auto tok = v.spec.build_tokenizer();
  EXPECT_EQ(tok->kind(), VocabKind::kBytePairGpt2);
  EXPECT_EQ(tok->n_vocab(), 256 + 9);
  // "hello": h e l l o -> he l l o -> he ll o -> hell o -> hello.
  // " world": Ġw, or, ld (ranks 4, 5, 7) then Ġwor, then Ġworld.
  EXPECT_EQ(tok->encode("hello world", false, false), (Ids{v.hello, v.sp_world}));
  // "hellowor" is one word: hello, then w o r -> w or ("Ġw" needs a space).
  EXPECT_EQ(tok->encode("hellowor", false, false), (Ids{v.hello, byte_id('w'), v.orr}));
  // "shell": s h e l l -> s he ll -> s hell.
  EXPECT_EQ(tok->encode("shell", false, false), (Ids{byte_id('s'), v.hell}));
  // Words are merged separately: no merge crosses "hel|lo" split by a space.
  EXPECT_EQ(tok->encode("hel lo", false, false),
            (Ids{v.he, byte_id('l'), byte_id(' '), byte_id('l'), byte_id('o')}));
  EXPECT_EQ(tok->decode(Ids{v.hello, v.sp_world}), "hello world");
  EXPECT_EQ(tok->token_text(v.sp_world), " world");
  EXPECT_NE(tok->describe().find("gpt2 byte-level BPE, 265 tokens, 9 merges, pre-tokenizer gpt2"),
            std::string::npos)
      << tok->describe();
}

TEST(TokenizerBpe, LowerRankMergesFirstAndTiesGoLeftmost) {
  VocabSpec spec = byte_level_vocab("gpt2");
  const int32_t bc = add_merge(spec, "b", "c");  // rank 0
  const int32_t ab = add_merge(spec, "a", "b");  // rank 1
  const int32_t aa = add_merge(spec, "a", "a");  // rank 2
  const auto tok = spec.build_tokenizer();
  EXPECT_EQ(tok->encode("abc", false, false), (Ids{byte_id('a'), bc}));
  EXPECT_EQ(tok->encode("abd", false, false), (Ids{ab, byte_id('d')}));
  EXPECT_EQ(tok->encode("aaa", false, false), (Ids{aa, byte_id('a')}));
  EXPECT_EQ(tok->encode("aaaaa", false, false), (Ids{aa, aa, byte_id('a')}));

  VocabSpec swapped = byte_level_vocab("gpt2");
  const int32_t ab2 = add_merge(swapped, "a", "b");  // now rank 0
  add_merge(swapped, "b", "c");
  EXPECT_EQ(swapped.build_tokenizer()->encode("abc", false, false), (Ids{ab2, byte_id('c')}));
}

TEST(TokenizerBpe, MergesThatCannotApplyAreIgnored) {
  VocabSpec spec = byte_level_vocab("gpt2");
  const int32_t xy = add_merge(spec, "x", "y");
  spec.merges.push_back("q zz");  // "zz" is no token
  const auto tok = spec.build_tokenizer();
  EXPECT_NE(tok->describe().find(", 1 merges,"), std::string::npos) << tok->describe();
  EXPECT_EQ(tok->encode("xyq", false, false), (Ids{xy, byte_id('q')}));
}

TEST(TokenizerBpe, Llama3TakesWholeWordTokensWithoutMerging) {
  // "hello" is a token but no merge leads to it: Llama 3 (ignore_merges) still
  // uses it; the GPT-2 family has to spell the word out.
  VocabSpec spec = byte_level_vocab("llama-bpe");
  const int32_t hello = spec.add(map_bytes("hello"));
  const int32_t sp_hi = spec.add(map_bytes(" hi"));
  const auto llama3 = spec.build_tokenizer();
  EXPECT_EQ(llama3->encode("hello hi his", false, false),
            (Ids{hello, sp_hi, byte_id(' '), byte_id('h'), byte_id('i'), byte_id('s')}));
  spec.pre = "gpt2";
  EXPECT_EQ(spec.build_tokenizer()->encode("hello", false, false), byte_ids("hello"));
}

TEST(TokenizerBpe, DigitGroupingFollowsThePreTokenizer) {
  // With a "123" token, Llama 3 groups digits in threes, Qwen2 never merges them.
  for (const char* pre : {"llama-bpe", "qwen2"}) {
    VocabSpec spec = byte_level_vocab(pre);
    const int32_t d12 = add_merge(spec, "1", "2");
    const int32_t d123 = add_merge(spec, "12", "3");
    const auto tok = spec.build_tokenizer();
    const Ids ids = tok->encode("1231234", false, false);
    if (std::string(pre) == "qwen2") {
      EXPECT_EQ(ids, byte_ids("1231234"));
    } else {
      EXPECT_EQ(ids, (Ids{d123, d123, byte_id('4')}));
    }
    EXPECT_EQ(tok->encode("12", false, false).size(), std::string(pre) == "qwen2" ? 2u : 1u);
    (void)d12;
  }
}

// Textbook BPE: merge the lowest-ranked adjacent pair (leftmost on ties) until
// none is left, on strings. The reference for the tokenizer's two strategies.
std::vector<std::string> reference_bpe(const std::string& word, const VocabSpec& spec) {
  std::map<std::pair<std::string, std::string>, size_t> rank;
  for (size_t r = 0; r < spec.merges.size(); ++r) {
    const std::string& m = spec.merges[r];
    const size_t space = m.find(' ', 1);
    std::string left, right;
    EXPECT_TRUE(unmap_bytes(m.substr(0, space), left));
    EXPECT_TRUE(unmap_bytes(m.substr(space + 1), right));
    rank.emplace(std::make_pair(left, right), r);
  }
  std::vector<std::string> symbols;
  for (char c : word) symbols.emplace_back(1, c);
  for (;;) {
    size_t best = SIZE_MAX, best_rank = SIZE_MAX;
    for (size_t i = 0; i + 1 < symbols.size(); ++i) {
      const auto it = rank.find({symbols[i], symbols[i + 1]});
      if (it != rank.end() && it->second < best_rank) {
        best_rank = it->second;
        best = i;
      }
    }
    if (best == SIZE_MAX) return symbols;
    symbols[best] += symbols[best + 1];
    symbols.erase(symbols.begin() + best + 1);
  }
}

TEST(TokenizerBpe, ShortAndLongWordsMatchTextbookBpe) {
  // Words up to 32 bytes are merged by scanning, longer ones with a heap.
  VocabSpec spec = byte_level_vocab("gpt2");
  std::mt19937 rng(42);
  std::string corpus;
  for (int i = 0; i < 3000; ++i) {
    corpus += static_cast<char>('a' + rng() % 4);
    if (rng() % 9 == 0) corpus += ' ';
  }
  train_byte_level_bpe(spec, corpus, PreTokenizer::kGpt2, 150);
  ASSERT_GE(spec.merges.size(), 100u);
  const auto tok = spec.build_tokenizer();
  for (int trial = 0; trial < 300; ++trial) {
    std::string word;
    const size_t length = 2 + rng() % (trial < 150 ? 31 : 200);
    for (size_t i = 0; i < length; ++i) word += static_cast<char>('a' + rng() % 4);
    Ids expected;
    for (const std::string& symbol : reference_bpe(word, spec))
      expected.push_back(tok->find_token(map_bytes(symbol)));
    ASSERT_EQ(tok->encode(word, false, false), expected) << word;
  }
  // Hand-derived: merges a+b, c+d, ab+cd, a+a.
  VocabSpec hand = byte_level_vocab("gpt2");
  add_merge(hand, "a", "b");
  add_merge(hand, "c", "d");
  const int32_t abcd = add_merge(hand, "ab", "cd");
  const int32_t aa = add_merge(hand, "a", "a");
  const auto hand_tok = hand.build_tokenizer();
  std::string abcd10;
  for (int i = 0; i < 10; ++i) abcd10 += "abcd";
  EXPECT_EQ(hand_tok->encode(abcd10, false, false), Ids(10, abcd));
  EXPECT_EQ(hand_tok->encode("abcdabcd", false, false), Ids(2, abcd));
  Ids aa20(20, aa);
  aa20.push_back(byte_id('a'));
  EXPECT_EQ(hand_tok->encode(std::string(41, 'a'), false, false), aa20);
  EXPECT_EQ(hand_tok->encode("aaaaa", false, false), (Ids{aa, aa, byte_id('a')}));
}

// Words repeated within one text come from the per-call cache; they must be
// tokenized as when they appear alone.
TEST(TokenizerBpe, RepeatedWordsTokenizeAlike) {
  HelloVocab v;
  const auto tok = v.spec.build_tokenizer();
  // " hello" is Ġ + hello: no merge joins Ġ and h.
  EXPECT_EQ(tok->encode("hello hello hello", false, false),
            (Ids{v.hello, byte_id(' '), v.hello, byte_id(' '), v.hello}));
  EXPECT_EQ(tok->encode("shell<|x|>shell shell", false, true),
            (Ids{byte_id('s'), v.hell, byte_id('<'), byte_id('|'), byte_id('x'), byte_id('|'),
                 byte_id('>'), byte_id('s'), v.hell, byte_id(' '), byte_id('s'), v.hell}));
}

// A Llama 3 style vocabulary: bytes, a few merges, BOS/EOS/EOT control tokens
// and a user-defined token.
struct SpecialVocab {
  VocabSpec spec = byte_level_vocab("llama-bpe");
  int32_t bos, eot, eom, eos, user, reserved;
  SpecialVocab() {
    add_merge(spec, "h", "i");
    bos = spec.add("<|begin_of_text|>", TokenType::kControl);
    eos = spec.add("<|end_of_text|>", TokenType::kControl);
    eot = spec.add("<|eot_id|>", TokenType::kControl);
    eom = spec.add("<|eom_id|>", TokenType::kControl);
    reserved = spec.add("<|reserved_special_token_0|>", TokenType::kControl);
    user = spec.add("<tool>", TokenType::kUserDefined);
    spec.bos = bos;
    spec.eos = eos;
  }
};

TEST(TokenizerSpecial, ControlTokensAreParsedOnlyWhenAsked) {
  SpecialVocab v;
  const auto tok = v.spec.build_tokenizer();
  const int32_t hi = tok->find_token(map_bytes("hi"));
  ASSERT_GE(hi, 0);
  EXPECT_EQ(tok->encode("hi<|eot_id|>", false, true), (Ids{hi, v.eot}));
  EXPECT_EQ(tok->encode("<|eot_id|><|eot_id|>", false, true), (Ids{v.eot, v.eot}));
  // Raw user text: the look-alike is plain text.
  const Ids plain = tok->encode("hi<|eot_id|>", false, false);
  EXPECT_EQ(std::count(plain.begin(), plain.end(), v.eot), 0);
  EXPECT_EQ(tok->decode(plain), "hi<|eot_id|>");
  // An unfinished look-alike is text even when parsing special tokens.
  EXPECT_EQ(tok->decode(tok->encode("<|eot_id", false, true)), "<|eot_id");
  // User-defined tokens are matched in any case.
  EXPECT_EQ(tok->encode("<tool>", false, false), (Ids{v.user}));
  EXPECT_EQ(tok->decode(Ids{v.bos, hi, v.eot}), "<|begin_of_text|>hi<|eot_id|>");
  EXPECT_EQ(tok->decode(Ids{v.bos, hi, v.eot}, false), "hi");
  EXPECT_EQ(tok->token_text(v.eot), "<|eot_id|>");
}

TEST(TokenizerSpecial, BosAndEosFollowTheVocabulary) {
  SpecialVocab v;
  // llama-bpe adds BOS when add_bos_token is absent.
  auto tok = v.spec.build_tokenizer();
  EXPECT_TRUE(tok->add_bos());
  EXPECT_EQ(tok->encode("a", true, false), (Ids{v.bos, byte_id('a')}));
  EXPECT_EQ(tok->encode("a", false, false), (Ids{byte_id('a')}));
  EXPECT_EQ(tok->encode("", true, false), (Ids{v.bos}));
  v.spec.add_bos = false;
  v.spec.add_eos = true;
  tok = v.spec.build_tokenizer();
  EXPECT_EQ(tok->encode("a", true, false), (Ids{byte_id('a'), v.eos}));
  // Other byte-level families default to no BOS.
  VocabSpec qwen = byte_level_vocab("qwen2");
  qwen.bos = qwen.add("<|endoftext|>", TokenType::kControl);
  EXPECT_FALSE(qwen.build_tokenizer()->add_bos());
}

TEST(TokenizerSpecial, EndOfGenerationTokens) {
  SpecialVocab v;
  const auto tok = v.spec.build_tokenizer();
  EXPECT_EQ(tok->bos(), v.bos);
  EXPECT_EQ(tok->eos(), v.eos);
  EXPECT_EQ(tok->eot(), v.eot);  // found by its text
  EXPECT_TRUE(tok->is_end_of_generation(v.eos));
  EXPECT_TRUE(tok->is_end_of_generation(v.eot));
  EXPECT_TRUE(tok->is_end_of_generation(v.eom));
  EXPECT_FALSE(tok->is_end_of_generation(v.bos));
  EXPECT_FALSE(tok->is_end_of_generation(v.reserved));
  EXPECT_FALSE(tok->is_end_of_generation(byte_id('a')));
  // An explicit eot_token_id wins.
  v.spec.eot = v.eom;
  EXPECT_EQ(v.spec.build_tokenizer()->eot(), v.eom);
  // No end-of-turn token at all.
  VocabSpec bare = byte_level_vocab();
  EXPECT_EQ(bare.build_tokenizer()->eot(), -1);
  EXPECT_EQ(bare.build_tokenizer()->eos(), -1);
}

TEST(TokenizerBpe, InvalidUtf8IsEncodedAsByteTokens) {
  HelloVocab v;
  const auto tok = v.spec.build_tokenizer();
  // The invalid bytes become their byte tokens; the text around them is
  // tokenized as usual.
  const std::string text = std::string("hello\xFF\xFE") + " world\xC3";
  EXPECT_EQ(tok->encode(text, false, false), (Ids{v.hello, 0xFF, 0xFE, v.sp_world, 0xC3}));
  EXPECT_EQ(tok->decode(tok->encode(text, false, false)), text);
  for (const std::string& bad :
       std::vector<std::string>{"\xC0\xAF", "\xED\xA0\x80x", "\xF4\x90\x80\x80", "\x80\x80",
                                "a\xE4\xBD", std::string("\0\xFF", 2)}) {
    EXPECT_EQ(tok->decode(tok->encode(bad, true, true)), bad);
  }
}

TEST(TokenizerBpe, RandomModelStyleVocabularyEncodesEveryByte) {
  // What parspec's random test models carry: bytes, BOS, EOS, unused fillers, no merges.
  VocabSpec spec = byte_level_vocab("default");
  spec.bos = spec.add("<s>", TokenType::kControl);
  spec.eos = spec.add("</s>", TokenType::kControl);
  for (int i = 0; i < 20; ++i) spec.add("<unused_" + std::to_string(i) + ">", TokenType::kUnused);
  spec.add_bos = true;
  const auto tok = spec.build_tokenizer();
  const std::string text = "héllo, 世界!\n\t\xFF";
  Ids expected{spec.bos};
  for (char c : text) expected.push_back(byte_id(c));
  EXPECT_EQ(tok->encode(text, true, true), expected);
  EXPECT_EQ(tok->decode(tok->encode(text, true, true), false), text);
  // Filler text is not a token of the text.
  EXPECT_EQ(tok->encode("<unused_3>", false, true), byte_ids("<unused_3>"));
  EXPECT_TRUE(tok->is_special(spec.find("<unused_3>")));
  EXPECT_EQ(tok->decode(Ids{spec.find("<unused_3>"), byte_id('a')}, false), "a");
}

TEST(TokenizerLoad, ClearErrorsForBadVocabularies) {
  const auto expect_error = [](const VocabSpec& spec, const std::string& needle) {
    try {
      spec.build_tokenizer();
      ADD_FAILURE() << "expected an error mentioning '" << needle << "'";
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find(needle), std::string::npos) << e.what();
    }
  };
  VocabSpec unknown_model = byte_level_vocab();
  unknown_model.model = "bert";
  expect_error(unknown_model, "unsupported tokenizer model 'bert'");
  VocabSpec unknown_pre = byte_level_vocab("deepseek-coder");
  expect_error(unknown_pre, "unsupported pre-tokenizer 'deepseek-coder'");
  VocabSpec bad_bos = byte_level_vocab();
  bad_bos.bos = 1000;
  expect_error(bad_bos, "tokenizer.ggml.bos_token_id = 1000 is outside the vocabulary");
  VocabSpec short_types = byte_level_vocab();
  short_types.token_types.pop_back();
  expect_error(short_types, "tokenizer.ggml.token_type has 255 entries for 256 tokens");
  VocabSpec bad_type = byte_level_vocab();
  bad_type.token_types[3] = 9;
  expect_error(bad_type, "tokenizer.ggml.token_type[3] = 9");
  VocabSpec missing_byte = byte_level_vocab();
  missing_byte.tokens[0x41] = "A_renamed";
  expect_error(missing_byte, "lacks the token for byte 0x41");
  VocabSpec bad_merge = byte_level_vocab();
  bad_merge.merges.push_back("ab");
  expect_error(bad_merge, "tokenizer.ggml.merges[0] = 'ab' is not two tokens");

  GgufWriter writer;
  writer.set("general.architecture", GgufValue::string("llama"));
  const std::vector<uint8_t> bytes = writer.to_bytes();
  const auto file = GgufFile::from_memory(bytes.data(), bytes.size(), "novocab.gguf");
  try {
    Tokenizer::from_gguf(*file);
    ADD_FAILURE() << "expected an error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("novocab.gguf: the file has no vocabulary"),
              std::string::npos)
        << e.what();
  }
}

TEST(TokenizerBpe, DecodeRejectsIdsOutsideTheVocabulary) {
  const auto tok = byte_level_vocab().build_tokenizer();
  EXPECT_THROW(tok->decode(Ids{1, 256}), Error);
  EXPECT_THROW(tok->token_text(-1), Error);
}

// Tricky strings for round trips; the special-token look-alikes are real
// special tokens of the vocabularies below.
const std::vector<std::string>& tricky_strings() {
  static const std::vector<std::string> strings = {
      "",
      "Hello, world!",
      "日本語のテキストと中文混合",
      "emoji 😀👍🏽 family 👨‍👩‍👧 flags 🇫🇷🇯🇵",
      "combining: e\xCC\x81 a\xCC\x8A\xCC\x81 Zalgo z\xCD\x91\xCD\x8B\xCC\x80",
      "digits 1 12 123 1234 12345 3.14159 1,000,000 ٣٤٥",
      "contractions: I'm you're he's we'll they've she'd can't DON'T",
      "whitespace:  two   three    four\t\ttabs \t mixed",
      "newlines\n\nblank\r\nCRLF\n \n  trailing   \n",
      "   leading spaces",
      "trailing spaces   ",
      "\n",
      " ",
      "<|eot_id|> look-alike <|im_end|> <|eot_id <|begin_of_text|>",
      "<s>fake bos</s> and [INST] brackets [/INST]",
      "code: for (int i = 0; i < n; ++i) { x[i] += 0x1F; } // done",
      "URL https://example.com/a?b=c&d=e#f and email a.b@c.de",
      "mixed scripts: Ελληνικά Русский עברית العربية हिन्दी ไทย",
      "punctuation!!! ??? ... --- ((( ))) \"quotes\" 'single' `back`",
      "zero\xE2\x80\x8Bwidth\xE2\x80\x8Dspace \xEF\xBB\xBF BOM",
      std::string("nul\0byte", 8),
      "\xFF\xFE invalid \xC3 utf8 \xED\xA0\x80 \xC0\xAF end\xE4\xBD",
  };
  return strings;
}

std::string training_text() {
  std::string text;
  for (int i = 0; i < 4; ++i) {
    for (const auto& s : tricky_strings()) text += s + "\n";
    text +=
        "the quick brown fox jumps over the lazy dog. The Quick Brown Fox! hello world hello "
        "there, 1234567890 and 2024-01-01. it's what we'll do. 你好世界 こんにちは\n";
  }
  return text;
}

TEST(TokenizerRoundTrip, TrickyStringsAllByteLevelFamilies) {
  for (const char* pre : {"gpt2", "llama-bpe", "qwen2"}) {
    VocabSpec spec = byte_level_vocab(pre);
    train_byte_level_bpe(spec, training_text(), *pre_tokenizer_from_name(pre), 300);
    ASSERT_GT(spec.merges.size(), 100u) << pre;
    spec.bos = spec.add("<|begin_of_text|>", TokenType::kControl);
    spec.add("<|eot_id|>", TokenType::kControl);
    spec.add("<|im_end|>", TokenType::kControl);
    const auto tok = spec.build_tokenizer();
    for (const std::string& s : tricky_strings()) {
      for (bool parse_special : {false, true}) {
        const Ids ids = tok->encode(s, false, parse_special);
        EXPECT_EQ(tok->decode(ids), s) << pre << " parse_special=" << parse_special;
        for (int32_t id : ids) ASSERT_TRUE(id >= 0 && id < tok->n_vocab());
      }
      EXPECT_EQ(tok->decode(tok->encode(s, true, false), false), s) << pre;
    }
    // The merges are in use: ordinary text takes fewer tokens than bytes.
    const std::string sentence = "the quick brown fox jumps over the lazy dog";
    EXPECT_LT(tok->encode(sentence, false, false).size(), sentence.size() / 2) << pre;
  }
}

}  // namespace
}  // namespace parspec
