// Reading a vocabulary from GGUF metadata (tokens, types, scores, merges,
// special tokens), and decoding ids back to text. Encoding: tokenizer_encode.cpp.
#include "tokenizer/tokenizer.h"

#include <algorithm>
#include <climits>
#include <sstream>

#include "core/error.h"
#include "model/gguf.h"
#include "tokenizer/unicode.h"

namespace parspec {

namespace {

// Texts of end-of-turn tokens in the families we know; matched only against
// control tokens, so ordinary text never ends a generation.
constexpr std::string_view kEotTexts[] = {"<|eot_id|>",    "<|im_end|>",      "<|end|>",
                                          "<end_of_turn>", "<|end_of_turn|>", "<EOT>"};
constexpr std::string_view kEndOfGenerationTexts[] = {
    "<|eot_id|>",      "<|eom_id|>", "<|im_end|>",    "<|end|>",         "<end_of_turn>",
    "<|end_of_turn|>", "<EOT>",      "<|endoftext|>", "<|end_of_text|>", "</s>"};

bool is_special_type(TokenType type) {
  return type == TokenType::kControl || type == TokenType::kUnknown || type == TokenType::kUnused;
}

// Tokens that text can be tokenized into (merge results, lookups).
bool is_text_type(TokenType type) {
  return type == TokenType::kNormal || type == TokenType::kUndefined || type == TokenType::kByte;
}

// "<0xNN>" -> NN, or -1.
int parse_byte_token(std::string_view text) {
  if (text.size() != 6 || !text.starts_with("<0x") || text[5] != '>') return -1;
  int value = 0;
  for (size_t i = 3; i < 5; ++i) {
    const char c = text[i];
    int digit;
    if (c >= '0' && c <= '9') {
      digit = c - '0';
    } else if (c >= 'A' && c <= 'F') {
      digit = c - 'A' + 10;
    } else if (c >= 'a' && c <= 'f') {
      digit = c - 'a' + 10;
    } else {
      return -1;
    }
    value = value * 16 + digit;
  }
  return value;
}

std::string replace_all(std::string_view text, std::string_view from, std::string_view to) {
  std::string out;
  out.reserve(text.size());
  for (size_t pos = 0;;) {
    const size_t hit = text.find(from, pos);
    if (hit == std::string_view::npos) {
      out.append(text.substr(pos));
      return out;
    }
    out.append(text.substr(pos, hit - pos));
    out.append(to);
    pos = hit + from.size();
  }
}

VocabKind vocab_kind_of(const GgufFile& file) {
  const std::string& path = file.path();
  const std::string model = file.get_string("tokenizer.ggml.model", "");
  check(!model.empty(), path, ": the file has no vocabulary (tokenizer.ggml.model is missing)");
  if (model == "gpt2") return VocabKind::kBytePairGpt2;
  if (model == "llama") return VocabKind::kSentencePiece;
  fail(path, ": unsupported tokenizer model '", model,
       "' (tokenizer.ggml.model; parspec supports gpt2 and llama)");
}

// tokenizer.ggml.token_type, or kUndefined for every token when it is absent.
std::vector<TokenType> read_token_types(const GgufFile& file, size_t n) {
  const std::string& path = file.path();
  std::vector<TokenType> out(n, TokenType::kUndefined);
  if (!file.has("tokenizer.ggml.token_type")) return out;
  const std::vector<int64_t> types = file.get_int_array("tokenizer.ggml.token_type");
  check(types.size() == n, path, ": tokenizer.ggml.token_type has ", types.size(), " entries for ",
        n, " tokens");
  for (size_t i = 0; i < n; ++i) {
    check(types[i] >= 0 && types[i] <= 6, path, ": tokenizer.ggml.token_type[", i, "] = ", types[i],
          " is not a token type (0..6)");
    out[i] = static_cast<TokenType>(types[i]);
  }
  return out;
}

// tokenizer.ggml.scores, or zeros when it is absent.
std::vector<float> read_scores(const GgufFile& file, size_t n) {
  if (!file.has("tokenizer.ggml.scores")) return std::vector<float>(n, 0.0f);
  std::vector<float> scores = file.get_float_array("tokenizer.ggml.scores");
  check(scores.size() == n, file.path(), ": tokenizer.ggml.scores has ", scores.size(),
        " entries for ", n, " tokens");
  return scores;
}

struct SpecialIds {
  int32_t bos, eos, eot, eom, unk;  // -1 where none
};

// The special ids the file names, with the conventional fallbacks where it
// names none. `tok` must already resolve texts (find_token).
SpecialIds read_special_ids(const GgufFile& file, const Tokenizer& tok,
                            const std::vector<TokenType>& types, bool spm) {
  const std::string& path = file.path();
  const size_t n = types.size();
  const auto read_id = [&](const char* key, int32_t fallback) -> int32_t {
    if (!file.has(key)) return fallback;
    const int64_t id = file.get_int(key);
    check(id >= 0 && id < static_cast<int64_t>(n), path, ": ", key, " = ", id,
          " is outside the vocabulary (", n, " tokens)");
    return static_cast<int32_t>(id);
  };
  // SentencePiece files written without the ids use the conventional texts.
  const auto default_id = [&](std::string_view text) { return spm ? tok.find_token(text) : -1; };
  SpecialIds ids;
  ids.bos = read_id("tokenizer.ggml.bos_token_id", default_id("<s>"));
  ids.eos = read_id("tokenizer.ggml.eos_token_id", default_id("</s>"));
  ids.eot = read_id("tokenizer.ggml.eot_token_id", -1);
  ids.eom = read_id("tokenizer.ggml.eom_token_id", -1);
  ids.unk = read_id("tokenizer.ggml.unknown_token_id", -1);
  if (ids.unk < 0 && spm) {
    for (size_t i = 0; i < n && ids.unk < 0; ++i)
      if (types[i] == TokenType::kUnknown) ids.unk = static_cast<int32_t>(i);
    if (ids.unk < 0) ids.unk = tok.find_token("<unk>");
  }
  if (ids.eot < 0) {
    for (std::string_view text : kEotTexts) {
      const int32_t id = tok.find_token(text);
      if (id >= 0 && types[id] == TokenType::kControl) {
        ids.eot = id;
        break;
      }
    }
  }
  return ids;
}

void mark_named_specials(const SpecialIds& ids, std::vector<TokenType>& types) {
  for (int32_t id : {ids.bos, ids.eos, ids.eot, ids.eom})
    if (id >= 0) types[id] = TokenType::kControl;
  if (ids.unk >= 0) types[ids.unk] = TokenType::kUnknown;
}

// SentencePiece: whether any <0xNN> byte token exists. Bytes without a token
// fall back to <unk>: one of the two must cover every byte.
bool spm_byte_fallback(const std::array<int32_t, 256>& byte_tokens, int32_t unk,
                       const std::string& path) {
  const auto has_byte = [](int32_t id) { return id >= 0; };
  const bool any_bytes = std::any_of(byte_tokens.begin(), byte_tokens.end(), has_byte);
  const bool all_bytes = std::all_of(byte_tokens.begin(), byte_tokens.end(), has_byte);
  check(all_bytes || unk >= 0, path,
        ": SentencePiece vocabulary has neither all 256 <0xNN> byte tokens nor an unknown token");
  return any_bytes;
}

// Decoded bytes of one token; sets `byte` to its value for a <0xNN> byte token, else -1.
std::string decode_piece(const std::string& raw, TokenType type, bool spm, bool has_types,
                         int& byte) {
  byte = type == TokenType::kByte || (spm && !has_types) ? parse_byte_token(raw) : -1;
  if (byte >= 0) return std::string(1, static_cast<char>(byte));
  if (!is_text_type(type)) return raw;
  if (spm) return replace_all(raw, kSpmSpace, " ");
  std::string piece;
  if (!unmap_bytes(raw, piece)) piece = raw;  // not byte-level text; shown as stored
  return piece;
}

// A byte-level vocabulary must have a token for each of the 256 single bytes;
// `lookup` maps decoded bytes to token ids.
template <class TextMap>
void bind_byte_tokens(const TextMap& lookup, const std::string& path,
                      std::array<int32_t, 256>& byte_tokens) {
  for (int b = 0; b < 256; ++b) {
    const auto it = lookup.find(std::string(1, static_cast<char>(b)));
    check(it != lookup.end(), path, ": byte-level vocabulary lacks the token for byte 0x",
          "0123456789ABCDEF"[b >> 4], "0123456789ABCDEF"[b & 15], " ('",
          map_bytes(std::string(1, static_cast<char>(b))), "')");
    byte_tokens[b] = it->second;
  }
}

// Sorted, unique ids that end a generation: the named ids plus control tokens
// with a known end-of-turn text.
std::vector<int32_t> collect_end_of_generation(const Tokenizer& tok,
                                               const std::vector<TokenType>& types,
                                               std::initializer_list<int32_t> named) {
  std::vector<int32_t> out;
  for (int32_t id : named)
    if (id >= 0) out.push_back(id);
  for (std::string_view text : kEndOfGenerationTexts) {
    const int32_t id = tok.find_token(text);
    if (id >= 0 && types[id] == TokenType::kControl) out.push_back(id);
  }
  std::sort(out.begin(), out.end());
  out.erase(std::unique(out.begin(), out.end()), out.end());
  return out;
}

}  // namespace

Tokenizer::Tokenizer() {
  byte_tokens_.fill(-1);
}
Tokenizer::~Tokenizer() = default;

std::unique_ptr<Tokenizer> Tokenizer::from_gguf(const GgufFile& file) {
  const std::string& path = file.path();
  const VocabKind kind = vocab_kind_of(file);
  std::unique_ptr<Tokenizer> tok(new Tokenizer());
  tok->kind_ = kind;
  const bool spm = tok->kind_ == VocabKind::kSentencePiece;

  check(file.has("tokenizer.ggml.tokens"), path, ": tokenizer.ggml.tokens is missing");
  tok->raw_texts_ = file.get_string_array("tokenizer.ggml.tokens");
  const size_t n = tok->raw_texts_.size();
  check(n > 0, path, ": tokenizer.ggml.tokens is empty");
  check(n < static_cast<size_t>(INT32_MAX), path, ": tokenizer.ggml.tokens has too many entries");

  const bool has_types = file.has("tokenizer.ggml.token_type");
  tok->types_ = read_token_types(file, n);
  tok->scores_ = read_scores(file, n);

  for (size_t i = 0; i < n; ++i)
    tok->by_raw_text_.emplace(tok->raw_texts_[i], static_cast<int32_t>(i));

  const SpecialIds ids = read_special_ids(file, *tok, tok->types_, spm);
  tok->bos_ = ids.bos;
  tok->eos_ = ids.eos;
  tok->eot_ = ids.eot;
  tok->unk_ = ids.unk;
  // Without types, the ids named above are the only tokens known to be special.
  if (!has_types) mark_named_specials(ids, tok->types_);

  if (spm) {
    tok->add_space_prefix_ = file.get_bool("tokenizer.ggml.add_space_prefix", true);
  } else {
    tok->pre_name_ = file.get_string("tokenizer.ggml.pre", "default");
    const auto pre = pre_tokenizer_from_name(tok->pre_name_);
    check(pre.has_value(), path, ": unsupported pre-tokenizer '", tok->pre_name_,
          "' (tokenizer.ggml.pre; parspec knows ", known_pre_tokenizer_names(), ")");
    tok->pre_ = *pre;
    tok->ignore_merges_ = tok->pre_ == PreTokenizer::kLlama3;
    tok->splitter_ = RegexSplitter::for_family(tok->pre_);
  }
  // Defaults when the key is absent: Llama 2 and Llama 3 start with BOS, the
  // other byte-level families (GPT-2, Qwen2) do not.
  tok->add_bos_ =
      file.get_bool("tokenizer.ggml.add_bos_token", spm || tok->pre_ == PreTokenizer::kLlama3);
  tok->add_eos_ = file.get_bool("tokenizer.ggml.add_eos_token", false);

  // Decoded bytes of each token and the text -> token lookup.
  tok->pieces_.resize(n);
  for (size_t i = 0; i < n; ++i) {
    const std::string& raw = tok->raw_texts_[i];
    const TokenType type = tok->types_[i];
    int byte = -1;
    const std::string& piece = tok->pieces_[i] = decode_piece(raw, type, spm, has_types, byte);
    if (byte >= 0 && spm && tok->byte_tokens_[byte] < 0)
      tok->byte_tokens_[byte] = static_cast<int32_t>(i);
    // SentencePiece looks tokens up by their stored text; its <0xNN> tokens are
    // reached only through byte fallback, never by merging "<", "0", "x", ...
    if (is_text_type(type) && !(spm && byte >= 0))
      tok->lookup_.emplace(spm ? raw : piece, static_cast<int32_t>(i));
  }

  for (size_t i = 0; i < n; ++i)
    tok->max_token_bytes_ =
        std::max({tok->max_token_bytes_, tok->pieces_[i].size(), tok->raw_texts_[i].size()});
  // An unknown character is one <unk> (UTF-8: up to 4 bytes).
  tok->max_token_bytes_ = std::max<size_t>(tok->max_token_bytes_, 4);
  if (spm) {
    tok->spm_cuts_at_spaces_ = true;
    for (const auto& [text, id] : tok->lookup_) {
      size_t leading = 0;
      while (std::string_view(text).substr(leading).starts_with(kSpmSpace))
        leading += kSpmSpace.size();
      if (text.find(kSpmSpace, leading) != std::string::npos) tok->spm_cuts_at_spaces_ = false;
    }
  }

  if (spm) {
    tok->has_byte_fallback_ = spm_byte_fallback(tok->byte_tokens_, tok->unk_, path);
  } else {
    bind_byte_tokens(tok->lookup_, path, tok->byte_tokens_);
    if (file.has("tokenizer.ggml.merges"))
      tok->load_merges(file.get_string_array("tokenizer.ggml.merges"));
  }
  tok->load_specials();

  tok->end_of_generation_ =
      collect_end_of_generation(*tok, tok->types_, {tok->eos_, tok->eot_, ids.eom});
  return tok;
}

void Tokenizer::load_merges(const std::vector<std::string>& merges) {
  for (size_t rank = 0; rank < merges.size(); ++rank) {
    const std::string& merge = merges[rank];
    // The separator is the first space after the first character, as a token
    // of a byte-level vocabulary never contains a plain space.
    const size_t space = merge.find(' ', 1);
    check(space != std::string::npos && space + 1 < merge.size(), "tokenizer.ggml.merges[", rank,
          "] = '", merge, "' is not two tokens separated by a space");
    const std::string_view left(merge.data(), space);
    const std::string_view right(merge.data() + space + 1, merge.size() - space - 1);
    const int32_t left_id = find_token(left), right_id = find_token(right);
    std::string joined(left);
    joined += right;
    const int32_t result = find_token(joined);
    // A merge whose parts or result are not (text) tokens can never apply.
    if (left_id < 0 || right_id < 0 || result < 0) continue;
    if (!is_text_type(types_[left_id]) || !is_text_type(types_[right_id]) ||
        !is_text_type(types_[result]))
      continue;
    merges_.insert(left_id, right_id, {static_cast<int32_t>(rank), result});
  }
}

void Tokenizer::load_specials() {
  for (size_t i = 0; i < raw_texts_.size(); ++i) {
    const TokenType type = types_[i];
    // As llama.cpp: control, user-defined and unknown tokens (SentencePiece's
    // <unk>) are matched as whole tokens; only user-defined ones without
    // special parsing.
    if ((type != TokenType::kControl && type != TokenType::kUserDefined &&
         type != TokenType::kUnknown) ||
        raw_texts_[i].empty())
      continue;
    specials_.push_back({raw_texts_[i], static_cast<int32_t>(i), type == TokenType::kUserDefined});
  }
  // Longest first, so that a special token containing another one wins.
  std::stable_sort(specials_.begin(), specials_.end(), [](const Special& a, const Special& b) {
    return a.text.size() > b.text.size();
  });
  for (size_t i = 0; i < specials_.size(); ++i)
    specials_by_first_byte_[static_cast<unsigned char>(specials_[i].text[0])].push_back(
        static_cast<uint32_t>(i));
}

int32_t Tokenizer::find_token(std::string_view raw_text) const {
  const auto it = by_raw_text_.find(raw_text);
  return it == by_raw_text_.end() ? -1 : it->second;
}

void Tokenizer::check_id(int32_t id) const {
  check(id >= 0 && id < n_vocab(), "token id ", id, " is outside the vocabulary (", n_vocab(),
        " tokens)");
}

std::string Tokenizer::decode(std::span<const int32_t> ids, bool render_special) const {
  std::string out;
  // SentencePiece: undo the space encode() added at the start and after
  // special tokens.
  const bool spm_prefix = kind_ == VocabKind::kSentencePiece && add_space_prefix_;
  bool strip_space = spm_prefix;
  for (int32_t id : ids) {
    check_id(id);
    const TokenType type = types_[id];
    const std::string& piece = pieces_[id];
    if (is_special_type(type)) {
      if (render_special) out += piece;
      strip_space = type == TokenType::kControl && spm_prefix;
      continue;
    }
    if (strip_space && !piece.empty() && piece[0] == ' ') {
      out.append(piece, 1);
    } else {
      out += piece;
    }
    strip_space = type == TokenType::kUserDefined && spm_prefix;
  }
  return out;
}

std::string Tokenizer::token_text(int32_t id) const {
  check_id(id);
  return pieces_[id];
}

const std::string& Tokenizer::token_raw_text(int32_t id) const {
  check_id(id);
  return raw_texts_[id];
}

TokenType Tokenizer::token_type(int32_t id) const {
  check_id(id);
  return types_[id];
}

bool Tokenizer::is_special(int32_t id) const {
  return is_special_type(token_type(id));
}

bool Tokenizer::is_end_of_generation(int32_t id) const {
  return std::binary_search(end_of_generation_.begin(), end_of_generation_.end(), id);
}

std::string Tokenizer::describe() const {
  std::ostringstream os;
  if (kind_ == VocabKind::kBytePairGpt2) {
    os << "gpt2 byte-level BPE, " << n_vocab() << " tokens, " << merges_.size()
       << " merges, pre-tokenizer " << pre_name_;
  } else {
    os << "llama SentencePiece, " << n_vocab() << " tokens, "
       << (has_byte_fallback_ ? "byte fallback" : "no byte fallback");
  }
  return os.str();
}

}  // namespace parspec
