#include "tools/chat_loop.h"

#include <unistd.h>

#include <cstdio>
#include <iostream>

#include "core/error.h"
#include "tokenizer/stream_decoder.h"
#include "tools/prompt_input.h"
#include "tools/stop_strings.h"

namespace parspec {

int run_chat_loop(Strategy& strategy, const Tokenizer& tokenizer, const ChatTemplate& tmpl,
                  const ChatLoopSettings& settings) {
  std::vector<ChatMessage> messages;
  if (!settings.system_prompt.empty()) messages.push_back({"system", settings.system_prompt});
  // A vocabulary that spells the end of a turn as text stops there as a stop string.
  std::vector<std::string> stop_strings = settings.stop_strings;
  const std::string end_of_turn = tmpl.end_of_turn_stop(tokenizer);
  if (!end_of_turn.empty()) stop_strings.push_back(end_of_turn);
  const bool tty = isatty(fileno(stdin));
  if (tty) std::fprintf(stderr, "conversation: one line per turn; /exit or end of input ends it\n");
  for (int turn = 0;; ++turn) {
    if (tty) std::fputs("\n> ", stdout);
    std::fflush(stdout);
    std::string line;
    if (!std::getline(std::cin, line) || line == "/exit") break;
    messages.push_back({"user", line});
    const std::vector<int32_t> prompt =
        tmpl.encode(tokenizer, messages, true, static_cast<size_t>(settings.n_ctx) + 1);
    const int n_predict =
        resolve_n_predict(settings.n_predict, static_cast<int64_t>(prompt.size()), settings.n_ctx);
    GenerationRequest request;
    request.prompt = prompt;
    request.n_predict = n_predict;
    request.sampling = settings.sampling;
    request.sampling.seed = settings.sampling.seed + static_cast<uint64_t>(turn);
    StopStrings stop(tokenizer, stop_strings);
    request.is_stop = [&](int32_t t) { return tokenizer.is_end_of_generation(t) || stop.feed(t); };
    StreamDecoder stream(tokenizer);
    std::string reply;
    request.on_token = [&](int32_t t) {
      if (tokenizer.is_end_of_generation(t)) return;
      const std::string piece = stream.feed(t);
      reply += piece;
      std::fputs(piece.c_str(), stdout);
      std::fflush(stdout);
    };
    strategy.generate(request);
    const std::string tail = stream.flush();
    reply += tail;
    std::fputs(tail.c_str(), stdout);
    std::fputs("\n", stdout);
    // The template writes the end of the turn itself.
    if (!end_of_turn.empty() && reply.ends_with(end_of_turn))
      reply.resize(reply.size() - end_of_turn.size());
    messages.push_back({"assistant", reply});
  }
  return 0;
}

}  // namespace parspec
