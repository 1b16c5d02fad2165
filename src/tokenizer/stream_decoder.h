#pragma once
// Incremental detokenization for printing generated text as it comes: a UTF-8
// character split over several tokens is held back until it is complete, so
// every returned string is well-formed UTF-8. Ill-formed bytes (a model can
// emit any byte token) come out as U+FFFD, one per maximal ill-formed subpart.
#include <cstdint>
#include <string>

#include "tokenizer/tokenizer.h"

namespace parspec {

class StreamDecoder {
 public:
  // render_special: whether control tokens (e.g. EOS) print their text.
  explicit StreamDecoder(const Tokenizer& tokenizer, bool render_special = false);

  // Adds one token; returns the text completed by it (possibly empty).
  // Throws Error for an id outside the vocabulary.
  std::string feed(int32_t id);
  // Returns what is still held back (an unfinished character becomes U+FFFD)
  // and starts over.
  std::string flush();
  // Bytes held back, waiting for the rest of a character.
  size_t pending_bytes() const { return pending_.size(); }

 private:
  std::string take_complete();

  const Tokenizer& tokenizer_;
  bool render_special_;
  std::string pending_;
};

}  // namespace parspec
