#include "model/model_config.h"

#include <algorithm>
#include <cmath>

#include "core/error.h"
#include "model/gguf.h"

namespace parspec {

ModelConfig ModelConfig::from_gguf(const GgufFile& file) {
  ModelConfig c;
  const std::string& path = file.path();
  c.arch = file.get_string("general.architecture");
  if (!is_supported_architecture(c.arch))
    fail(path, ": unsupported architecture '", c.arch, "' (parspec supports ",
         supported_architectures(), ")");
  const std::string p = c.arch + ".";
  c.name = file.get_string("general.name", "");
  c.n_embd = static_cast<int>(file.get_int(p + "embedding_length"));
  c.n_layer = static_cast<int>(file.get_int(p + "block_count"));
  c.n_head = static_cast<int>(file.get_int(p + "attention.head_count"));
  c.n_head_kv = static_cast<int>(file.get_int(p + "attention.head_count_kv", c.n_head));
  c.n_ff = static_cast<int>(file.get_int(p + "feed_forward_length"));
  c.n_ctx_train = static_cast<int>(file.get_int(p + "context_length", 0));
  c.rms_eps = static_cast<float>(file.get_float(p + "attention.layer_norm_rms_epsilon", 1e-5));
  c.rope_freq_base = static_cast<float>(file.get_float(p + "rope.freq_base", 10000.0));

  check(c.n_embd > 0 && c.n_embd <= (1 << 16), path, ": bad embedding_length ", c.n_embd);
  check(c.n_layer > 0 && c.n_layer <= 1024, path, ": bad block_count ", c.n_layer);
  check(c.n_head > 0 && c.n_head <= 1024, path, ": bad attention.head_count ", c.n_head);
  check(c.n_head_kv > 0 && c.n_head % c.n_head_kv == 0, path, ": attention.head_count ", c.n_head,
        " is not a multiple of head_count_kv ", c.n_head_kv);
  check(c.n_ff > 0 && c.n_ff <= (1 << 20), path, ": bad feed_forward_length ", c.n_ff);
  check(c.n_embd % c.n_head == 0 || file.has(p + "attention.key_length"), path,
        ": embedding_length ", c.n_embd, " is not a multiple of head_count ", c.n_head);
  c.head_dim = static_cast<int>(file.get_int(p + "attention.key_length", c.n_embd / c.n_head));
  check(c.head_dim > 0 && c.head_dim % 2 == 0 && c.head_dim <= 1024, path, ": bad head dimension ",
        c.head_dim);
  c.rope_dims = static_cast<int>(file.get_int(p + "rope.dimension_count", c.head_dim));
  check(c.rope_dims > 0 && c.rope_dims % 2 == 0 && c.rope_dims <= c.head_dim, path,
        ": bad rope.dimension_count ", c.rope_dims);

  const std::string scaling = file.get_string(p + "rope.scaling.type", "none");
  if (scaling == "linear") {
    c.rope_linear_scale = static_cast<float>(file.get_float(p + "rope.scaling.factor"));
    check(c.rope_linear_scale > 0, path, ": bad rope.scaling.factor");
  } else if (scaling != "none") {
    fail(path, ": RoPE scaling '", scaling, "' is not supported (supported: none, linear, llama3)");
  }

  const GgufTensorInfo* embd = file.find_tensor("token_embd.weight");
  check(embd != nullptr, path, ": missing tensor token_embd.weight");
  check(embd->dims.size() == 2 && embd->dims[0] == c.n_embd, path,
        ": token_embd.weight has the wrong shape");
  c.n_vocab = static_cast<int>(embd->dims[1]);
  c.tied_embeddings = file.find_tensor("output.weight") == nullptr;

  if (const GgufTensorInfo* freqs = file.find_tensor("rope_freqs.weight")) {
    check(freqs->type == DType::F32 && freqs->n_elements == static_cast<uint64_t>(c.rope_dims / 2),
          path, ": rope_freqs.weight must be F32 with ", c.rope_dims / 2, " values");
    const float* data = reinterpret_cast<const float*>(file.tensor_data(*freqs));
    c.rope_freq_factors.assign(data, data + c.rope_dims / 2);
    for (float f : c.rope_freq_factors)
      check(f > 0, path, ": rope_freqs.weight has a non-positive value");
  }
  read_family_traits(file, c);
  c.moe = read_moe_config(file, c.arch, c.n_ff);
  return c;
}

float ModelConfig::attention_scale() const {
  return query_scale > 0 ? query_scale : 1.0f / std::sqrt(static_cast<float>(head_dim));
}

std::vector<std::string> tensor_names(const ModelConfig& c, bool with_rope_freqs) {
  std::vector<std::string> names = {"token_embd.weight", "output_norm.weight"};
  if (!c.tied_embeddings) names.push_back("output.weight");
  if (with_rope_freqs) names.push_back("rope_freqs.weight");
  if (!c.rope_factors_long.empty()) names.push_back("rope_factors_long.weight");
  if (!c.rope_factors_short.empty()) names.push_back("rope_factors_short.weight");
  for (int l = 0; l < c.n_layer; ++l) {
    const std::string p = "blk." + std::to_string(l) + ".";
    for (const char* t : {"attn_norm.weight", "attn_output.weight", "ffn_norm.weight"})
      names.push_back(p + t);
    if (c.fused_qkv) {
      names.push_back(p + "attn_qkv.weight");
    } else {
      for (const char* t : {"attn_q.weight", "attn_k.weight", "attn_v.weight"})
        names.push_back(p + t);
    }
    if (c.moe.enabled()) {
      for (std::string& name : moe_tensor_names(c.moe, p)) names.push_back(std::move(name));
    } else {
      for (const char* t : {"ffn_up.weight", "ffn_down.weight"}) names.push_back(p + t);
      if (!c.fused_gate_up) names.push_back(p + "ffn_gate.weight");
    }
    if (c.qkv_bias)
      for (const char* t : {"attn_q.bias", "attn_k.bias", "attn_v.bias"}) names.push_back(p + t);
    if (c.qk_norm)
      for (const char* t : {"attn_q_norm.weight", "attn_k_norm.weight"}) names.push_back(p + t);
    if (c.post_norms)
      for (const char* t : {"post_attention_norm.weight", "post_ffw_norm.weight"})
        names.push_back(p + t);
  }
  return names;
}

}  // namespace parspec
