// Reference tool, not part of the build: greedy continuations by llama.cpp of
// prompts given as token ids (no tokenizer in between), printed as JSON, so
// that parspec's forward can be compared with llama.cpp's on the same GGUF.
// Built and run by scripts/check_moe_llama_cpp.sh.
//   llama_cpp_greedy_ids MODEL.gguf N_PREDICT '[[ids], ...]'  ->  [[ids], ...]
#include <algorithm>
#include <cstdio>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "llama.h"

static void quiet(ggml_log_level, const char*, void*) {}

int main(int argc, char** argv) {
  if (argc != 4) {
    std::fprintf(stderr, "usage: %s MODEL.gguf N_PREDICT '[[ids], ...]'\n", argv[0]);
    return 2;
  }
  llama_log_set(quiet, nullptr);
  llama_backend_init();
  llama_model* model = llama_model_load_from_file(argv[1], llama_model_default_params());
  if (!model) {
    std::fprintf(stderr, "cannot load %s\n", argv[1]);
    return 1;
  }
  const int n_predict = std::stoi(argv[2]);
  const int n_vocab = llama_vocab_n_tokens(llama_model_get_vocab(model));
  const nlohmann::json prompts = nlohmann::json::parse(argv[3]);
  nlohmann::json out = nlohmann::json::array();
  for (const auto& prompt : prompts) {
    llama_context_params cparams = llama_context_default_params();
    cparams.n_ctx = 512;
    cparams.n_batch = 512;
    cparams.n_threads = 1;
    cparams.n_threads_batch = 1;
    llama_context* ctx = llama_init_from_model(model, cparams);
    std::vector<llama_token> tokens = prompt.get<std::vector<llama_token>>();
    std::vector<llama_token> generated;
    llama_batch batch = llama_batch_get_one(tokens.data(), static_cast<int32_t>(tokens.size()));
    llama_token next = 0;
    for (int i = 0; i < n_predict; ++i) {
      if (llama_decode(ctx, batch) != 0) {
        std::fprintf(stderr, "llama_decode failed\n");
        return 1;
      }
      const float* logits = llama_get_logits_ith(ctx, -1);
      next = static_cast<llama_token>(std::max_element(logits, logits + n_vocab) - logits);
      generated.push_back(next);
      batch = llama_batch_get_one(&next, 1);
    }
    out.push_back(generated);
    llama_free(ctx);
  }
  std::printf("%s\n", out.dump().c_str());
  llama_model_free(model);
  return 0;
}
