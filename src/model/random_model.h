#pragma once
// Writes random-weight GGUF models of every supported architecture (llama,
// qwen2, qwen3, gemma2, gemma3, phi3, qwen2moe, qwen3moe) of any shape and weight type, with a
// byte-level vocabulary, for tests, reference checks and speed measurements.
#include <cstdint>
#include <string>
#include <string_view>

#include "kernels/quant.h"

namespace parspec {

struct RandomModelSpec {
  std::string arch = "llama";  // llama, qwen2, qwen3, gemma2, gemma3, phi3, qwen2moe or qwen3moe
  int n_vocab = 512;           // >= 258: 256 byte tokens, BOS, EOS, then unused fillers
  int n_embd = 64;
  int n_layer = 2;
  int n_head = 4;
  int n_head_kv = 2;
  int n_ff = 128;
  int n_ctx = 2048;
  DType weight_type = DType::F32;  // linear layers and embeddings; norms stay F32
  // With weight_type Q4_K: Q6_K where llama.cpp's Q4_K_M puts it (the output
  // layer, and attn_v / ffn_down in a third of the layers), as in most
  // published Q4_K_M files.
  bool q4_k_m = false;
  bool tied_embeddings = false;    // no output.weight
  bool llama3_rope_freqs = false;  // adds rope_freqs.weight as Llama 3.1 converters do
  float rope_freq_base = 10000.0f;
  // Mixture of experts (model/moe.h): n_expert > 0 gives a llama file
  // Mixtral's expert FFNs, each n_ff wide; qwen2moe needs it and has experts
  // n_ff_expert wide (0: n_ff) plus a shared expert n_ff_shared wide (0: n_ff).
  int n_expert = 0;
  int n_expert_used = 0;
  int n_ff_expert = 0;
  int n_ff_shared = 0;
  uint64_t seed = 1;
  // The output layer's weights are N(0, logit_spread / sqrt(n_embd)): above 1,
  // peaked next-token distributions whose greedy choices are far from ties
  // (what comparisons with other implementations need).
  float logit_spread = 1.0f;
  // attention.sliding_window: 0 leaves the key out (llama: no window; gemma2:
  // llama.cpp's default 4096; phi3: none); gemma3 needs one (0 writes 4096).
  int sliding_window = 0;
  // Gemma's soft-capping keys (0: left out; the architecture's default applies).
  float attn_logit_softcap = 0.0f, final_logit_softcap = 0.0f;
  // phi3: LongRoPE factor tensors and keys for a model trained at this context
  // (0: none); the model's context stays n_ctx.
  int longrope_original_context = 0;
  // gemma3: linear RoPE scaling of the global layers (1: none).
  float rope_linear_scale = 1.0f;
};

void write_random_model(const RandomModelSpec& spec, const std::string& path);

// llama.cpp's general.file_type ("mostly <type>") for a file whose linear
// weights are all of one type. Throws Error for q8_K.
uint32_t gguf_file_type(DType type);
// llama.cpp's general.file_type of a Q4_K_M file (LLAMA_FTYPE_MOSTLY_Q4_K_M).
constexpr uint32_t kMostlyQ4_K_M = 15;

// Whether llama.cpp's Q4_K_M gives layer `layer` of `n_layer` its larger type
// for attn_v and ffn_down: the first and last eighth and every third between.
bool q4_k_m_more_bits(int layer, int n_layer);

// The type of matrix `name` (a GGUF tensor name) in a Q4_K_M file of `n_layer`
// layers, as llama.cpp mixes them: Q6_K for the output layer (the embeddings
// when they are tied to it), and for attn_v and the ffn_down matrices
// (ffn_down, ffn_down_exps, ffn_down_shexp) of the layers q4_k_m_more_bits
// picks; Q4_K for every other matrix.
DType q4_k_m_type(std::string_view name, int n_layer, bool tied_embeddings);

}  // namespace parspec
