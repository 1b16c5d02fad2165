#pragma once
// Writing vocabularies into GGUF files: the tokenizer.* metadata of a token
// list, and a small byte-level BPE trainer. Used by tests, the fuzzer, the
// tokenizer benchmark and random-weight test models.
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "tokenizer/pretokenizer.h"
#include "tokenizer/tokenizer.h"

namespace parspec {

class GgufWriter;

// The tokenizer.* keys of a GGUF file. Empty lists and -1 ids are not written.
struct VocabSpec {
  std::string model = "gpt2";  // tokenizer.ggml.model
  std::string pre;             // tokenizer.ggml.pre (empty: not written)
  std::vector<std::string> tokens;
  std::vector<int32_t> token_types;
  std::vector<float> scores;
  std::vector<std::string> merges;
  int32_t bos = -1, eos = -1, eot = -1, unk = -1;
  std::optional<bool> add_bos, add_eos, add_space_prefix;
  std::string chat_template;

  // Appends a token (type and score lists are kept in step) and returns its id.
  int32_t add(std::string text, TokenType type = TokenType::kNormal, float score = 0.0f);
  int32_t find(std::string_view text) const;  // -1 if absent
  void write_to(GgufWriter& writer) const;
  // The tokenizer of a GGUF file holding just these keys (written and read
  // back in memory, so it goes through the same checks as a model file).
  std::unique_ptr<Tokenizer> build_tokenizer() const;
};

// A byte-level ("gpt2") vocabulary of the 256 byte tokens alone, token id =
// byte value, in GPT-2's mapped form; no merges.
VocabSpec byte_level_vocab(std::string pre = "default");

// Learns `n_merges` merges (fewer if no pair occurs twice any more) from
// `corpus` pre-tokenized by `pre`, appending the merged tokens and the merges to
// `vocab`, which must hold the 256 byte tokens of byte_level_vocab(). Ties
// between equally frequent pairs go to the pair of smaller ids.
void train_byte_level_bpe(VocabSpec& vocab, std::string_view corpus, PreTokenizer pre,
                          int n_merges);

}  // namespace parspec
