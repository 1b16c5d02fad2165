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

#include "model/gguf.h"
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

  // Appends, below the cell `parent` (a node with `token` at `position`), the
  // ensemble mask's E chains of prompt tokens 0..m-1 (prompt token p at
  // position + 1 + p) to `batch`, whose first row becomes cell `first`.
  // Returns the rows: virtual token j of prompt token p at [p * E + j].
  std::vector<int32_t> append_rows(Batch& batch, int32_t token, int32_t position, int32_t parent,
                                   int32_t first, int m) const;
  // Prompt token p's logits averaged over its E virtual tokens (`rows` as
  // append_rows() returns them; `logits_of(row)`: that row's n_vocab logits).
  template <class LogitsOf>
  std::vector<float> mean_logits(const std::vector<int32_t>& rows, int p, size_t n_vocab,
                                 const LogitsOf& logits_of) const {
    std::vector<float> mean(n_vocab, 0.0f);
    for (int j = 0; j < ensemble_tokens; ++j) {
      const float* row = logits_of(rows[static_cast<size_t>(p) * ensemble_tokens + j]);
      for (size_t t = 0; t < n_vocab; ++t) mean[t] += row[t];
    }
    for (float& v : mean) v /= static_cast<float>(ensemble_tokens);
    return mean;
  }
};

// Whether a GGUF file is a PPD side file (its general.architecture).
bool is_ppd_side_file(const GgufFile& file);

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
