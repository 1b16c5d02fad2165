#pragma once
// Shared by the tests: temporary random models (and target/draft pairs) and bitwise comparisons.
#include <unistd.h>

#include <cstring>
#include <filesystem>
#include <memory>
#include <string>
#include <vector>

#include "decode/strategy.h"
#include "model/model.h"
#include "model/random_model.h"

namespace parspec::testing_support {

// A directory under the system temp dir, removed with everything in it at exit of scope.
class TempDir {
 public:
  TempDir() {
    std::string tmpl = (std::filesystem::temp_directory_path() / "parspec-test-XXXXXX").string();
    path_ = mkdtemp(tmpl.data());
  }
  ~TempDir() {
    std::error_code ec;
    std::filesystem::remove_all(path_, ec);
  }
  std::string file(const std::string& name) const {
    return (std::filesystem::path(path_) / name).string();
  }

 private:
  std::string path_;
};

inline std::string write_model(const TempDir& dir, const std::string& name, RandomModelSpec spec) {
  const std::string path = dir.file(name);
  write_random_model(spec, path);
  return path;
}

struct ModelPair {
  std::shared_ptr<const Model> target, draft;
};

// The traits of one model per family for exactness tests, by name: an
// architecture, "llama_sliding" (a Mistral-style llama) or "mixtral" (a llama
// file with experts). Windows are
// shorter than the tests' sequences so that sliding layers drop keys;
// Gemma 2's caps are ones random scores and logits reach; Gemma 3 has six
// layers, so one is global.
inline RandomModelSpec family_spec(const std::string& name) {
  RandomModelSpec spec;
  spec.arch = name == "llama_sliding" || name == "mixtral" ? "llama" : name;
  if (name == "mixtral" || name == "qwen2moe" || name == "qwen3moe") {
    spec.n_expert = 4;
    spec.n_expert_used = 2;
  }
  if (name == "qwen2moe" || name == "qwen3moe") spec.n_ff_expert = 64;
  if (name == "qwen2moe") spec.n_ff_shared = 96;
  if (name == "llama_sliding" || name == "phi3" || name == "gemma2" || name == "gemma3")
    spec.sliding_window = 6;
  if (name == "gemma2") {
    spec.attn_logit_softcap = 2.0f;
    spec.final_logit_softcap = 3.0f;
  }
  return spec;
}

// The families the exactness tests run every strategy on.
inline std::vector<std::string> family_names() {
  return {"llama",  "qwen2", "qwen3",   "llama_sliding", "gemma2",
          "gemma3", "phi3",  "mixtral", "qwen2moe",      "qwen3moe"};
}

// A small random target and a draft that is the same weights quantized more
// coarsely: it agrees with the target often but not always, like a real drafter.
// `family`: a name family_spec knows.
inline ModelPair make_model_pair(const TempDir& dir, const std::string& family, DType target_type,
                                 DType draft_type, int n_vocab, uint64_t seed) {
  RandomModelSpec spec = family_spec(family);
  const std::string& arch = family;
  spec.n_vocab = n_vocab;
  spec.n_embd = 64;
  spec.n_ff = 128;
  spec.n_layer = spec.arch == "gemma3" ? 6 : 2;
  spec.n_head = 4;
  spec.n_head_kv = 2;
  spec.seed = seed;
  spec.weight_type = target_type;
  auto target = Model::load(write_model(dir, arch + "-target.gguf", spec));
  spec.weight_type = draft_type;
  auto draft = Model::load(write_model(dir, arch + "-draft.gguf", spec));
  return {target, draft};
}

// A strategy config on `pair`: the target on `target_worker`, the draft on
// `draft_worker`, room for `ctx_size` tokens.
inline StrategyConfig pair_config(const ModelPair& pair, Worker& target_worker,
                                  Worker& draft_worker, int ctx_size) {
  StrategyConfig config;
  config.target = pair.target;
  config.draft = pair.draft;
  config.target_worker = &target_worker;
  config.draft_worker = &draft_worker;
  config.ctx_size = ctx_size;
  return config;
}

// Sampling at temperature `temp` with no truncation (top-k, top-p, min-p off):
// the distribution the sampling-exactness checks compare strategies on.
inline SamplingParams untruncated_sampling(float temp) {
  SamplingParams params;
  params.temp = temp;
  params.top_k = 0;
  params.top_p = 1.0f;
  params.min_p = 0.0f;
  return params;
}

inline bool bitwise_equal(const float* a, const float* b, size_t n) {
  return std::memcmp(a, b, n * sizeof(float)) == 0;
}

// PipeDec and its two baselines as the exactness tests run them, in one
// process (tests/decode) and on MPI pipelines (tests/dist).
inline std::vector<StrategyConfig> pipeline_strategy_variants() {
  std::vector<StrategyConfig> v;
  StrategyConfig c;
  c.name = "pp";
  v.push_back(c);
  c.name = "stpp";
  c.tree_depth = 2;
  c.tree_branch = 3;
  v.push_back(c);
  c = StrategyConfig();
  c.name = "pipedec";
  c.tree_depth = 3;
  c.tree_width = 4;
  c.tree_branch = 2;
  v.push_back(c);
  return v;
}

}  // namespace parspec::testing_support
