#pragma once
// PPD's trained prompt tokens ("Hardware-Aware Parallel Prompt Decoding for
// Memory-Efficient Acceleration of LLM Inference"): the side file
// TARGET.ppd.gguf that models/zoo/ppd_train.py writes. k prompt tokens with E
// ensemble tokens each; virtual token j of prompt token i is row i*E + j of
// `ppd.prompt_embd`. Prompt token i, appended i+1 positions after a token,
// predicts the token i+2 after it; virtual token j sees the past, the token
// and virtual token j of prompt tokens 0..i (the ensemble mask); the logits of
// a prompt token's E virtual tokens are averaged.
#include <cstdint>
#include <string>
#include <vector>

#include "model/model.h"

namespace parspec {

struct PpdPrompts {
  std::string path;
  int prompt_tokens = 0;    // k
  int ensemble_tokens = 0;  // E
  int n_embd = 0;
  std::vector<float> embeddings;  // k*E rows of n_embd
  // rank_accuracy[i][r]: how often, on held-out text, the base model's greedy
  // token was prompt token i's r-th most likely token (empty when unmeasured).
  std::vector<std::vector<double>> rank_accuracy;
  uint64_t file_bytes = 0;

  const float* row(int prompt, int ensemble) const {
    return embeddings.data() + (static_cast<size_t>(prompt) * ensemble_tokens + ensemble) * n_embd;
  }

  // Throws Error naming the file and the problem (not a PPD side file, bad
  // shape, non-finite values).
  static PpdPrompts load(const std::string& path);
  // Throws Error when the prompts were not made for a model of this width.
  void check_fits(const Model& model) const;
};

// The side file's conventional name beside a model: "dir/x.gguf" -> "dir/x.ppd.gguf".
std::string ppd_side_file_for(const std::string& model_path);

// Writes a side file of random embeddings (rows of RMS `scale`, seeded) with
// made-up rank accuracies: tests and benchmarks of the mechanism, not of training.
void write_random_ppd_prompts(const std::string& path, int n_embd, int prompt_tokens,
                              int ensemble_tokens, uint64_t seed, float scale = 1.0f);

// Writes `source` widened to `n_embd` (rows zero-padded, every other key kept):
// the prompt tokens of a model inflated to that width (model/inflate.h pads
// the token embeddings the same way, so the function is unchanged).
void inflate_ppd_prompts(const std::string& source, int n_embd, const std::string& output);

}  // namespace parspec
