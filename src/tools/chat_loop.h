#pragma once
// Interactive conversation (llama-cli's -cnv): user turns from standard input,
// the model's replies printed as they are generated, the whole conversation
// rendered with the chat template each turn.
#include <cstdint>
#include <string>
#include <vector>

#include "decode/strategy.h"
#include "sample/sampler.h"
#include "tokenizer/chat_template.h"
#include "tokenizer/tokenizer.h"

namespace parspec {

struct ChatLoopSettings {
  std::string system_prompt;  // empty: none
  int n_predict = -1;         // per reply; -1: until end of turn or a full context
  int n_ctx = 4096;
  SamplingParams sampling;
  std::vector<std::string> stop_strings;
};

// Reads a line per user turn until end of input or "/exit"; returns the exit
// code. A conversation that outgrows the context ends with an error naming -c.
int run_chat_loop(Strategy& strategy, const Tokenizer& tokenizer, const ChatTemplate& tmpl,
                  const ChatLoopSettings& settings);

}  // namespace parspec
