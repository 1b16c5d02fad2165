// The architectures parspec runs and what each needs beyond the common
// hyper-parameters: one function per family, reading the GGUF keys and
// tensors as llama.cpp's converters write them, and setting the traits the
// forward pass follows (model_config.h).
#include <cmath>
#include <string>
#include <string_view>

#include "core/error.h"
#include "model/gguf.h"
#include "model/model_config.h"

namespace parspec {

namespace {

// A per-frequency factor tensor (F32, rope_dims / 2 positive values), or
// empty when the file has none.
std::vector<float> read_rope_factors(const GgufFile& file, const ModelConfig& c,
                                     const std::string& name) {
  const GgufTensorInfo* t = file.find_tensor(name);
  if (t == nullptr) return {};
  const auto n = static_cast<uint64_t>(c.rope_dims / 2);
  check(t->type == DType::F32 && t->n_elements == n, file.path(), ": ", name, " must be F32 with ",
        n, " values (rope.dimension_count / 2)");
  const float* data = reinterpret_cast<const float*>(file.tensor_data(*t));
  std::vector<float> out(data, data + n);
  for (float f : out) check(f > 0 && std::isfinite(f), file.path(), ": ", name, " has a bad value");
  return out;
}

int read_sliding_window(const GgufFile& file, const ModelConfig& c, int fallback) {
  const int64_t w = file.get_int(c.arch + ".attention.sliding_window", fallback);
  check(w >= 0 && w <= (int64_t{1} << 30), file.path(), ": bad ", c.arch,
        ".attention.sliding_window ", w);
  return static_cast<int>(w);
}

void slide_layers(ModelConfig& c, int window, bool (*slides)(int layer)) {
  c.sliding_window = window;
  if (window == 0) return;
  c.layer_sliding.assign(static_cast<size_t>(c.n_layer), 0);
  for (int l = 0; l < c.n_layer; ++l) c.layer_sliding[static_cast<size_t>(l)] = slides(l) ? 1 : 0;
}

float read_softcap(const GgufFile& file, const std::string& key, double fallback) {
  const double cap = file.get_float(key, fallback);
  check(cap >= 0 && std::isfinite(cap), file.path(), ": bad ", key, " ", cap);
  return static_cast<float>(cap);
}

// Gemma's shared traits: embeddings scaled by sqrt(n_embd), GeGLU, norms
// before and after each block (the converter stores Gemma's (1 + w) norm
// weights as w + 1, so they are plain RMSNorm weights here).
void gemma_common(ModelConfig& c) {
  c.rope_style = RopeStyle::kNeox;
  c.embedding_scale = std::sqrt(static_cast<float>(c.n_embd));
  c.activation = FfnActivation::kGeluTanh;
  c.post_norms = true;
}

// llama.cpp's query scale for Gemma: 1/sqrt(head_dim), but 1/sqrt(n_embd / n_head) for the 27B
// models (told apart by their layer count), as Google's query_pre_attn_scalar has it.
float gemma_query_scale(const ModelConfig& c, int layers_of_27b) {
  const int scalar = c.n_layer == layers_of_27b ? c.n_embd / c.n_head : c.head_dim;
  return 1.0f / std::sqrt(static_cast<float>(scalar));
}

void read_llama(const GgufFile& file, ModelConfig& c) {
  c.rope_style = RopeStyle::kAdjacent;
  // Mistral-style files: every layer attends within the window.
  slide_layers(c, read_sliding_window(file, c, 0), [](int) { return true; });
}

void read_qwen2(const GgufFile&, ModelConfig& c) {
  c.rope_style = RopeStyle::kNeox;
  c.qkv_bias = true;
}

void read_qwen3(const GgufFile&, ModelConfig& c) {
  c.rope_style = RopeStyle::kNeox;
  c.qk_norm = true;
}

// The mixture-of-experts families (their experts: moe.h): qwen2moe has
// qwen2's attention, qwen3moe qwen3's.
void read_qwen2moe(const GgufFile& file, ModelConfig& c) {
  read_qwen2(file, c);
}

void read_qwen3moe(const GgufFile& file, ModelConfig& c) {
  read_qwen3(file, c);
}

void read_gemma2(const GgufFile& file, ModelConfig& c) {
  gemma_common(c);
  c.query_scale = gemma_query_scale(c, 46);
  // Defaults as llama.cpp's for files without the keys (Gemma 2's own values).
  c.attn_logit_softcap = read_softcap(file, "gemma2.attn_logit_softcapping", 50.0);
  c.final_logit_softcap = read_softcap(file, "gemma2.final_logit_softcapping", 30.0);
  // Even layers slide, odd layers are global.
  slide_layers(c, read_sliding_window(file, c, 4096), [](int l) { return l % 2 == 0; });
}

void read_gemma3(const GgufFile& file, ModelConfig& c) {
  gemma_common(c);
  c.qk_norm = true;
  c.query_scale = gemma_query_scale(c, 62);
  c.final_logit_softcap = read_softcap(file, "gemma3.final_logit_softcapping", 0.0);
  check(file.has("gemma3.attention.sliding_window"), file.path(),
        ": missing gemma3.attention.sliding_window");
  // Five sliding layers, then a global one; the sliding layers rotate with
  // base 10000 and no scaling, the global ones with the file's base and scaling.
  slide_layers(c, read_sliding_window(file, c, 0), [](int l) { return (l + 1) % 6 != 0; });
  c.rope_freq_base_sliding = 10000.0f;
  c.rope_linear_scale_sliding = 1.0f;
}

void read_phi3(const GgufFile& file, ModelConfig& c) {
  c.rope_style = RopeStyle::kNeox;
  c.fused_qkv = true;
  c.fused_gate_up = true;
  check(file.find_tensor("blk.0.attn_qkv.weight") != nullptr, file.path(),
        ": phi3 needs fused blk.N.attn_qkv.weight tensors");
  check(c.q_dim() == c.n_embd, file.path(),
        ": phi3 needs head_count * head size == embedding_length");
  // Files without the key: llama.cpp's default for Phi-3 mini/medium 4k (2047); no window
  // otherwise.
  const bool phi3_4k = (c.n_layer == 32 || c.n_layer == 40) && c.n_ctx_train == 4096;
  slide_layers(c, read_sliding_window(file, c, phi3_4k ? 2047 : 0), [](int) { return true; });
  c.rope_factors_long = read_rope_factors(file, c, "rope_factors_long.weight");
  c.rope_factors_short = read_rope_factors(file, c, "rope_factors_short.weight");
  check(c.rope_factors_long.empty() == c.rope_factors_short.empty(), file.path(),
        ": rope_factors_long.weight and rope_factors_short.weight come as a pair");
  c.rope_original_context =
      static_cast<int>(file.get_int("phi3.rope.scaling.original_context_length", c.n_ctx_train));
  c.rope_attn_factor = static_cast<float>(file.get_float("phi3.rope.scaling.attn_factor", 1.0));
  check(c.rope_attn_factor > 0 && std::isfinite(c.rope_attn_factor), file.path(),
        ": bad phi3.rope.scaling.attn_factor");
}

struct Family {
  const char* arch;
  void (*read)(const GgufFile&, ModelConfig&);
};

constexpr Family kFamilies[] = {
    {"llama", read_llama},       {"qwen2", read_qwen2},       {"qwen3", read_qwen3},
    {"gemma2", read_gemma2},     {"gemma3", read_gemma3},     {"phi3", read_phi3},
    {"qwen2moe", read_qwen2moe}, {"qwen3moe", read_qwen3moe},
};

}  // namespace

const char* supported_architectures() {
  return "llama, qwen2, qwen3, gemma2, gemma3, phi3, qwen2moe, qwen3moe";
}

bool is_supported_architecture(std::string_view arch) {
  for (const Family& f : kFamilies)
    if (arch == f.arch) return true;
  return false;
}

void read_family_traits(const GgufFile& file, ModelConfig& c) {
  for (const Family& f : kFamilies) {
    if (c.arch != f.arch) continue;
    f.read(file, c);
    check(c.sliding_window == 0 || !c.layer_sliding.empty(), file.path(), ": bad sliding window");
    return;
  }
  fail(file.path(), ": unsupported architecture '", c.arch, "' (parspec supports ",
       supported_architectures(), ")");
}

}  // namespace parspec
