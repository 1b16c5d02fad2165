#pragma once
// Hyper-parameters of a llama-family model, read from GGUF metadata.
#include <cstdint>
#include <string>
#include <vector>

#include "kernels/ops.h"
#include "model/moe.h"

namespace parspec {

class GgufFile;

struct ModelConfig {
  std::string arch;  // "llama", "qwen2" or "qwen2moe"
  std::string name;
  int n_vocab = 0;
  int n_embd = 0;
  int n_layer = 0;
  int n_head = 0;
  int n_head_kv = 0;
  int head_dim = 0;
  int n_ff = 0;
  int n_ctx_train = 0;
  float rms_eps = 1e-5f;
  float rope_freq_base = 10000.0f;
  float rope_linear_scale = 1.0f;  // positions are divided by this ("linear" scaling)
  int rope_dims = 0;               // rotated dimensions per head (usually head_dim)
  RopeStyle rope_style = RopeStyle::kAdjacent;
  bool qkv_bias = false;
  bool tied_embeddings = false;
  std::vector<float> rope_freq_factors;  // llama3 scaling: divisors per frequency (empty: none)
  MoeConfig moe;                         // experts in place of the dense FFN (moe.h)

  int q_dim() const { return n_head * head_dim; }
  int kv_dim() const { return n_head_kv * head_dim; }

  // Validates shapes and required keys; throws Error naming what is wrong.
  static ModelConfig from_gguf(const GgufFile& file);
};

// The tensor names a model of this config has (rope_freqs.weight
// only when `with_rope_freqs`): what the loader reads and inflation copies.
std::vector<std::string> tensor_names(const ModelConfig& c, bool with_rope_freqs);

}  // namespace parspec
