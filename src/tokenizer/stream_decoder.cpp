#include "tokenizer/stream_decoder.h"

#include "tokenizer/unicode.h"

namespace parspec {

StreamDecoder::StreamDecoder(const Tokenizer& tokenizer, bool render_special)
    : tokenizer_(tokenizer), render_special_(render_special) {}

std::string StreamDecoder::feed(int32_t id) {
  if (tokenizer_.is_special(id)) {
    if (!render_special_) return take_complete();
    pending_ += tokenizer_.token_raw_text(id);
  } else {
    pending_ += tokenizer_.token_text(id);
  }
  return take_complete();
}

std::string StreamDecoder::take_complete() {
  std::string out;
  size_t pos = 0;
  while (pos < pending_.size()) {
    const utf8::Seq seq = utf8::classify(pending_, pos);
    if (seq.kind == utf8::SeqKind::kIncomplete) break;  // wait for the next token
    if (seq.kind == utf8::SeqKind::kComplete) {
      out.append(pending_, pos, seq.length);
    } else {
      out += utf8::kReplacement;
    }
    pos += seq.length;
  }
  pending_.erase(0, pos);
  return out;
}

std::string StreamDecoder::flush() {
  std::string out = take_complete();
  if (!pending_.empty()) out += utf8::kReplacement;
  pending_.clear();
  return out;
}

}  // namespace parspec
