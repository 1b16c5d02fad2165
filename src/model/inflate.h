#pragma once
// Embeds a trained llama/qwen2 model into a larger shape that computes the same
// function: a benchmark device that gives a realistically sized target/drafter
// pair (memory traffic and compute of a dense model of the large shape) whose
// next-token predictions, and so acceptance rates, are those of trained models.
//
// The source's weights occupy the leading rows/columns of each tensor, every
// other weight is zero; the layers beyond the source's are identities through
// the residual (zero attention output and down projections); RMSNorm weights
// and epsilon are rescaled so the norm over the zero-padded width gives the
// source's values; query heads keep their key/value group and the head
// dimension is unchanged. Kernels must not skip the zero weights for this to
// cost what a dense model costs (parspec's do not).
#include <optional>
#include <string>

#include "kernels/quant.h"

namespace parspec {

// The larger shape. A zero field keeps the source's value (n_embd, n_layer,
// n_ff) or is derived (n_head = n_embd / source head_dim, n_head_kv = n_head /
// source group size).
struct InflateShape {
  int n_embd = 0;
  int n_layer = 0;
  int n_ff = 0;
  int n_head = 0;
  int n_head_kv = 0;
};

// Shapes of well-known model sizes ("100m", "1b", "3b", "8b"), expressed for a
// source head dimension: widths, depth and the query/key-value widths of the
// real model (e.g. Llama 3.1 8B: 4096 wide, 32 layers, n_ff 14336, kv width
// 1024), heads sized to the source's head dimension. Throws Error for an
// unknown name or a head dimension that does not divide the widths.
InflateShape inflate_preset(const std::string& name, int head_dim);
// "100m, 1b, 3b, 8b", for help texts.
const char* inflate_preset_names();

struct InflateOptions {
  InflateShape shape;
  // > 0: each layer's FFN becomes this many identical experts (a Mixtral-style
  // llama file, model/moe.h) of which every token runs `experts_used`, routed
  // by a random router: the renormalised top-k weights sum to 1, so the model
  // keeps the source's function (up to float rounding) and gets a
  // mixture-of-experts model's cost, the experts a batch touches growing with
  // its tokens. Needs a llama source.
  int experts = 0;
  int experts_used = 0;
  uint64_t router_seed = 1;
  // > 0: the training context written to the file (benchmarks of long prompts;
  // positions past the source's training only change quality, not cost or exactness).
  int context_length = 0;
  std::optional<DType> weight_type;  // linear weights and embeddings; default: the source's
  // Instead of weight_type: llama.cpp's Q4_K_M mix (Q4_K, and Q6_K for the
  // output layer and the attn_v and ffn_down that q4_k_m_more_bits picks).
  bool q4_k_m = false;
  bool progress = false;  // a progress line on stderr (for a terminal)
};

// Reads `source_path`, writes the inflated model to `output_path`. Throws Error
// naming the problem for a smaller target shape, an incompatible head
// dimension or GQA grouping, or a shape the weight type cannot hold.
void inflate_model(const std::string& source_path, const InflateOptions& options,
                   const std::string& output_path);

}  // namespace parspec
