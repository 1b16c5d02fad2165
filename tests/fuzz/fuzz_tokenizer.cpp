// libFuzzer target for the tokenizer. The first input byte picks a vocabulary
// and the flags, the rest is the text:
//  - fixed vocabularies (Llama 3 / GPT-2 / Qwen2 style byte-level BPE with
//    trained merges and special tokens, SentencePiece with and without byte
//    fallback, the byte-only vocabulary of parspec's random models): encode,
//    then check that ids are in range, that decode(encode(s)) == s where the
//    format promises it, and that streaming decode yields only whole UTF-8;
//    the input bytes are also decoded as token ids;
//  - a vocabulary built from the input itself (tokens, types, merges, ids),
//    which must load or fail with parspec::Error, never crash.
// A violated property calls __builtin_trap so that libFuzzer reports it.
#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "core/error.h"
#include "tokenizer/stream_decoder.h"
#include "tokenizer/tokenizer.h"
#include "tokenizer/unicode.h"
#include "tokenizer/vocab_builder.h"

namespace {

using parspec::TokenType;
using parspec::VocabSpec;

void require(bool condition) {
  if (!condition) __builtin_trap();
}

const char* const kTrainingText =
    "The quick brown fox jumps over the lazy dog. It's 12:45, isn't it? We'll see 1234567 "
    "items.\n\n  Indented\tcode() { return x[i] + 0x1F; }\r\n日本語のテキスト 中文 "
    "😀👍🏽 "
    "naïve café Ελληνικά Русский текст e\xCC\x81 <|eot_id|> hello world hello there ";

VocabSpec byte_level_with_specials(const char* pre, parspec::PreTokenizer family) {
  VocabSpec spec = parspec::byte_level_vocab(pre);
  std::string corpus;
  for (int i = 0; i < 3; ++i) corpus += kTrainingText;
  parspec::train_byte_level_bpe(spec, corpus, family, 200);
  spec.bos = spec.add("<|begin_of_text|>", TokenType::kControl);
  spec.eos = spec.add("<|end_of_text|>", TokenType::kControl);
  spec.add("<|eot_id|>", TokenType::kControl);
  spec.add("<|eot_id|>x", TokenType::kControl);  // overlaps a shorter special token
  spec.add("<tool>", TokenType::kUserDefined);
  spec.add("<|unused|>", TokenType::kUnused);
  spec.add("hello world", TokenType::kNormal);  // a token no merge reaches
  return spec;
}

VocabSpec sentencepiece(bool byte_fallback) {
  VocabSpec spec;
  spec.model = "llama";
  spec.unk = spec.add("<unk>", TokenType::kUnknown);
  spec.bos = spec.add("<s>", TokenType::kControl);
  spec.eos = spec.add("</s>", TokenType::kControl);
  if (byte_fallback) {
    constexpr char kHex[] = "0123456789ABCDEF";
    for (int v = 0; v < 256; ++v)
      spec.add(std::string("<0x") + kHex[v >> 4] + kHex[v & 15] + ">", TokenType::kByte);
  }
  spec.add("[INST]", TokenType::kUserDefined);
  float score = -1.0f;
  for (const char* piece : {"\xE2\x96\x81",
                            "e",
                            "t",
                            "a",
                            "o",
                            "\xE2\x96\x81t",
                            "he",
                            "\xE2\x96\x81the",
                            "th",
                            "in",
                            "er",
                            "an",
                            "\xE2\x96\x81"
                            "a",
                            "re",
                            "on",
                            "\xE2\x96\x81th",
                            "at",
                            "en",
                            "nd",
                            "\xE2\x96\x81"
                            "and",
                            "\xE6\x97\xA5",
                            "\xE6\x9C\xAC",
                            "\xE6\x97\xA5\xE6\x9C\xAC",
                            "1",
                            "2",
                            "12",
                            "<",
                            ">",
                            "s"}) {
    spec.add(piece, TokenType::kNormal, score);
    score -= 0.5f;
  }
  return spec;
}

VocabSpec random_model_style() {
  VocabSpec spec = parspec::byte_level_vocab("default");
  spec.bos = spec.add("<s>", TokenType::kControl);
  spec.eos = spec.add("</s>", TokenType::kControl);
  for (int i = 0; i < 8; ++i) spec.add("<unused_" + std::to_string(i) + ">", TokenType::kUnused);
  spec.add_bos = true;
  return spec;
}

struct FixedVocab {
  std::unique_ptr<parspec::Tokenizer> tokenizer;
  bool lossless;  // decode(encode(s)) == s for every s (bar SentencePiece's U+2581)
};

const std::vector<FixedVocab>& fixed_vocabs() {
  static const std::vector<FixedVocab> vocabs = [] {
    std::vector<FixedVocab> v;
    v.push_back(
        {byte_level_with_specials("llama-bpe", parspec::PreTokenizer::kLlama3).build_tokenizer(),
         true});
    v.push_back(
        {byte_level_with_specials("gpt2", parspec::PreTokenizer::kGpt2).build_tokenizer(), true});
    v.push_back(
        {byte_level_with_specials("qwen2", parspec::PreTokenizer::kQwen2).build_tokenizer(), true});
    v.push_back({sentencepiece(true).build_tokenizer(), true});
    v.push_back({sentencepiece(false).build_tokenizer(), false});
    v.push_back({random_model_style().build_tokenizer(), true});
    return v;
  }();
  return vocabs;
}

void check_stream(const parspec::Tokenizer& tok, const std::vector<int32_t>& ids) {
  parspec::StreamDecoder stream(tok);
  std::string streamed;
  for (int32_t id : ids) {
    const std::string chunk = stream.feed(id);
    require(parspec::utf8::is_valid(chunk));
    streamed += chunk;
  }
  const std::string tail = stream.flush();
  require(parspec::utf8::is_valid(tail));
  streamed += tail;
  // SentencePiece: decode() drops the spaces encoding adds in front of text
  // (a stream, which continues a prompt, keeps them), so the texts may differ.
  if (tok.kind() == parspec::VocabKind::kSentencePiece) return;
  const std::string whole = tok.decode(ids, false);
  if (parspec::utf8::is_valid(whole)) require(streamed == whole);
}

void fuzz_fixed(const FixedVocab& vocab, uint8_t flags, std::string_view text) {
  const parspec::Tokenizer& tok = *vocab.tokenizer;
  const bool add_special = flags & 1, parse_special = flags & 2;
  const std::vector<int32_t> ids = tok.encode(text, add_special, parse_special);
  for (int32_t id : ids) require(id >= 0 && id < tok.n_vocab());
  const bool spm = tok.kind() == parspec::VocabKind::kSentencePiece;
  const bool has_spm_space = text.find("\xE2\x96\x81") != std::string_view::npos;
  // With special parsing, the text of the unknown token (<unk>) becomes that
  // token, as in llama.cpp, and decodes to something else.
  const bool has_unknown =
      tok.unk() >= 0 && std::find(ids.begin(), ids.end(), tok.unk()) != ids.end();
  if (vocab.lossless && !(spm && has_spm_space) && !has_unknown) {
    if (add_special) {
      require(tok.decode(ids, false) == text || parse_special);
      require(tok.decode(tok.encode(text, false, parse_special)) == text);
    } else {
      require(tok.decode(ids) == text);
    }
  }
  check_stream(tok, ids);

  // The input bytes as token ids, as a model could produce them.
  std::vector<int32_t> any_ids;
  for (size_t i = 0; i + 1 < text.size(); i += 2) {
    const auto id = static_cast<int32_t>((static_cast<uint8_t>(text[i]) << 8) |
                                         static_cast<uint8_t>(text[i + 1]));
    any_ids.push_back(id % tok.n_vocab());
  }
  (void)tok.decode(any_ids);
  check_stream(tok, any_ids);
  for (int32_t id : any_ids) (void)tok.is_end_of_generation(id);
}

// Token list, types, merges and ids taken from the input.
void fuzz_vocabulary(uint8_t flags, std::string_view data) {
  VocabSpec spec;
  const bool spm = flags & 1;
  spec.model = spm ? "llama" : "gpt2";
  constexpr const char* kPres[] = {"llama-bpe", "gpt2", "qwen2", "default"};
  spec.pre = kPres[(flags >> 1) & 3];
  if (!spm && (flags & 8)) {
    // Start from a complete byte alphabet so that loading usually succeeds.
    spec = parspec::byte_level_vocab(spec.pre);
  }
  // Tokens are separated by '\n'; the byte after a '\t' in a token sets its type.
  size_t start = 0;
  for (size_t i = 0; i <= data.size(); ++i) {
    if (i < data.size() && data[i] != '\n') continue;
    std::string token(data.substr(start, i - start));
    start = i + 1;
    TokenType type = TokenType::kNormal;
    if (const size_t tab = token.find('\t'); tab != std::string::npos && tab + 1 < token.size()) {
      type = static_cast<TokenType>(static_cast<uint8_t>(token[tab + 1]) % 7);
      token.resize(tab);
    }
    if (token.empty() || spec.tokens.size() > 2000) continue;
    spec.add(token, type, -static_cast<float>(spec.tokens.size()));
  }
  if (spec.tokens.empty()) return;
  const auto n = static_cast<int32_t>(spec.tokens.size());
  // Merges between consecutive tokens (when their concatenation may exist).
  for (int32_t i = 0; i + 1 < n && spec.merges.size() < 200; ++i)
    spec.merges.push_back(spec.tokens[i] + " " + spec.tokens[i + 1]);
  if (flags & 16) spec.bos = static_cast<int32_t>(data.size()) % (n + 2);
  if (flags & 32) spec.eos = static_cast<int32_t>(data.size() / 2) % (n + 2);
  if (flags & 64) spec.add_bos = true;
  try {
    const auto tok = spec.build_tokenizer();
    for (std::string_view text : {std::string_view(kTrainingText), data}) {
      const std::vector<int32_t> ids = tok->encode(text, flags & 64, flags & 128);
      for (int32_t id : ids) require(id >= 0 && id < tok->n_vocab());
      (void)tok->decode(ids);
      check_stream(*tok, ids);
    }
    (void)tok->describe();
  } catch (const parspec::Error&) {
    // Rejected vocabularies are fine; crashes and other exceptions are not.
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size == 0) return 0;
  const uint8_t selector = data[0];
  const std::string_view rest(reinterpret_cast<const char*>(data + 1), size - 1);
  const auto& vocabs = fixed_vocabs();
  const size_t which = selector % (vocabs.size() + 1);
  if (which == vocabs.size()) {
    if (rest.empty()) return 0;
    fuzz_vocabulary(static_cast<uint8_t>(rest[0]), rest.substr(1));
  } else {
    fuzz_fixed(vocabs[which], static_cast<uint8_t>(selector / (vocabs.size() + 1)), rest);
  }
  return 0;
}
