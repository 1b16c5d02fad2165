// Reference tool, not part of the build: tokenizes every string of a JSON list
// with llama.cpp's own tokenizer (one model load) and prints the ids as JSON,
// so that parspec's tokenizer can be compared with llama.cpp's on the same GGUF.
// Built and run by scripts/record_llama_cpp_tokens.sh.
//   llama_cpp_tokenize VOCAB.gguf CASES.json  ->  {"parse_special": [[ids]...], "plain": [...]}
//   llama_cpp_tokenize VOCAB.gguf --time TEXT ->  encode speed (best of 5, thread CPU time)
#include <algorithm>
#include <cstdio>
#include <ctime>
#include <fstream>
#include <iterator>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "llama.h"

static void quiet(ggml_log_level, const char*, void*) {}

int main(int argc, char** argv) {
  if (argc != 3 && !(argc == 4 && std::string(argv[2]) == "--time")) {
    std::fprintf(stderr, "usage: %s VOCAB.gguf CASES.json | VOCAB.gguf --time TEXT\n", argv[0]);
    return 2;
  }
  llama_log_set(quiet, nullptr);
  llama_backend_init();
  llama_model_params params = llama_model_default_params();
  params.vocab_only = true;
  llama_model* model = llama_model_load_from_file(argv[1], params);
  if (!model) {
    std::fprintf(stderr, "cannot load %s\n", argv[1]);
    return 1;
  }
  const llama_vocab* vocab = llama_model_get_vocab(model);
  if (std::string(argv[2]) == "--time") {
    std::ifstream text_in(argv[3], std::ios::binary);
    const std::string text((std::istreambuf_iterator<char>(text_in)), {});
    std::vector<llama_token> ids(text.size() + 16);
    double best = 1e30;
    int n = 0;
    for (int rep = 0; rep < 5; ++rep) {
      timespec t0{}, t1{};
      clock_gettime(CLOCK_THREAD_CPUTIME_ID, &t0);
      n = llama_tokenize(vocab, text.data(), static_cast<int32_t>(text.size()), ids.data(),
                         static_cast<int32_t>(ids.size()), false, false);
      clock_gettime(CLOCK_THREAD_CPUTIME_ID, &t1);
      best = std::min(best, (t1.tv_sec - t0.tv_sec) + (t1.tv_nsec - t0.tv_nsec) * 1e-9);
    }
    std::printf("llama.cpp: %zu bytes -> %d tokens in %.3f s: %.2f MB/s\n", text.size(), n, best,
                text.size() / best / 1e6);
    llama_model_free(model);
    return 0;
  }
  std::ifstream in(argv[2]);
  const nlohmann::json cases = nlohmann::json::parse(in).at("cases");
  nlohmann::json out;
  for (bool parse_special : {true, false}) {
    nlohmann::json lists = nlohmann::json::array();
    for (const auto& c : cases) {
      const std::string text = c.get<std::string>();
      std::vector<llama_token> ids(text.size() * 2 + 8);
      const int n =
          llama_tokenize(vocab, text.data(), static_cast<int32_t>(text.size()), ids.data(),
                         static_cast<int32_t>(ids.size()), true, parse_special);
      if (n < 0) return 1;
      ids.resize(n);
      lists.push_back(ids);
    }
    out[parse_special ? "parse_special" : "plain"] = lists;
  }
  std::printf("%s\n", out.dump().c_str());
  llama_model_free(model);
  return 0;
}
