#pragma once
// Stop strings (-r/--reverse-prompt, as in llama.cpp): generation halts once
// the text generated so far ends with one of them.
#include <cstdint>
#include <string>
#include <vector>

#include "tokenizer/stream_decoder.h"
#include "tokenizer/tokenizer.h"

namespace parspec {

class StopStrings {
 public:
  StopStrings(const Tokenizer& tokenizer, std::vector<std::string> stops);
  // Adds a generated token; true when the text now ends with a stop string.
  bool feed(int32_t token);

 private:
  StreamDecoder decoder_;
  std::vector<std::string> stops_;
  std::string tail_;  // the last bytes of the text, enough for the longest stop
  size_t longest_ = 0;
};

// llama.cpp's warning for a prompt that starts with two BOS tokens (the model
// adds one and the text already had one).
void warn_on_double_bos(const Tokenizer& tokenizer, const std::vector<int32_t>& prompt_tokens);

}  // namespace parspec
