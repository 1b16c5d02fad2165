#include "tokenizer/vocab_builder.h"

#include <algorithm>
#include <queue>
#include <unordered_map>

#include "core/error.h"
#include "model/gguf.h"
#include "tokenizer/unicode.h"

namespace parspec {

int32_t VocabSpec::add(std::string text, TokenType type, float score) {
  // Keep the optional lists aligned with `tokens` once any entry was given.
  if (token_types.size() < tokens.size()) token_types.resize(tokens.size(), 1);
  if (scores.size() < tokens.size()) scores.resize(tokens.size(), 0.0f);
  tokens.push_back(std::move(text));
  token_types.push_back(static_cast<int32_t>(type));
  scores.push_back(score);
  return static_cast<int32_t>(tokens.size() - 1);
}

int32_t VocabSpec::find(std::string_view text) const {
  for (size_t i = 0; i < tokens.size(); ++i)
    if (tokens[i] == text) return static_cast<int32_t>(i);
  return -1;
}

void VocabSpec::write_to(GgufWriter& writer) const {
  writer.set("tokenizer.ggml.model", GgufValue::string(model));
  if (!pre.empty()) writer.set("tokenizer.ggml.pre", GgufValue::string(pre));
  writer.set("tokenizer.ggml.tokens", GgufValue::string_array(tokens));
  if (!token_types.empty())
    writer.set("tokenizer.ggml.token_type", GgufValue::i32_array(token_types));
  if (!scores.empty()) writer.set("tokenizer.ggml.scores", GgufValue::f32_array(scores));
  if (!merges.empty()) writer.set("tokenizer.ggml.merges", GgufValue::string_array(merges));
  const auto set_id = [&](const char* key, int32_t id) {
    if (id >= 0) writer.set(key, GgufValue::u32(static_cast<uint32_t>(id)));
  };
  set_id("tokenizer.ggml.bos_token_id", bos);
  set_id("tokenizer.ggml.eos_token_id", eos);
  set_id("tokenizer.ggml.eot_token_id", eot);
  set_id("tokenizer.ggml.unknown_token_id", unk);
  const auto set_flag = [&](const char* key, const std::optional<bool>& flag) {
    if (flag) writer.set(key, GgufValue::boolean(*flag));
  };
  set_flag("tokenizer.ggml.add_bos_token", add_bos);
  set_flag("tokenizer.ggml.add_eos_token", add_eos);
  set_flag("tokenizer.ggml.add_space_prefix", add_space_prefix);
  if (!chat_template.empty())
    writer.set("tokenizer.chat_template", GgufValue::string(chat_template));
}

std::unique_ptr<Tokenizer> VocabSpec::build_tokenizer() const {
  GgufWriter writer;
  write_to(writer);
  const std::vector<uint8_t> bytes = writer.to_bytes();
  const auto file = GgufFile::from_memory(bytes.data(), bytes.size(), "<vocabulary>");
  return Tokenizer::from_gguf(*file);
}

VocabSpec byte_level_vocab(std::string pre) {
  VocabSpec vocab;
  vocab.model = "gpt2";
  vocab.pre = std::move(pre);
  for (int b = 0; b < 256; ++b) vocab.add(map_bytes(std::string(1, static_cast<char>(b))));
  return vocab;
}

namespace {

struct Word {
  std::vector<int32_t> symbols;
  int64_t frequency;
};

uint64_t key_of(int32_t left, int32_t right) {
  return (static_cast<uint64_t>(static_cast<uint32_t>(left)) << 32) | static_cast<uint32_t>(right);
}

// Distinct pre-tokenized words of `corpus` as byte symbols, with their counts.
std::vector<Word> count_words(std::string_view corpus, PreTokenizer pre) {
  std::vector<Word> words;
  std::vector<TextPiece> pieces;
  RegexSplitter::for_family(pre)->split(corpus, pieces);
  std::unordered_map<std::string_view, size_t> index_of_word;
  for (const TextPiece& piece : pieces) {
    if (!piece.matched) continue;
    const std::string_view text = corpus.substr(piece.begin, piece.end - piece.begin);
    const auto [it, inserted] = index_of_word.emplace(text, words.size());
    if (inserted) {
      Word word{{}, 0};
      for (char c : text) word.symbols.push_back(static_cast<unsigned char>(c));
      words.push_back(std::move(word));
    }
    ++words[it->second].frequency;
  }
  return words;
}

// Replaces each non-overlapping (left, right) in `symbols`, left to right, by `merged`.
void merge_in_word(std::vector<int32_t>& symbols, int32_t left, int32_t right, int32_t merged) {
  size_t out = 0;
  for (size_t i = 0; i < symbols.size(); ++i) {
    if (i + 1 < symbols.size() && symbols[i] == left && symbols[i + 1] == right) {
      symbols[out++] = merged;
      ++i;
    } else {
      symbols[out++] = symbols[i];
    }
  }
  symbols.resize(out);
}

// Counts of adjacent symbol pairs over all words, the words that hold each
// pair, and a heap to find the most frequent pair quickly.
class PairStats {
 public:
  explicit PairStats(const std::vector<Word>& words) : words_(words) {
    for (size_t w = 0; w < words.size(); ++w) add_pairs(static_cast<int32_t>(w), 1, nullptr);
    for (const auto& [key, count] : pair_count_) heap_.push({count, key});
  }

  // Adds (sign 1) or removes (sign -1) the pairs of word `w`; records their keys in `touched`.
  void add_pairs(int32_t w, int64_t sign, std::vector<uint64_t>* touched) {
    const Word& word = words_[w];
    for (size_t i = 0; i + 1 < word.symbols.size(); ++i) {
      const uint64_t key = key_of(word.symbols[i], word.symbols[i + 1]);
      pair_count_[key] += sign * word.frequency;
      if (sign > 0) {
        auto& list = words_with_pair_[key];
        if (list.empty() || list.back() != w) list.push_back(w);
      }
      if (touched) touched->push_back(key);
    }
  }

  // The most frequent pair as (count, key), or count 0 when none is left.
  std::pair<int64_t, uint64_t> pop_best() {
    Entry best{0, 0};
    while (!heap_.empty()) {
      const Entry top = heap_.top();
      heap_.pop();
      const auto it = pair_count_.find(top.second);
      if (it != pair_count_.end() && it->second == top.first) {
        best = top;
        break;
      }
    }
    return best;
  }

  // The words that held `key`; the list is handed over and forgotten.
  std::vector<int32_t> take_words_with(uint64_t key) {
    std::vector<int32_t> affected = std::move(words_with_pair_[key]);
    words_with_pair_.erase(key);
    return affected;
  }

  // Drops pairs whose count fell to zero and pushes the new counts of the rest.
  void requeue(std::vector<uint64_t>& touched) {
    std::sort(touched.begin(), touched.end());
    touched.erase(std::unique(touched.begin(), touched.end()), touched.end());
    for (uint64_t key : touched) {
      const auto it = pair_count_.find(key);
      if (it == pair_count_.end()) continue;
      if (it->second <= 0) {
        pair_count_.erase(it);
      } else {
        heap_.push({it->second, key});
      }
    }
  }

 private:
  // Max-heap on (count, then smaller key); entries whose count went stale are
  // skipped when popped (every change pushes the new count).
  using Entry = std::pair<int64_t, uint64_t>;
  struct LowerPriority {
    bool operator()(const Entry& a, const Entry& b) const {
      return a.first != b.first ? a.first < b.first : a.second > b.second;
    }
  };
  const std::vector<Word>& words_;
  std::unordered_map<uint64_t, int64_t> pair_count_;
  std::unordered_map<uint64_t, std::vector<int32_t>> words_with_pair_;
  std::priority_queue<Entry, std::vector<Entry>, LowerPriority> heap_;
};

}  // namespace

void train_byte_level_bpe(VocabSpec& vocab, std::string_view corpus, PreTokenizer pre,
                          int n_merges) {
  check(vocab.model == "gpt2" && vocab.tokens.size() >= 256,
        "BPE training needs a byte-level vocabulary");
  for (int b = 0; b < 256; ++b)
    check(vocab.tokens[b] == map_bytes(std::string(1, static_cast<char>(b))),
          "BPE training needs the byte tokens at ids 0..255");

  // Decoded bytes of every token the trainer can produce, and the reverse map.
  std::vector<std::string> bytes_of(vocab.tokens.size());
  std::unordered_map<std::string, int32_t> id_of_bytes;
  for (int b = 0; b < 256; ++b) {
    bytes_of[b].assign(1, static_cast<char>(b));
    id_of_bytes.emplace(bytes_of[b], b);
  }

  std::vector<Word> words = count_words(corpus, pre);
  PairStats stats(words);

  std::vector<int32_t> seen_in_merge(words.size(), -1);
  for (int merge = 0; merge < n_merges; ++merge) {
    const auto best = stats.pop_best();
    if (best.first < 2) break;
    const auto left = static_cast<int32_t>(best.second >> 32);
    const auto right = static_cast<int32_t>(best.second & 0xFFFFFFFFu);

    const std::string merged_bytes = bytes_of[left] + bytes_of[right];
    int32_t merged;
    if (const auto it = id_of_bytes.find(merged_bytes); it != id_of_bytes.end()) {
      merged = it->second;
    } else {
      merged = vocab.add(map_bytes(merged_bytes));
      bytes_of.resize(vocab.tokens.size());
      bytes_of[merged] = merged_bytes;
      id_of_bytes.emplace(merged_bytes, merged);
    }
    vocab.merges.push_back(map_bytes(bytes_of[left]) + " " + map_bytes(bytes_of[right]));

    std::vector<uint64_t> touched;
    for (int32_t w : stats.take_words_with(best.second)) {
      if (seen_in_merge[w] == merge) continue;
      seen_in_merge[w] = merge;
      stats.add_pairs(w, -1, &touched);
      merge_in_word(words[w].symbols, left, right, merged);
      stats.add_pairs(w, 1, &touched);
    }
    stats.requeue(touched);
  }
}

}  // namespace parspec
