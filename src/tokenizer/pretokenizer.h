#pragma once
// Pre-tokenization of byte-level BPE vocabularies: the regular expression of
// the model's `tokenizer.ggml.pre` family cuts text into words that BPE merges
// never cross. Matching uses PCRE2 (UTF + UCP, so \p{L}, \p{N} and \s are
// Unicode-aware) and tolerates invalid UTF-8.
#include <cstddef>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace parspec {

enum class PreTokenizer {
  kGpt2,    // "default", "gpt2", "gpt-2"
  kLlama3,  // "llama-bpe", "llama3", "llama-v3", "smaug-bpe": digits in groups of up to 3
  kQwen2,   // "qwen2": like Llama 3 but every digit alone
};

// nullopt for a name parspec does not know.
std::optional<PreTokenizer> pre_tokenizer_from_name(std::string_view name);
std::string_view pre_tokenizer_name(PreTokenizer pre);
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
  Impl* impl_;
};

}  // namespace parspec
