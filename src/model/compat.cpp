#include "model/compat.h"

#include <cstdio>
#include <sstream>

namespace parspec {

namespace {

std::string quoted(const std::string& text) {
  std::string out = "'";
  for (unsigned char c : text) {
    if (c < 0x20 || c == 0x7F) {
      char buf[8];
      std::snprintf(buf, sizeof buf, "\\x%02X", c);
      out += buf;
    } else {
      out += static_cast<char>(c);
    }
  }
  return out + "'";
}

}  // namespace

std::string draft_incompatibility(const GgufFile& target, const GgufFile& draft) {
  std::ostringstream why;
  const std::string both = " (target " + target.path() + ", draft " + draft.path() + ")";
  // Tokenizer type and pre-tokenizer: the same ids could come from other text.
  for (const char* key : {"tokenizer.ggml.model", "tokenizer.ggml.pre"}) {
    const std::string t = target.get_string(key, ""), d = draft.get_string(key, "");
    if (t != d) {
      why << key << " differs: target '" << t << "', draft '" << d << "'" << both;
      return why.str();
    }
  }
  // Special ids and whether they are added.
  for (const char* key : {"tokenizer.ggml.bos_token_id", "tokenizer.ggml.eos_token_id",
                          "tokenizer.ggml.add_bos_token", "tokenizer.ggml.add_eos_token"}) {
    const GgufValue* t = target.find(key);
    const GgufValue* d = draft.find(key);
    const int64_t tv = t ? target.get_int(key) : -1, dv = d ? draft.get_int(key) : -1;
    if ((t == nullptr) != (d == nullptr) || tv != dv) {
      why << key << " differs: target " << (t ? std::to_string(tv) : "unset") << ", draft "
          << (d ? std::to_string(dv) : "unset") << both;
      return why.str();
    }
  }
  const auto t_tokens = target.get_string_array("tokenizer.ggml.tokens");
  const auto d_tokens = draft.get_string_array("tokenizer.ggml.tokens");
  if (t_tokens.size() != d_tokens.size()) {
    why << "the vocabularies differ in size: target " << t_tokens.size() << " tokens, draft "
        << d_tokens.size() << both;
    return why.str();
  }
  for (size_t i = 0; i < t_tokens.size(); ++i) {
    if (t_tokens[i] == d_tokens[i]) continue;
    why << "token " << i << " differs: target " << quoted(t_tokens[i]) << ", draft "
        << quoted(d_tokens[i]) << both;
    return why.str();
  }
  return "";
}

}  // namespace parspec
