#include "tokenizer/pretokenizer.h"

#define PCRE2_CODE_UNIT_WIDTH 8
#include <pcre2.h>

#include <memory>

#include "core/error.h"
#include "tokenizer/unicode.h"
#include "tokenizer/unicode_classes.h"

namespace parspec {

namespace {

// Patterns of the Hugging Face tokenizers these families were trained with.
// Contractions are spelled with explicit case classes rather than (?i), so that
// only ASCII letters match (Unicode case folding would also accept e.g. U+017F).
constexpr std::string_view kGpt2Regex =
    R"('s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+)";
constexpr std::string_view kLlama3Regex =
    R"((?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+)";
constexpr std::string_view kQwen2Regex =
    R"((?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+)";
// llama.cpp's list for "default" (llama-vocab.cpp, LLAMA_VOCAB_PRE_TYPE_DEFAULT):
// runs of punctuation and $+<=>^~| first, then GPT-2's pattern inside each
// piece, then digit runs, then ASCII digit triples. Index 1 covers all text.
constexpr std::string_view kDefaultRegexes[] = {
    R"([\p{P}\$\+<=>\^~\|]+)",
    kGpt2Regex,
    R"(\p{N}+)",
    R"([0-9][0-9][0-9])",
};
constexpr size_t kDefaultCovering = 1;

struct NameEntry {
  std::string_view name;
  PreTokenizer pre;
};
constexpr NameEntry kNames[] = {
    {"default", PreTokenizer::kDefault},  {"gpt2", PreTokenizer::kGpt2},
    {"gpt-2", PreTokenizer::kGpt2},       {"llama-bpe", PreTokenizer::kLlama3},
    {"llama3", PreTokenizer::kLlama3},    {"llama-v3", PreTokenizer::kLlama3},
    {"smaug-bpe", PreTokenizer::kLlama3}, {"qwen2", PreTokenizer::kQwen2},
};

std::string pcre2_message(int code) {
  PCRE2_UCHAR buffer[256];
  if (pcre2_get_error_message(code, buffer, sizeof buffer) < 0) return "unknown PCRE2 error";
  return reinterpret_cast<const char*>(buffer);
}

struct MatchDataDeleter {
  void operator()(pcre2_match_data* md) const { pcre2_match_data_free(md); }
};
struct MatchContextDeleter {
  void operator()(pcre2_match_context* ctx) const { pcre2_match_context_free(ctx); }
};
struct JitStackDeleter {
  void operator()(pcre2_jit_stack* stack) const { pcre2_jit_stack_free(stack); }
};

}  // namespace

std::optional<PreTokenizer> pre_tokenizer_from_name(std::string_view name) {
  for (const auto& entry : kNames)
    if (entry.name == name) return entry.pre;
  return std::nullopt;
}

std::string_view pre_tokenizer_name(PreTokenizer pre) {
  switch (pre) {
    case PreTokenizer::kGpt2:
      return "gpt-2";
    case PreTokenizer::kLlama3:
      return "llama-bpe";
    case PreTokenizer::kQwen2:
      return "qwen2";
    case PreTokenizer::kDefault:
      return "default";
  }
  return "?";
}

std::span<const std::string_view> pre_tokenizer_regexes(PreTokenizer pre) {
  static constexpr std::string_view kGpt2[] = {kGpt2Regex};
  static constexpr std::string_view kLlama3[] = {kLlama3Regex};
  static constexpr std::string_view kQwen2[] = {kQwen2Regex};
  switch (pre) {
    case PreTokenizer::kGpt2:
      return kGpt2;
    case PreTokenizer::kLlama3:
      return kLlama3;
    case PreTokenizer::kQwen2:
      return kQwen2;
    case PreTokenizer::kDefault:
      return kDefaultRegexes;
  }
  return kGpt2;
}

std::string_view pre_tokenizer_regex(PreTokenizer pre) {
  const auto patterns = pre_tokenizer_regexes(pre);
  check(patterns.size() == 1, "pre-tokenizer '", pre_tokenizer_name(pre), "' applies ",
        patterns.size(), " patterns in sequence, not one");
  return patterns[0];
}

std::string_view known_pre_tokenizer_names() {
  return "default, gpt2, gpt-2, llama-bpe, llama3, llama-v3, smaug-bpe, qwen2";
}

struct RegexSplitter::Impl {
  struct Pattern {
    pcre2_code* code = nullptr;
    bool jit = false;
  };
  std::vector<Pattern> patterns;
  size_t covering = 0;
  ~Impl() {
    for (Pattern& p : patterns) pcre2_code_free(p.code);
  }
};

RegexSplitter::RegexSplitter(std::string_view pattern)
    : RegexSplitter(std::span<const std::string_view>(&pattern, 1), 0) {}

RegexSplitter::RegexSplitter(std::span<const std::string_view> patterns, size_t covering)
    : impl_(new Impl) {
  impl_->covering = covering;
  for (std::string_view written : patterns) {
    // llama.cpp's letters, digits and whitespace rather than PCRE2's own tables.
    const std::string pattern = with_llama_cpp_classes(written);
    int error = 0;
    PCRE2_SIZE error_offset = 0;
    // MATCH_INVALID_UTF: invalid UTF-8 never matches (it shows up as a gap between
    // matches) instead of making every match fail with an error.
    pcre2_code* code = pcre2_compile(reinterpret_cast<PCRE2_SPTR>(pattern.data()), pattern.size(),
                                     PCRE2_UTF | PCRE2_UCP | PCRE2_MATCH_INVALID_UTF, &error,
                                     &error_offset, nullptr);
    if (!code) {
      delete impl_;
      fail("pre-tokenizer regex does not compile at offset ", error_offset, ": ",
           pcre2_message(error));
    }
    // Without JIT support PCRE2's interpreter gives the same results, only slower.
    const bool jit = pcre2_jit_compile(code, PCRE2_JIT_COMPLETE) == 0;
    impl_->patterns.push_back({code, jit});
  }
  if (impl_->patterns.empty() || covering >= impl_->patterns.size()) {
    delete impl_;
    fail("RegexSplitter: needs at least one pattern and a covering pattern among them");
  }
}

RegexSplitter::~RegexSplitter() {
  delete impl_;
}

std::shared_ptr<const RegexSplitter> RegexSplitter::for_family(PreTokenizer pre) {
  // Function-local statics: compiled once, on first use, thread-safely.
  switch (pre) {
    case PreTokenizer::kLlama3: {
      static const auto llama3 = std::make_shared<const RegexSplitter>(kLlama3Regex);
      return llama3;
    }
    case PreTokenizer::kQwen2: {
      static const auto qwen2 = std::make_shared<const RegexSplitter>(kQwen2Regex);
      return qwen2;
    }
    case PreTokenizer::kDefault: {
      static const auto fallback =
          std::make_shared<const RegexSplitter>(kDefaultRegexes, kDefaultCovering);
      return fallback;
    }
    case PreTokenizer::kGpt2:
      break;
  }
  static const auto gpt2 = std::make_shared<const RegexSplitter>(kGpt2Regex);
  return gpt2;
}

void RegexSplitter::split(std::string_view text, std::vector<TextPiece>& pieces) const {
  if (text.empty()) return;
  if (impl_->patterns.size() == 1) {
    split_with(0, text, 0, text.size(), pieces);
    return;
  }
  // Each pattern cuts the pieces of the one before; like llama.cpp, a pattern
  // sees only its piece (so a lookahead stops at the piece's end).
  std::vector<TextPiece> current{{0, text.size(), true}}, next;
  for (size_t index = 0; index < impl_->patterns.size(); ++index) {
    next.clear();
    for (const TextPiece& piece : current) {
      if (!piece.matched) {  // invalid UTF-8 stays as it is
        next.push_back(piece);
        continue;
      }
      const size_t first = next.size();
      split_with(index, text, piece.begin, piece.end, next);
      if (index != impl_->covering)
        for (size_t i = first; i < next.size(); ++i) next[i].matched = true;
    }
    current.swap(next);
  }
  pieces.insert(pieces.end(), current.begin(), current.end());
}

void RegexSplitter::split_with(size_t index, std::string_view whole, size_t piece_begin,
                               size_t piece_end, std::vector<TextPiece>& pieces) const {
  const Impl::Pattern& pattern = impl_->patterns[index];
  const std::string_view text = whole.substr(piece_begin, piece_end - piece_begin);
  const size_t first_piece = pieces.size();
  std::unique_ptr<pcre2_match_data, MatchDataDeleter> md(
      pcre2_match_data_create_from_pattern(pattern.code, nullptr));
  check(md != nullptr, "out of memory creating PCRE2 match data");
  // Created only if a match overflows the default 32 KiB JIT stack.
  std::unique_ptr<pcre2_match_context, MatchContextDeleter> big_stack_context;
  std::unique_ptr<pcre2_jit_stack, JitStackDeleter> big_stack;

  const auto subject = reinterpret_cast<PCRE2_SPTR>(text.data());
  const auto run = [&](size_t start, pcre2_match_context* context) {
    return pattern.jit
               ? pcre2_jit_match(pattern.code, subject, text.size(), start, 0, md.get(), context)
               : pcre2_match(pattern.code, subject, text.size(), start, 0, md.get(), context);
  };

  size_t pos = 0;
  while (pos < text.size()) {
    int rc = run(pos, nullptr);
    if (rc == PCRE2_ERROR_JIT_STACKLIMIT) {
      if (!big_stack) {
        big_stack.reset(pcre2_jit_stack_create(64 * 1024, 16 * 1024 * 1024, nullptr));
        big_stack_context.reset(pcre2_match_context_create(nullptr));
        if (big_stack && big_stack_context)
          pcre2_jit_stack_assign(big_stack_context.get(), nullptr, big_stack.get());
      }
      if (big_stack && big_stack_context) rc = run(pos, big_stack_context.get());
    }
    if (rc == PCRE2_ERROR_NOMATCH) {
      pieces.push_back({pos, text.size(), false});
      break;
    }
    if (rc < 0) {
      // A resource limit on a pathological input: take one character (or one
      // invalid byte) as its own piece and go on, rather than failing the encode.
      const size_t len = utf8::unit_length(text, pos);
      pieces.push_back(
          {pos, pos + len, utf8::classify(text, pos).kind == utf8::SeqKind::kComplete});
      pos += len;
      continue;
    }
    const PCRE2_SIZE* ovector = pcre2_get_ovector_pointer(md.get());
    const size_t begin = ovector[0], end = ovector[1];
    if (begin > pos) pieces.push_back({pos, begin, false});
    if (end > begin) {
      pieces.push_back({begin, end, true});
      pos = end;
    } else {
      // None of the supported patterns matches the empty string; guard anyway.
      const size_t len = utf8::unit_length(text, begin);
      pieces.push_back({begin, begin + len, true});
      pos = begin + len;
    }
  }
  for (size_t i = first_piece; i < pieces.size(); ++i) {
    pieces[i].begin += piece_begin;
    pieces[i].end += piece_begin;
  }
}

}  // namespace parspec
