#pragma once
// Mixture-of-experts feed-forward blocks, as llama.cpp reads and runs them:
// Mixtral-style `llama` files with `expert_count`, `qwen2moe` (routed experts
// plus a shared expert behind a sigmoid gate) and `qwen3moe`.
//
// Per token: router logits = ffn_gate_inp · x, probabilities = softmax over
// all experts, the top `expert_used_count` of them (ties to the lower expert
// index), their probabilities renormalised to sum 1 where the family does so
// (llama, qwen3moe; not qwen2moe), and out = Σ_j w_j · down_j(silu(gate_j x) ⊙
// up_j x) summed in top-k order, plus the shared expert's output times
// sigmoid(ffn_gate_inp_shexp · x) for qwen2moe.
//
// Batch invariance: the router, the choice and the sum depend on the token's
// row only; each expert multiplies the rows routed to it with matmul(), whose
// row results do not depend on how many rows it gets (kernels/matmul.h).
#include <atomic>
#include <cstdint>
#include <string>
#include <vector>

#include "core/worker.h"
#include "kernels/matmul.h"

namespace parspec {

class GgufFile;

struct MoeConfig {
  int n_expert = 0;                // routed experts per layer; 0: a dense FFN
  int n_expert_used = 0;           // experts each token runs (top-k)
  int n_ff_expert = 0;             // hidden width of one routed expert
  int n_ff_shared = 0;             // hidden width of the shared expert; 0: none
  bool normalize_weights = false;  // renormalise the top-k probabilities to sum 1

  bool enabled() const { return n_expert > 0; }
};

// The expert keys of `arch` (expert_count, expert_used_count,
// expert_feed_forward_length, expert_shared_feed_forward_length) with
// llama.cpp's defaults; `n_ff` is the file's feed_forward_length. Throws Error
// naming what is missing or inconsistent.
MoeConfig read_moe_config(const GgufFile& file, const std::string& arch, int n_ff);

// Names of one layer's FFN tensors under `prefix` ("blk.N.").
std::vector<std::string> moe_tensor_names(const MoeConfig& moe, const std::string& prefix);

// One layer's experts: the router, one matrix view per expert into each 3-D
// tensor, and the shared expert where the family has one.
struct MoeWeights {
  WeightMatrix router;                       // [n_embd, n_expert]
  std::vector<WeightMatrix> gate, up, down;  // per expert
  WeightMatrix shared_gate, shared_up, shared_down;
  std::vector<float> shared_router;  // n_embd: the shared expert's gate logit weights
};

// Loads layer `layer`'s expert tensors; throws Error for a missing tensor or a
// shape that disagrees with the config.
MoeWeights load_moe_weights(const GgufFile& file, const MoeConfig& moe, int n_embd, int layer);

// Bytes of weights one token reads in a layer: the router, its top-k experts
// and the shared expert.
uint64_t moe_bytes_per_token(const MoeWeights& w, const MoeConfig& moe);

// How many experts the forwards touched: per layer pass, the number of
// distinct routed experts any row of the batch ran. Shared by every forward
// of a model (atomic counters); read differences around the forwards of
// interest.
struct ExpertTally {
  std::atomic<int64_t> layer_passes{0};
  std::atomic<int64_t> experts_touched{0};
};

// out (n × n_embd) = the MoE FFN of the normed rows xn (n × n_embd).
void moe_ffn(Worker& worker, const MoeConfig& moe, const MoeWeights& w, int n_embd, const float* xn,
             int n, float* out, ExpertTally& tally);

}  // namespace parspec
