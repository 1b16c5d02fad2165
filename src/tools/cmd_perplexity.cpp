// parspec perplexity: the same chunking and scoring as llama.cpp's
// llama-perplexity, so the numbers can be compared.
#include <unistd.h>

#include <chrono>
#include <cmath>
#include <cstdio>
#include <fstream>
#include <sstream>

#include "core/error.h"
#include "core/worker.h"
#include "model/model.h"
#include "tokenizer/tokenizer.h"
#include "tools/args.h"
#include "tools/commands.h"
#include "tools/llama_flags.h"
#include "tools/model_loading.h"
#include "tools/prompt_input.h"

namespace parspec {

namespace {

// -log softmax(logits)[target], in double.
double negative_log_likelihood(const float* logits, int n_vocab, int32_t target) {
  double max_logit = logits[0];
  for (int i = 1; i < n_vocab; ++i) max_logit = std::max(max_logit, static_cast<double>(logits[i]));
  double sum = 0.0;
  for (int i = 0; i < n_vocab; ++i) sum += std::exp(logits[i] - max_logit);
  return std::log(sum) + max_logit - logits[target];
}

}  // namespace

int cmd_perplexity(int argc, char** argv) {
  std::string model_path, text_file, logits_out;
  int n_ctx = 512, n_threads = default_thread_count(), max_chunks = -1;
  ArgParser args("perplexity",
                 "Perplexity of a text: the tokens are cut into chunks of --ctx-size tokens, the\n"
                 "first token of each chunk is replaced by BOS, and the predictions of the second\n"
                 "half of each chunk are scored (as llama.cpp's llama-perplexity does).");
  args.option("-m,--model", &model_path, "FILE", "model (GGUF)");
  args.option("-f,--file", &text_file, "FILE", "text to score ('-': stdin)");
  args.option("-c,--ctx-size,--ctx", &n_ctx, "N",
              "tokens per chunk; 0 = the model's training context");
  args.option("-t,--threads", &n_threads, "N", "threads");
  args.option("--chunks", &max_chunks, "N", "score at most N chunks (-1: all)");
  args.option("--logits-out", &logits_out, "FILE",
              "also write every position's logits of the scored chunks to FILE: float32, "
              "chunk after chunk, ctx-size rows of n_vocab values each (for comparisons with "
              "other implementations)");
  add_ignored_gpu_flags(args);
  args.bound("-t", 1, kMaxThreads);
  args.describe_default("-t", "the cores this process may use");
  args.bound("--chunks", -1, 1e9);
  if (!args.parse(argc, argv)) return 0;
  check(max_chunks != 0, "--chunks 0 scores nothing: give at least 1 (or -1 for all chunks)");
  check(!model_path.empty(), "no model given (-m FILE)");
  check(!text_file.empty(), "no text file given (-f FILE)");
  const std::string text = read_text_input(text_file, "-f");

  auto model = load_model(model_path);
  auto tokenizer = Tokenizer::from_gguf(model->gguf());
  n_ctx = resolve_context_size(n_ctx, args.given("-c"), {&model->config()}, model_path);
  model->use_context_size(n_ctx);
  check(n_ctx >= 4, "-c ", n_ctx, ": a chunk needs at least 4 tokens");
  const std::vector<int32_t> tokens = tokenizer->encode(text, true, false);
  const int n_chunks_all = static_cast<int>(tokens.size() / n_ctx);
  if (n_chunks_all == 0)
    fail("the text has ", tokens.size(), " tokens; at least ", n_ctx,
         " (one chunk of --ctx-size) are needed");
  const int n_chunks = max_chunks < 0 ? n_chunks_all : std::min(max_chunks, n_chunks_all);
  const bool tty = isatty(fileno(stderr));
  std::fprintf(stderr, "perplexity: %zu tokens, %d chunks of %d, scoring tokens %d..%d of each\n",
               tokens.size(), n_chunks, n_ctx, n_ctx / 2 + 1, n_ctx - 1);

  std::FILE* logits_file = nullptr;
  if (!logits_out.empty()) {
    logits_file = std::fopen(logits_out.c_str(), "wb");
    check(logits_file != nullptr, "--logits-out: cannot write ", logits_out);
  }
  Worker worker(n_threads);
  KvCache kv(model->config(), n_ctx);
  const int n_vocab = model->config().n_vocab;
  const int first = n_ctx / 2;
  double nll_sum = 0.0, nll_sq_sum = 0.0;
  int64_t n_scored = 0;
  const auto t0 = std::chrono::steady_clock::now();
  for (int chunk = 0; chunk < n_chunks; ++chunk) {
    std::vector<int32_t> chunk_tokens(tokens.begin() + static_cast<int64_t>(chunk) * n_ctx,
                                      tokens.begin() + static_cast<int64_t>(chunk + 1) * n_ctx);
    chunk_tokens[0] = tokenizer->bos();
    kv.clear();
    Batch batch = Batch::chain(kv, chunk_tokens, true);
    const std::vector<float> logits = model->forward(worker, batch, kv);
    if (logits_file != nullptr)
      check(std::fwrite(logits.data(), sizeof(float), logits.size(), logits_file) == logits.size(),
            "--logits-out: cannot write ", logits_out);
    for (int j = first; j < n_ctx - 1; ++j) {
      const double nll = negative_log_likelihood(&logits[static_cast<size_t>(j) * n_vocab], n_vocab,
                                                 chunk_tokens[j + 1]);
      nll_sum += nll;
      nll_sq_sum += nll * nll;
      ++n_scored;
    }
    const double ppl = std::exp(nll_sum / n_scored);
    if (tty) {
      const double secs =
          std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
      std::fprintf(stderr, "\r[%d/%d] PPL so far %.4f (%.1f s)   ", chunk + 1, n_chunks, ppl, secs);
    }
    std::printf("[%d]%.4f%s", chunk + 1, ppl, chunk + 1 == n_chunks ? "\n" : ",");
    std::fflush(stdout);
  }
  if (tty) std::fprintf(stderr, "\n");
  if (logits_file != nullptr)
    check(std::fclose(logits_file) == 0, "--logits-out: cannot write ", logits_out);
  const double mean = nll_sum / n_scored;
  const double var = std::max(0.0, nll_sq_sum / n_scored - mean * mean);
  const double ppl = std::exp(mean);
  std::fprintf(stderr, "estimate: %.4f +/- %.4f over %lld scored tokens\n", ppl,
               ppl * std::sqrt(var / std::max<int64_t>(1, n_scored - 1)),
               static_cast<long long>(n_scored));
  std::printf("PPL = %.4f\n", ppl);
  return 0;
}

}  // namespace parspec
