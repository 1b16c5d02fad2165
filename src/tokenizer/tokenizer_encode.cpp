// Encoding text into token ids: special tokens split out, then byte-level BPE
// merges per pre-tokenized word (gpt2) or SentencePiece merges with byte
// fallback (llama).
#include <algorithm>
#include <climits>
#include <cstdint>
#include <queue>
#include <span>

#include "core/error.h"
#include "tokenizer/tokenizer.h"
#include "tokenizer/unicode.h"

namespace parspec {

// Symbols of a word being merged form a linked list over the word's bytes.
// `rank`/`result` cache the merge of a symbol with its right neighbour (short
// words); long words keep candidate merges in a heap instead.
struct Tokenizer::BpeScratch {
  struct Symbol {
    int32_t id, prev, next;
    int32_t rank, result;
  };
  struct Candidate {
    int32_t rank, left, right, left_id, right_id, result;
    bool operator>(const Candidate& o) const {
      return rank != o.rank ? rank > o.rank : left > o.left;
    }
  };
  std::vector<TextPiece> pieces;
  std::vector<Symbol> symbols;
  std::vector<Candidate> heap;
  // Words already merged in this call: text -> (first, count) in cached_ids.
  std::unordered_map<std::string_view, std::pair<uint32_t, uint32_t>> cache;
  std::vector<int32_t> cached_ids;
};

std::vector<int32_t> Tokenizer::encode(std::string_view text, bool add_special,
                                       bool parse_special) const {
  std::vector<int32_t> out;
  out.reserve(text.size() / 3 + 4);
  encode_into(text, add_special, parse_special, SIZE_MAX, false, out);
  return out;
}

std::vector<int32_t> Tokenizer::encode_prefix(std::string_view text, bool add_special,
                                              bool parse_special, size_t max_tokens) const {
  std::vector<int32_t> out;
  out.reserve(std::min(text.size() / 3, max_tokens) + 4);
  encode_into(text, add_special, parse_special, max_tokens, true, out);
  if (out.size() > max_tokens) out.resize(max_tokens);
  return out;
}

void Tokenizer::encode_into(std::string_view text, bool add_special, bool parse_special,
                            size_t limit, bool chunked, std::vector<int32_t>& out) const {
  const auto full = [&] { return out.size() >= limit; };
  if (add_special && add_bos_ && bos_ >= 0) out.push_back(bos_);

  // SentencePiece puts a space in front of the text and of every text fragment
  // that follows a special token (as llama.cpp does).
  bool after_special = true;
  size_t fragment_start = 0;
  BpeScratch scratch;
  const auto flush_text = [&](size_t end) {
    if (end <= fragment_start || full()) return;
    const std::string_view fragment = text.substr(fragment_start, end - fragment_start);
    if (kind_ == VocabKind::kBytePairGpt2) {
      encode_bpe_text(fragment, scratch, limit, chunked, out);
    } else {
      encode_spm_chunks(fragment, add_space_prefix_ && after_special, limit, chunked, out);
    }
    after_special = false;
  };

  if (!specials_.empty()) {
    for (size_t pos = 0; pos < text.size() && !full();) {
      const auto& candidates = specials_by_first_byte_[static_cast<unsigned char>(text[pos])];
      const Special* found = nullptr;
      for (uint32_t index : candidates) {
        const Special& special = specials_[index];
        if ((special.always || parse_special) && text.substr(pos).starts_with(special.text)) {
          found = &special;
          break;
        }
      }
      if (!found) {
        ++pos;
        continue;
      }
      flush_text(pos);
      out.push_back(found->id);
      after_special = true;
      pos += found->text.size();
      fragment_start = pos;
    }
  }
  flush_text(text.size());

  if (add_special && add_eos_ && eos_ >= 0 && !full()) out.push_back(eos_);
}

void Tokenizer::encode_bpe_text(std::string_view text, BpeScratch& scratch, size_t limit,
                                bool chunked, std::vector<int32_t>& out) const {
  // A piece that ends this close to a chunk's cut may itself be cut (a word, or
  // a run of spaces whose last one belongs to the next word): it is split again
  // with the next chunk. The patterns look at most one character past a piece.
  constexpr size_t kCutMargin = 256;
  size_t start = 0, chunk = kChunkBytes;
  while (start < text.size() && out.size() < limit) {
    const bool last = !chunked || text.size() - start <= chunk;
    const std::string_view part = text.substr(start, last ? std::string_view::npos : chunk);
    scratch.pieces.clear();
    splitter_->split(part, scratch.pieces);
    size_t keep = scratch.pieces.size();
    if (!last) {
      while (keep > 0 && scratch.pieces[keep - 1].end + kCutMargin > part.size()) --keep;
      if (keep == 0) {  // one piece longer than the chunk: a longer chunk
        chunk *= 2;
        continue;
      }
    }
    encode_bpe_pieces(text, start, std::span(scratch.pieces.data(), keep), scratch, limit, out);
    start += last ? part.size() : scratch.pieces[keep - 1].end;
    chunk = kChunkBytes;
  }
}

void Tokenizer::encode_bpe_pieces(std::string_view text, size_t offset,
                                  std::span<const TextPiece> pieces, BpeScratch& scratch,
                                  size_t limit, std::vector<int32_t>& out) const {
  for (const TextPiece& piece : pieces) {
    if (out.size() >= limit) return;
    const std::string_view word = text.substr(offset + piece.begin, piece.end - piece.begin);
    if (!piece.matched) {
      // Invalid UTF-8: every byte as its own byte token.
      for (char c : word) out.push_back(byte_tokens_[static_cast<unsigned char>(c)]);
      continue;
    }
    if (word.size() == 1) {
      out.push_back(byte_tokens_[static_cast<unsigned char>(word[0])]);
      continue;
    }
    // Longer texts repeat their words: each distinct word is tokenized once
    // per call.
    const auto [cached, inserted] = scratch.cache.try_emplace(word);
    if (!inserted) {
      const auto [first, count] = cached->second;
      out.insert(out.end(), scratch.cached_ids.begin() + first,
                 scratch.cached_ids.begin() + first + count);
      continue;
    }
    const size_t before = out.size();
    const auto whole = ignore_merges_ ? lookup_.find(word) : lookup_.end();
    if (whole != lookup_.end()) {
      out.push_back(whole->second);
    } else {
      encode_bpe_word(word, scratch, out);
    }
    cached->second = {static_cast<uint32_t>(scratch.cached_ids.size()),
                      static_cast<uint32_t>(out.size() - before)};
    scratch.cached_ids.insert(scratch.cached_ids.end(), out.begin() + before, out.end());
  }
}

void Tokenizer::encode_bpe_word(std::string_view word, BpeScratch& scratch,
                                std::vector<int32_t>& out) const {
  using Symbol = BpeScratch::Symbol;
  using Candidate = BpeScratch::Candidate;
  constexpr int32_t kNoMerge = INT32_MAX;
  const auto n = static_cast<int32_t>(word.size());
  if (n == 1) {
    out.push_back(byte_tokens_[static_cast<unsigned char>(word[0])]);
    return;
  }
  std::vector<Symbol>& symbols = scratch.symbols;
  symbols.resize(n);
  for (int32_t i = 0; i < n; ++i)
    symbols[i] = {byte_tokens_[static_cast<unsigned char>(word[i])], i - 1, i + 1 < n ? i + 1 : -1,
                  kNoMerge, -1};

  // Both strategies apply the merge of lowest rank first, the leftmost among
  // equal ranks, so they give the same tokens.
  if (n <= kShortWord) {
    // Scan for the best cached pair; a merge changes only the pairs of the
    // merged symbol.
    const auto refresh = [&](int32_t i) {
      Symbol& s = symbols[i];
      const MergeTable::Merge* merge =
          s.next >= 0 ? merges_.find(s.id, symbols[s.next].id) : nullptr;
      s.rank = merge ? merge->rank : kNoMerge;
      s.result = merge ? merge->result : -1;
    };
    for (int32_t i = 0; i < n; ++i) refresh(i);
    for (;;) {
      int32_t best = -1, best_rank = kNoMerge;
      for (int32_t i = 0; i >= 0; i = symbols[i].next) {
        if (symbols[i].rank < best_rank) {
          best_rank = symbols[i].rank;
          best = i;
        }
      }
      if (best < 0) break;
      Symbol& left = symbols[best];
      left.id = left.result;
      left.next = symbols[left.next].next;
      if (left.next >= 0) symbols[left.next].prev = best;
      refresh(best);
      if (left.prev >= 0) refresh(left.prev);
    }
  } else {
    // A min-heap of candidate merges; candidates that an earlier merge made
    // stale are recognised by their changed ids.
    std::vector<Candidate>& heap = scratch.heap;
    heap.clear();
    const auto consider = [&](int32_t left, int32_t right) {
      const MergeTable::Merge* merge = merges_.find(symbols[left].id, symbols[right].id);
      if (!merge) return;
      heap.push_back(
          {merge->rank, left, right, symbols[left].id, symbols[right].id, merge->result});
      std::push_heap(heap.begin(), heap.end(), std::greater<>());
    };
    for (int32_t i = 0; i + 1 < n; ++i) consider(i, i + 1);
    while (!heap.empty()) {
      std::pop_heap(heap.begin(), heap.end(), std::greater<>());
      const Candidate c = heap.back();
      heap.pop_back();
      Symbol& left = symbols[c.left];
      Symbol& right = symbols[c.right];
      if (left.id != c.left_id || right.id != c.right_id || left.next != c.right) continue;
      left.id = c.result;
      left.next = right.next;
      if (right.next >= 0) symbols[right.next].prev = c.left;
      right.id = -1;
      if (left.prev >= 0) consider(left.prev, c.left);
      if (left.next >= 0) consider(c.left, left.next);
    }
  }
  for (int32_t i = 0; i >= 0; i = symbols[i].next) out.push_back(symbols[i].id);
}

void Tokenizer::encode_spm_chunks(std::string_view text, bool space_prefix, size_t limit,
                                  bool chunked, std::vector<int32_t>& out) const {
  if (!chunked || !spm_cuts_at_spaces_) {
    encode_spm_text(text, space_prefix, out);
    return;
  }
  // Cut at the first space after a non-space from kChunkBytes on: no token
  // crosses it (spm_cuts_at_spaces_).
  size_t start = 0;
  while (start < text.size() && out.size() < limit) {
    size_t end = text.size();
    for (size_t at = start + kChunkBytes; at < text.size(); ++at) {
      if (text[at] == ' ' && text[at - 1] != ' ') {
        end = at;
        break;
      }
    }
    encode_spm_text(text.substr(start, end - start), space_prefix && start == 0, out);
    start = end;
  }
}

void Tokenizer::encode_spm_text(std::string_view text, bool space_prefix,
                                std::vector<int32_t>& out) const {
  std::string escaped;
  escaped.reserve(text.size() + 8);
  if (space_prefix) escaped += kSpmSpace;
  for (char c : text) {
    if (c == ' ') {
      escaped += kSpmSpace;
    } else {
      escaped += c;
    }
  }
  // Symbols start as characters (an invalid byte is a symbol of its own); the
  // adjacent pair whose concatenation is the highest-scoring token merges first,
  // leftmost on ties.
  struct Symbol {
    uint32_t begin, length;
    int32_t prev, next;
  };
  struct Candidate {
    float score;
    int32_t left, right;
    uint32_t left_length, right_length;
    bool operator<(const Candidate& o) const {
      return score != o.score ? score < o.score : left > o.left;
    }
  };
  std::vector<Symbol> symbols;
  for (size_t pos = 0; pos < escaped.size();) {
    const size_t len = utf8::unit_length(escaped, pos);
    const auto index = static_cast<int32_t>(symbols.size());
    symbols.push_back(
        {static_cast<uint32_t>(pos), static_cast<uint32_t>(len), index - 1, index + 1});
    pos += len;
  }
  if (symbols.empty()) return;
  symbols.back().next = -1;
  const std::string_view view(escaped);

  std::vector<Candidate> heap;
  const auto consider = [&](int32_t left, int32_t right) {
    const Symbol& l = symbols[left];
    const Symbol& r = symbols[right];
    const auto it = lookup_.find(view.substr(l.begin, l.length + r.length));
    if (it == lookup_.end()) return;
    heap.push_back({scores_[it->second], left, right, l.length, r.length});
    std::push_heap(heap.begin(), heap.end());
  };
  for (int32_t i = 0; i + 1 < static_cast<int32_t>(symbols.size()); ++i) consider(i, i + 1);

  while (!heap.empty()) {
    std::pop_heap(heap.begin(), heap.end());
    const Candidate c = heap.back();
    heap.pop_back();
    Symbol& left = symbols[c.left];
    Symbol& right = symbols[c.right];
    if (left.length != c.left_length || right.length != c.right_length || left.next != c.right)
      continue;
    left.length += right.length;
    left.next = right.next;
    if (right.next >= 0) symbols[right.next].prev = c.left;
    right.length = 0;
    if (left.prev >= 0) consider(left.prev, c.left);
    if (left.next >= 0) consider(c.left, left.next);
  }
  for (int32_t i = 0; i >= 0; i = symbols[i].next) {
    const std::string_view piece = view.substr(symbols[i].begin, symbols[i].length);
    const auto it = lookup_.find(piece);
    if (it != lookup_.end()) {
      out.push_back(it->second);
    } else {
      append_byte_fallback(piece, out);
    }
  }
}

void Tokenizer::append_byte_fallback(std::string_view bytes, std::vector<int32_t>& out) const {
  if (!has_byte_fallback_) {
    out.push_back(unk_);
    return;
  }
  for (char c : bytes) {
    const int32_t id = byte_tokens_[static_cast<unsigned char>(c)];
    out.push_back(id >= 0 ? id : unk_);
  }
}

}  // namespace parspec
