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

// A small random target and a draft that is the same weights quantized more
// coarsely: it agrees with the target often but not always, like a real drafter.
// `arch` is a file architecture, or "mixtral": a llama file with experts.
inline ModelPair make_model_pair(const TempDir& dir, const std::string& arch, DType target_type,
                                 DType draft_type, int n_vocab, uint64_t seed) {
  RandomModelSpec spec;
  spec.arch = arch == "mixtral" ? "llama" : arch;
  if (arch == "mixtral" || arch == "qwen2moe" || arch == "qwen3moe") {
    spec.n_expert = 4;
    spec.n_expert_used = 2;
  }
  if (arch == "qwen2moe" || arch == "qwen3moe") spec.n_ff_expert = 64;
  if (arch == "qwen2moe") spec.n_ff_shared = 96;
  spec.n_vocab = n_vocab;
  spec.n_embd = 64;
  spec.n_ff = 128;
  spec.n_layer = 2;
  spec.n_head = 4;
  spec.n_head_kv = 2;
  spec.seed = seed;
  spec.weight_type = target_type;
  auto target = Model::load(write_model(dir, arch + "-target.gguf", spec));
  spec.weight_type = draft_type;
  auto draft = Model::load(write_model(dir, arch + "-draft.gguf", spec));
  return {target, draft};
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
