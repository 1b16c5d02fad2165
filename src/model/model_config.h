#pragma once
// What a model needs, read once from GGUF metadata: its hyper-parameters and
// the traits of its architecture (model_families.cpp says which family has
// which), so the forward pass branches on traits, never on family names.
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "kernels/ops.h"
#include "model/moe.h"

namespace parspec {

class GgufFile;

enum class FfnActivation {
  kSilu,      // SwiGLU: silu(gate) * up
  kGeluTanh,  // GeGLU: gelu(gate) * up, GELU's tanh approximation (Gemma)
};

struct ModelConfig {
  std::string arch;  // general.architecture: llama, qwen2, qwen3, gemma2, gemma3, phi3,
                     // qwen2moe, qwen3moe
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

  // Architecture traits (model_families.cpp).
  bool qk_norm = false;          // RMSNorm of each q and k head before RoPE (qwen3, gemma3)
  bool post_norms = false;       // RMSNorm of the attention and FFN outputs (gemma2, gemma3)
  bool fused_qkv = false;        // one attn_qkv.weight: q, k, v rows in that order (phi3)
  bool fused_gate_up = false;    // ffn_up.weight of 2 * n_ff rows, gate then up (phi3)
  float embedding_scale = 1.0f;  // token embeddings are multiplied by it (Gemma: sqrt(n_embd))
  FfnActivation activation = FfnActivation::kSilu;
  float query_scale = 0.0f;          // attention score scale (0: 1 / sqrt(head_dim))
  float attn_logit_softcap = 0.0f;   // scores -> cap * tanh(scores / cap) (0: off)
  float final_logit_softcap = 0.0f;  // logits -> cap * tanh(logits / cap) (0: off)
  // Sliding-window attention: a query at position p sees keys at positions
  // p - sliding_window < q <= p in the layers marked in layer_sliding.
  int sliding_window = 0;
  std::vector<uint8_t> layer_sliding;  // n_layer flags (empty: no layer slides)
  // RoPE of the sliding layers where it differs (gemma3: base 10000, no
  // scaling); 0 / 1: the global values.
  float rope_freq_base_sliding = 0.0f;
  float rope_linear_scale_sliding = 1.0f;
  // Phi-3 LongRoPE: divisors per frequency for contexts beyond
  // rope_original_context (long) and within it (short), and the factor that
  // scales the rotated dimensions (rope.scaling.attn_factor).
  std::vector<float> rope_factors_long, rope_factors_short;
  int rope_original_context = 0;
  float rope_attn_factor = 1.0f;

  int q_dim() const { return n_head * head_dim; }
  bool sliding(int layer) const {
    return !layer_sliding.empty() && layer_sliding[static_cast<size_t>(layer)] != 0;
  }
  float attention_scale() const;
  int kv_dim() const { return n_head_kv * head_dim; }

  // Validates shapes and required keys; throws Error naming what is wrong.
  static ModelConfig from_gguf(const GgufFile& file);
};

// The tensor names a model of this config has (rope_freqs.weight only when
// `with_rope_freqs`): what the loader reads and inflation copies.
std::vector<std::string> tensor_names(const ModelConfig& c, bool with_rope_freqs);

// The architectures from_gguf accepts, for messages and docs.
const char* supported_architectures();
bool is_supported_architecture(std::string_view arch);
// Reads the traits of c.arch from `file` (model_families.cpp); c's common
// hyper-parameters are already read. Throws Error for what is missing or
// inconsistent.
void read_family_traits(const GgufFile& file, ModelConfig& c);

}  // namespace parspec
