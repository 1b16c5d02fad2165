// Reference tool, not part of the build: greedy decoding with llama.cpp's own
// forward pass, so that parspec's can be compared with it on the same GGUF file.
// The prompt is tokenized by llama.cpp (BOS added); each step takes the argmax
// of the logits (the lowest id among equal maxima, as parspec's greedy sampler).
// Built and run by scripts/check_families_llama_cpp.sh.
//   llama_cpp_greedy MODEL.gguf CTX N_PREDICT PROMPT  ->  {"prompt": [ids], "tokens": [ids]}
#include <cstdio>
#include <cstdlib>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "llama.h"

static void quiet(ggml_log_level, const char*, void*) {}

int main(int argc, char** argv) {
  if (argc != 5) {
    std::fprintf(stderr, "usage: %s MODEL.gguf CTX N_PREDICT PROMPT\n", argv[0]);
    return 2;
  }
  llama_log_set(quiet, nullptr);
  llama_backend_init();
  llama_model* model = llama_model_load_from_file(argv[1], llama_model_default_params());
  if (!model) {
    std::fprintf(stderr, "cannot load %s\n", argv[1]);
    return 1;
  }
  const llama_vocab* vocab = llama_model_get_vocab(model);
  llama_context_params cparams = llama_context_default_params();
  cparams.n_ctx = static_cast<uint32_t>(std::atoi(argv[2]));
  cparams.n_batch = cparams.n_ctx;
  cparams.n_threads = 1;
  cparams.n_threads_batch = 1;
  llama_context* ctx = llama_init_from_model(model, cparams);
  if (!ctx) {
    std::fprintf(stderr, "cannot create a context\n");
    return 1;
  }
  const std::string prompt = argv[4];
  std::vector<llama_token> ids(prompt.size() + 8);
  const int n = llama_tokenize(vocab, prompt.data(), static_cast<int32_t>(prompt.size()),
                               ids.data(), static_cast<int32_t>(ids.size()), true, false);
  if (n < 0) return 1;
  ids.resize(n);
  const int n_vocab = llama_vocab_n_tokens(vocab);
  const int n_predict = std::atoi(argv[3]);
  std::vector<llama_token> generated;
  std::vector<llama_token> next = ids;
  for (int step = 0; step < n_predict; ++step) {
    if (llama_decode(ctx, llama_batch_get_one(next.data(), static_cast<int32_t>(next.size())))) {
      std::fprintf(stderr, "llama_decode failed\n");
      return 1;
    }
    const float* logits = llama_get_logits_ith(ctx, -1);
    int best = 0;
    for (int t = 1; t < n_vocab; ++t)
      if (logits[t] > logits[best]) best = t;
    generated.push_back(best);
    next = {best};
  }
  nlohmann::json out;
  out["prompt"] = ids;
  out["tokens"] = generated;
  std::printf("%s\n", out.dump().c_str());
  llama_free(ctx);
  llama_model_free(model);
  return 0;
}
