#pragma once
// Pre-tokenization of byte-level BPE vocabularies: the regular expression of
// the model's `tokenizer.ggml.pre` family cuts text into words that BPE merges
// never cross. Matching uses PCRE2 (UTF + UCP, so \p{L}, \p{N} and \s are
// Unicode-aware) and tolerates invalid UTF-8.
#include <cstddef>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

namespace parspec {

enum class PreTokenizer {
  kGpt2,     // "gpt-2", "gpt2"
  kLlama3,   // "llama-bpe", "llama3", "llama-v3", "smaug-bpe": digits in groups of up to 3
  kQwen2,    // "qwen2": like Llama 3 but every digit alone
  kDefault,  // "default" (or no name): llama.cpp's LLAMA_VOCAB_PRE_TYPE_DEFAULT, four
             // patterns in sequence (punctuation runs, GPT-2, digit runs, digit triples)
};

// nullopt for a name parspec does not know.
std::optional<PreTokenizer> pre_tokenizer_from_name(std::string_view name);
std::string_view pre_tokenizer_name(PreTokenizer pre);
// The patterns a family applies in sequence (one for all but kDefault).
std::span<const std::string_view> pre_tokenizer_regexes(PreTokenizer pre);
// The pattern of a one-pattern family; throws Error for kDefault.
std::string_view pre_tokenizer_regex(PreTokenizer pre);
// The accepted names, for error messages.
std::string_view known_pre_tokenizer_names();

// A piece of the input: bytes [begin, end). `matched` is false for bytes the
// pattern could not match, i.e. invalid UTF-8.
struct TextPiece {
  size_t begin = 0;
  size_t end = 0;
  bool matched = true;
};

class RegexSplitter {
 public:
  // Throws Error if the pattern does not compile.
  explicit RegexSplitter(std::string_view pattern);
  // Patterns applied in sequence as llama.cpp applies its lists: each splits
  // the pieces the one before made, and the text a pattern leaves between its
  // matches stays a piece for the next ones. patterns[covering] matches all
  // valid UTF-8, so what it leaves unmatched is invalid UTF-8.
  RegexSplitter(std::span<const std::string_view> patterns, size_t covering);
  // The compiled pattern of a family, shared by every tokenizer of the process
  // (compiling and JIT-compiling takes far longer than loading the rest).
  static std::shared_ptr<const RegexSplitter> for_family(PreTokenizer pre);
  ~RegexSplitter();
  RegexSplitter(const RegexSplitter&) = delete;
  RegexSplitter& operator=(const RegexSplitter&) = delete;

  // Cuts `text` into consecutive pieces that cover it exactly (appended to
  // `pieces`). Thread-safe: matching state is local to the call.
  void split(std::string_view text, std::vector<TextPiece>& pieces) const;

 private:
  struct Impl;
  // Appends the pieces pattern `index` cuts text[begin, end) into.
  void split_with(size_t index, std::string_view text, size_t begin, size_t end,
                  std::vector<TextPiece>& pieces) const;
  Impl* impl_;
};

}  // namespace parspec
