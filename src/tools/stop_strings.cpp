#include "tools/stop_strings.h"

#include <algorithm>
#include <cstdio>

#include "core/error.h"

namespace parspec {

StopStrings::StopStrings(const Tokenizer& tokenizer, std::vector<std::string> stops)
    : decoder_(tokenizer), stops_(std::move(stops)) {
  for (const std::string& s : stops_) {
    check(!s.empty(), "-r: a stop string must not be empty");
    longest_ = std::max(longest_, s.size());
  }
}

bool StopStrings::feed(int32_t token) {
  if (stops_.empty()) return false;
  const std::string piece = decoder_.feed(token);
  // A stop string may end inside this piece, not only at its end.
  const size_t old_size = tail_.size();
  tail_ += piece;
  bool hit = false;
  for (const std::string& s : stops_) {
    const size_t from = old_size >= s.size() ? old_size - s.size() + 1 : 0;
    if (tail_.find(s, from) != std::string::npos) hit = true;
  }
  if (tail_.size() > 2 * longest_) tail_.erase(0, tail_.size() - longest_);
  return hit;
}

void warn_on_double_bos(const Tokenizer& tokenizer, const std::vector<int32_t>& prompt_tokens) {
  if (!tokenizer.add_bos() || tokenizer.bos() < 0 || prompt_tokens.size() < 2) return;
  if (prompt_tokens[0] == tokenizer.bos() && prompt_tokens[1] == tokenizer.bos())
    std::fprintf(stderr,
                 "warning: the model adds a BOS token and the prompt also starts with one, so "
                 "the prompt now starts with 2 BOS tokens (leave the BOS text out of the "
                 "prompt)\n");
}

}  // namespace parspec
