// Encode throughput on a few MB of mixed text (prose, code, CJK, other
// scripts, emoji, numbers) with a byte-level BPE vocabulary trained here.
// Checks the round trip of the whole text and prints the speed (thread CPU
// time); set PARSPEC_TOKENIZER_BENCH_TEXT=FILE to measure another text.
#include <gtest/gtest.h>
#include <time.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <random>
#include <sstream>
#include <string>
#include <vector>

#include "tokenizer/tokenizer.h"
#include "tokenizer/unicode.h"
#include "tokenizer/vocab_builder.h"

namespace parspec {
namespace {

// CPU time of this thread: encoding is single-threaded, and on a shared
// machine wall time would also count the other processes.
double thread_seconds() {
  timespec ts{};
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
  return static_cast<double>(ts.tv_sec) + ts.tv_nsec * 1e-9;
}

// Deterministic text that mixes what prompts contain.
std::string mixed_text(size_t target_bytes) {
  static const char* const kWords[] = {"the",
                                       "of",
                                       "and",
                                       "to",
                                       "a",
                                       "in",
                                       "is",
                                       "that",
                                       "for",
                                       "it",
                                       "as",
                                       "was",
                                       "with",
                                       "be",
                                       "by",
                                       "on",
                                       "not",
                                       "he",
                                       "this",
                                       "are",
                                       "or",
                                       "his",
                                       "from",
                                       "at",
                                       "which",
                                       "but",
                                       "have",
                                       "an",
                                       "had",
                                       "they",
                                       "you",
                                       "were",
                                       "their",
                                       "one",
                                       "all",
                                       "we",
                                       "can",
                                       "her",
                                       "has",
                                       "there",
                                       "been",
                                       "if",
                                       "more",
                                       "when",
                                       "will",
                                       "would",
                                       "who",
                                       "so",
                                       "no",
                                       "model",
                                       "token",
                                       "draft",
                                       "target",
                                       "speculative",
                                       "decoding",
                                       "verification",
                                       "accepted",
                                       "latency",
                                       "throughput",
                                       "parallel",
                                       "pipeline",
                                       "memory",
                                       "bandwidth",
                                       "language",
                                       "generation",
                                       "probability",
                                       "distribution",
                                       "sequence",
                                       "attention",
                                       "layer",
                                       "cache",
                                       "however",
                                       "therefore",
                                       "experiment",
                                       "results",
                                       "performance",
                                       "significantly",
                                       "don't",
                                       "it's",
                                       "we'll",
                                       "they're",
                                       "I've",
                                       "Transformer",
                                       "GPU",
                                       "CPU",
                                       "LLaMA"};
  static const char* const kCode[] = {"for (int i = 0; i < n; ++i) {\n",
                                      "    sum += x[i] * w[i];\n",
                                      "}\n",
                                      "def forward(self, x):\n",
                                      "    return self.proj(torch.relu(x))\n",
                                      "if (ptr == nullptr) return -1;\n",
                                      "const auto it = map.find(key);\n",
                                      "\tprintf(\"%d tokens\\n\", count);\n",
                                      "x = np.zeros((1024, 4096), dtype=np.float32)\n",
                                      "#include <vector>\n",
                                      "// TODO(user): handle the error path\n"};
  static const char* const kOther[] = {"日本語の文章を書きます。",
                                       "这是一个中文句子，用于测试。",
                                       "토큰화 테스트 문장입니다.",
                                       "Съешь же ещё этих мягких французских булок.",
                                       "Ελληνικά κείμενα και αριθμοί.",
                                       "naïve café résumé façade Zürich",
                                       "😀 👍🏽 🚀 ✨ 🇫🇷",
                                       "مرحبا بالعالم",
                                       "हिन्दी पाठ",
                                       "e\xCC\x81 o\xCC\x88 combining marks"};
  std::mt19937 rng(1234);
  std::string text;
  text.reserve(target_bytes + 256);
  const auto pick = [&](size_t n, double skew) {
    // Zipf-like: small indices are much more frequent.
    const double u = std::uniform_real_distribution<double>(0, 1)(rng);
    return std::min(n - 1, static_cast<size_t>(n * std::pow(u, skew)));
  };
  while (text.size() < target_bytes) {
    const int kind = static_cast<int>(rng() % 10);
    if (kind < 6) {  // a sentence of prose
      const int words = 6 + static_cast<int>(rng() % 18);
      for (int w = 0; w < words; ++w) {
        std::string word = kWords[pick(std::size(kWords), 2.5)];
        if (w == 0) word[0] = static_cast<char>(std::toupper(word[0]));
        text += word;
        if (rng() % 12 == 0) text += ",";
        if (rng() % 25 == 0) {
          text += ' ';
          text += std::to_string(rng() % 100000);
        }
        text += w + 1 < words ? " " : (rng() % 4 ? ". " : ".\n\n");
      }
    } else if (kind < 8) {  // a few lines of code
      for (int l = 0; l < 3; ++l) text += kCode[rng() % std::size(kCode)];
    } else {  // other scripts, emoji, numbers
      text += kOther[rng() % std::size(kOther)];
      text += ' ';
      text += std::to_string(rng() % 10000);
      text += '.';
      text += std::to_string(rng() % 100);
      text += '\n';
    }
  }
  return text;
}

std::string bench_text() {
  if (const char* path = std::getenv("PARSPEC_TOKENIZER_BENCH_TEXT")) {
    std::ifstream in(path, std::ios::binary);
    EXPECT_TRUE(in.good()) << "cannot read " << path;
    std::ostringstream ss;
    ss << in.rdbuf();
    return ss.str();
  }
  return mixed_text(3 << 20);
}

TEST(TokenizerBench, EncodeThroughputMixedText) {
  const std::string text = bench_text();
  ASSERT_GT(text.size(), 100000u);

  VocabSpec spec = byte_level_vocab("llama-bpe");
  // Trained on 1 MB sampled from four places of the text.
  std::string sample;
  for (size_t k = 0; k < 4; ++k) sample += text.substr(text.size() / 4 * k, 1 << 18);
  const double train_start = thread_seconds();
  train_byte_level_bpe(spec, sample, PreTokenizer::kLlama3, 8000);
  const double train_s = thread_seconds() - train_start;
  spec.bos = spec.add("<|begin_of_text|>", TokenType::kControl);
  spec.add("<|eot_id|>", TokenType::kControl);
  std::printf("[bench] text %.2f MB; trained %zu merges in %.2f s\n", text.size() / 1e6,
              spec.merges.size(), train_s);

  for (const char* pre : {"llama-bpe", "qwen2", "gpt2"}) {
    spec.pre = pre;
    const auto tok = spec.build_tokenizer();
    std::vector<int32_t> ids;
    double best_s = 1e9;
    for (int rep = 0; rep < 2; ++rep) {
      const double start = thread_seconds();
      ids = tok->encode(text, false, true);
      best_s = std::min(best_s, thread_seconds() - start);
    }
    const double decode_start = thread_seconds();
    const std::string decoded = tok->decode(ids);
    const double decode_s = thread_seconds() - decode_start;
    ASSERT_EQ(decoded, text) << pre;
    // The trained merges compress the text (at least 2 bytes per token).
    EXPECT_LT(ids.size() * 2, text.size()) << pre;

    // A 4096-token prompt: its text encoded on its own, best of several runs.
    const size_t n_prompt = std::min<size_t>(4096, ids.size());
    const std::string prompt =
        tok->decode(std::vector<int32_t>(ids.begin(), ids.begin() + n_prompt));
    double prompt_s = 1e9;
    for (int rep = 0; rep < 5; ++rep) {
      const double start = thread_seconds();
      const auto prompt_ids = tok->encode(prompt, true, false);
      prompt_s = std::min(prompt_s, thread_seconds() - start);
      ASSERT_GE(prompt_ids.size(), n_prompt / 2);
    }
    std::printf(
        "[bench] %-9s encode %6.1f MB/s (%.2f M tokens/s, %.2f bytes/token), decode %6.1f "
        "MB/s, 4096-token prompt (%zu bytes) %.2f ms\n",
        pre, text.size() / 1e6 / best_s, ids.size() / 1e6 / best_s,
        static_cast<double>(text.size()) / ids.size(), text.size() / 1e6 / decode_s, prompt.size(),
        prompt_s * 1e3);
  }
}

}  // namespace
}  // namespace parspec
