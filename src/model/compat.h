#pragma once
// Whether a draft model can speculate for a target: the same tokens must mean
// the same text, as llama.cpp's speculative examples require (they compare
// vocabulary type, BOS/EOS ids and flags, and every token's text).
#include <string>

#include "model/gguf.h"

namespace parspec {

// Empty when `draft` may draft for `target`; otherwise one sentence naming the
// first difference (a token id with both texts, a special id, the tokenizer
// type) and both files.
std::string draft_incompatibility(const GgufFile& target, const GgufFile& draft);

}  // namespace parspec
