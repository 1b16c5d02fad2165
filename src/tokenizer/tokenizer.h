#pragma once
// Text <-> token ids for the vocabularies GGUF files carry:
//  - "gpt2": byte-level BPE (Llama 3, Qwen2): special tokens split out, then the
//    pre-tokenizer regex of `tokenizer.ggml.pre`, then rank-ordered merges over
//    GPT-2's byte-to-unicode mapping;
//  - "llama": SentencePiece BPE (Llama 2): spaces as U+2581 with a leading one,
//    score-ordered merges, byte fallback to <0xNN> tokens.
// Invalid UTF-8 in the input never fails: byte-level BPE encodes each invalid
// byte as its byte token, SentencePiece as its <0xNN> token (or <unk> when the
// vocabulary has no byte tokens). Behaviour details: docs/tokenizer.md.
#include <array>
#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "tokenizer/merge_table.h"
#include "tokenizer/pretokenizer.h"

namespace parspec {

class GgufFile;

// SentencePiece's space: U+2581 LOWER ONE EIGHTH BLOCK.
inline constexpr std::string_view kSpmSpace = "\xE2\x96\x81";

// Values of `tokenizer.ggml.token_type`.
enum class TokenType : uint8_t {
  kUndefined = 0,
  kNormal = 1,
  kUnknown = 2,
  kControl = 3,
  kUserDefined = 4,
  kUnused = 5,
  kByte = 6,
};

enum class VocabKind {
  kBytePairGpt2,   // tokenizer.ggml.model = "gpt2"
  kSentencePiece,  // tokenizer.ggml.model = "llama"
};

class Tokenizer {
 public:
  // Reads the tokenizer.* metadata. Throws Error for a missing, unsupported or
  // inconsistent vocabulary (naming the key at fault).
  static std::unique_ptr<Tokenizer> from_gguf(const GgufFile& file);
  ~Tokenizer();

  // add_special: BOS (and EOS) as add_bos_token / add_eos_token say.
  // parse_special: text of control tokens such as "<|eot_id|>" becomes that
  // token; otherwise it is tokenized as plain text. User-defined tokens
  // (type 4) are always matched, as Hugging Face tokenizers do.
  std::vector<int32_t> encode(std::string_view text, bool add_special, bool parse_special) const;
  // encode()'s first `max_tokens` tokens (all of them when it has fewer): the
  // text is cut into chunks at word boundaries that no token crosses, and the
  // work stops once `max_tokens` are there, so memory and time grow with the
  // tokens kept rather than with the text (a caller that rejects prompts of
  // more than N tokens asks for N + 1). Chunks are exact for byte-level BPE and
  // for SentencePiece vocabularies whose tokens hold U+2581 only at their start
  // (all parspec has met); others are tokenized whole, as encode() does.
  std::vector<int32_t> encode_prefix(std::string_view text, bool add_special, bool parse_special,
                                     size_t max_tokens) const;
  // The most bytes of text one token stands for: N tokens never cover more
  // than N * max_token_bytes() bytes of text (a bound on what to read).
  size_t max_token_bytes() const { return max_token_bytes_; }

  // Concatenated bytes of the tokens, control tokens included as their text.
  // SentencePiece: the space encode() put in front of the text (and after
  // each special token) is removed again, so decode(encode(s)) == s.
  // Throws Error for an id outside the vocabulary.
  std::string decode(std::span<const int32_t> ids) const { return decode(ids, true); }
  // Same; with render_special = false, control/unknown/unused tokens add nothing.
  std::string decode(std::span<const int32_t> ids, bool render_special) const;

  // One token's bytes (special tokens as their text, SentencePiece "▁" as a
  // space, <0xNN> as that byte). May be part of a UTF-8 character.
  std::string token_text(int32_t id) const;
  // The token as stored in the vocabulary (for debugging output).
  const std::string& token_raw_text(int32_t id) const;
  TokenType token_type(int32_t id) const;
  // Whether decode() with render_special = false skips this token.
  bool is_special(int32_t id) const;

  int32_t n_vocab() const { return static_cast<int32_t>(raw_texts_.size()); }
  VocabKind kind() const { return kind_; }
  int32_t bos() const { return bos_; }
  int32_t eos() const { return eos_; }
  int32_t eot() const { return eot_; }  // -1 if none
  int32_t unk() const { return unk_; }  // -1 if none
  bool add_bos() const { return add_bos_; }
  bool add_eos() const { return add_eos_; }
  bool add_space_prefix() const { return add_space_prefix_; }
  // EOS, EOT, and the other end-of-turn tokens the vocabulary has.
  bool is_end_of_generation(int32_t id) const;
  // Id of a token by its exact stored text, -1 if absent.
  int32_t find_token(std::string_view raw_text) const;
  // e.g. "gpt2 byte-level BPE, 128256 tokens, 280147 merges, pre-tokenizer llama-bpe".
  std::string describe() const;

 private:
  Tokenizer();
  struct Special {
    std::string text;
    int32_t id;
    bool always;  // user-defined: matched even without parse_special
  };
  struct StringHash {
    using is_transparent = void;
    size_t operator()(std::string_view s) const { return std::hash<std::string_view>{}(s); }
  };
  using TextMap = std::unordered_map<std::string, int32_t, StringHash, std::equal_to<>>;

  void load_specials();
  void load_merges(const std::vector<std::string>& merges);
  void check_id(int32_t id) const;
  // Words up to this many bytes are merged by scanning, longer ones with a heap.
  static constexpr int32_t kShortWord = 32;
  // encode_prefix() cuts text into chunks of about this many bytes.
  static constexpr size_t kChunkBytes = size_t{64} << 10;
  struct BpeScratch;  // buffers reused across the words of one encode() call
  // encode() and encode_prefix(): `limit` tokens at most (SIZE_MAX: all),
  // `chunked` as encode_prefix() says.
  void encode_into(std::string_view text, bool add_special, bool parse_special, size_t limit,
                   bool chunked, std::vector<int32_t>& out) const;
  void encode_bpe_text(std::string_view text, BpeScratch& scratch, size_t limit, bool chunked,
                       std::vector<int32_t>& out) const;
  void encode_bpe_pieces(std::string_view text, size_t offset, std::span<const TextPiece> pieces,
                         BpeScratch& scratch, size_t limit, std::vector<int32_t>& out) const;
  void encode_bpe_word(std::string_view word, BpeScratch& scratch, std::vector<int32_t>& out) const;
  void encode_spm_chunks(std::string_view text, bool space_prefix, size_t limit, bool chunked,
                         std::vector<int32_t>& out) const;
  void encode_spm_text(std::string_view text, bool space_prefix, std::vector<int32_t>& out) const;
  void append_byte_fallback(std::string_view bytes, std::vector<int32_t>& out) const;

  VocabKind kind_ = VocabKind::kBytePairGpt2;
  PreTokenizer pre_ = PreTokenizer::kGpt2;
  std::string pre_name_;
  std::vector<std::string> raw_texts_;  // as stored in tokenizer.ggml.tokens
  std::vector<std::string> pieces_;     // decoded bytes of each token
  std::vector<TokenType> types_;
  std::vector<float> scores_;
  // Tokens that text can turn into, by decoded bytes (BPE) or stored text (SPM).
  TextMap lookup_;
  TextMap by_raw_text_;
  MergeTable merges_;
  std::array<int32_t, 256> byte_tokens_{};  // -1 where absent
  std::vector<Special> specials_;           // longest first
  std::array<std::vector<uint32_t>, 256> specials_by_first_byte_;
  std::shared_ptr<const RegexSplitter> splitter_;
  bool ignore_merges_ = false;  // Llama 3: a word that is a token is taken whole
  bool add_bos_ = false, add_eos_ = false, add_space_prefix_ = false;
  bool has_byte_fallback_ = false;
  // SentencePiece: no token holds U+2581 after another character, so a space
  // that follows a non-space is a cut no token crosses.
  bool spm_cuts_at_spaces_ = false;
  size_t max_token_bytes_ = 1;
  int32_t bos_ = -1, eos_ = -1, eot_ = -1, unk_ = -1;
  std::vector<int32_t> end_of_generation_;
};

}  // namespace parspec
