#pragma once
// A loaded model (read-only after load, shareable between workers
// and sequences) and its forward pass over a batch of speculative cells.
#include <atomic>
#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "core/worker.h"
#include "kernels/matmul.h"
#include "model/gguf.h"
#include "model/kv_cache.h"
#include "model/model_config.h"

namespace parspec {

// Tokens to run through the model. Every entry becomes a new speculative cell
// of the KV cache (ids n_spec() .. n_spec()+size()-1 at call time) and attends
// to the committed prefix, its ancestors through `parents`, and itself.
// A chain is each entry the parent of the next; a tree is the general case.
struct Batch {
  std::vector<int32_t> tokens;
  std::vector<int32_t> positions;
  std::vector<int32_t> parents;  // speculative cell id, or -1 (the committed prefix)
  std::vector<uint8_t> want_logits;
  // Optional, empty or one per entry: n_embd floats that replace the entry's
  // token embedding when non-null (trained prompt embeddings, e.g. PPD's);
  // the token then only names the entry. The pointed-to data must outlive the forward.
  std::vector<const float*> input_embeddings;

  size_t size() const { return tokens.size(); }
  void add(int32_t token, int32_t position, int32_t parent, bool logits);
  // A chain continuing the committed prefix of `kv` (which must have no
  // speculative cells): positions n_committed.., logits for all entries or
  // only the last.
  static Batch chain(const KvCache& kv, std::span<const int32_t> tokens, bool all_logits);
};

// One attention block's projections, row-major per batch entry.
struct AttentionProbe {
  std::vector<float> q, k, v;
};

struct LayerWeights {
  std::vector<float> attn_norm, ffn_norm;
  std::vector<float> bq, bk, bv;                     // empty without biases
  std::vector<float> q_norm, k_norm;                 // per head (head_dim), empty without qk_norm
  std::vector<float> post_attn_norm, post_ffn_norm;  // empty without post_norms
  // wq/wk/wv, or wqkv (fused_qkv); w_gate and w_up, or w_up alone with 2 * n_ff rows
  // (fused_gate_up).
  WeightMatrix wq, wk, wv, wqkv, wo, w_gate, w_up, w_down;  // w_gate/up/down: a dense FFN only
  MoeWeights moe;                                           // a mixture-of-experts FFN only
};

// One set of RoPE frequencies (per rotated pair, scaling folded in), and the
// factor its cosines and sines are multiplied by.
struct RopeTable {
  std::vector<float> inv_freq;
  float mscale = 1.0f;
  // Unique per table in the process: keys the per-thread memo of rope angles.
  uint64_t key = 0;
};

class Model {
 public:
  // `loading`: whether the file is mapped or read into memory (GgufFile::open).
  static std::shared_ptr<Model> load(const std::string& path,
                                     WeightLoading loading = WeightLoading::kAuto);
  // The same checks and set-up over a file already opened (or built in
  // memory: the loader's fuzzer); the model keeps the file.
  static std::shared_ptr<Model> from_gguf(std::unique_ptr<GgufFile> file);

  const ModelConfig& config() const { return config_; }
  const GgufFile& gguf() const { return *file_; }
  // Reads the weights of layers [layer_first, layer_last), and the output
  // matrix when `output`, from a mapped file into memory backed by 2 MiB pages
  // (GgufFile::hold_in_memory: the addresses stay) — an MPI stage's own share —
  // repacked as Model::load repacks a copied file's. Call before forwards start
  // (it changes the kernels that read those weights).
  void hold_in_memory(int layer_first, int layer_last, bool output) const;
  // Bytes of weights read per token (for roofline estimates).
  uint64_t weight_bytes() const { return weight_bytes_; }
  // Bytes of weights repacked at load into the tile layout (kernels/repack.h):
  // the Q4_0/Q8_0 matrices of a file read into memory (GgufFile::copied) or
  // held in memory (hold_in_memory), unless PARSPEC_REPACK=0. The rest of a
  // mapped file stays as the file has it.
  uint64_t repacked_bytes() const { return repacked_bytes_; }
  // Of a mixture-of-experts model: the distinct experts its forwards touched,
  // per layer pass, counted since load (for every forward of every sequence).
  const ExpertTally& expert_tally() const { return expert_tally_; }

  // The weights as loaded, for a backend that keeps its own copy (src/cuda).
  const WeightMatrix& token_embedding() const { return token_embd_; }
  const WeightMatrix& output_matrix() const { return output_; }
  const std::vector<float>& output_norm() const { return output_norm_; }
  const LayerWeights& layer(int l) const { return layers_.at(l); }
  // The RoPE frequencies of the global (non-sliding) layers at the model's
  // original context.
  const RopeTable& rope_global() const { return rope_global_; }

  // Full pass: embed → all layers → norm → logits. Returns logits (n_vocab
  // floats each) for the entries with want_logits, in batch order. The batch's
  // cells are appended to kv's speculative area; commit them with kv.commit().
  std::vector<float> forward(Worker& worker, const Batch& batch, KvCache& kv) const;

  // One sequence's part of a multi-sequence forward.
  struct SequenceBatch {
    const Batch* batch;
    KvCache* kv;
  };
  // Several sequences in one pass (a server's continuous batching): the matrix
  // multiplies run over all sequences' rows at once, attention per sequence on
  // its own cache. Batch invariance makes each sequence's logits bit-identical
  // to forward(worker, *batch, *kv). Returns one logits vector per sequence.
  // Defined in model_multi.cpp.
  std::vector<std::vector<float>> forward_multi(Worker& worker,
                                                std::span<const SequenceBatch> sequences) const;

  // Pieces for pipeline stages and layer-parallel drafting. Hidden states are
  // batch.size() × n_embd, row-major. `first_cell` is what kv.add_cells returned
  // for this batch.
  void embed(std::span<const int32_t> tokens, float* hidden) const;
  void forward_layers(Worker& worker, const Batch& batch, KvCache& kv, int32_t first_cell,
                      int layer_first, int layer_last, float* hidden) const;
  // h += attention(norm(h)) of one layer; h += mlp(norm(h)) of one layer.
  void attention_block(Worker& worker, int layer, const Batch& batch, KvCache& kv,
                       int32_t first_cell, float* hidden) const;
  // attention(norm(h)) of one layer into `out` (batch.size() × n_embd), without
  // the residual: layer-parallel drafting runs several layers' attention on the
  // same input. Writes the layer's KV rows of the batch's cells; `probe`, when
  // given, receives the batch's q and k (after RoPE) and v.
  void attention_output(Worker& worker, int layer, const Batch& batch, KvCache& kv,
                        int32_t first_cell, const float* hidden, float* out,
                        AttentionProbe* probe = nullptr) const;
  void mlp_block(Worker& worker, int layer, int n_tokens, float* hidden) const;

  // The context size the model runs at (a tool's -c): Phi-3 LongRoPE files use
  // their long factors beyond their original context and the short ones within
  // it, as llama.cpp chooses by its context size. Call before forwards start;
  // without a call, the short factors. One choice for every sequence, so that
  // every strategy computes the same function whatever its cache size.
  void use_context_size(int n_ctx) const;
  bool long_rope() const { return long_rope_.load(std::memory_order_relaxed); }
  // The FFN of n normed rows xn into out (n × n_embd), without the residual:
  // SwiGLU, or the layer's experts (moe.h).
  void ffn_rows(Worker& worker, int layer, const float* xn, int n, float* out) const;
  // Final norm + output projection for n rows of hidden state.
  void output_logits(Worker& worker, const float* hidden, int n, float* logits) const;

 private:
  Model() = default;
  // The first half of a layer's attention for n rows: q, k, v of
  // norm(hidden) with biases and RoPE at `positions` (xn: scratch, n × n_embd).
  // attention_output and forward_multi share it, so both compute the same rows.
  void project_qkv(Worker& worker, int layer, const float* hidden, int n,
                   std::span<const int32_t> positions, float* xn, float* q, float* k,
                   float* v) const;
  // out = post_norm(wo · att) for n rows (the post-norm only where the family has one).
  void attention_projection(Worker& worker, int layer, const float* att, int n, float* out) const;
  // Which RoPE table a layer uses.
  const RopeTable& rope_table(int layer) const;
  ModelConfig config_;
  std::unique_ptr<GgufFile> file_;
  WeightMatrix token_embd_, output_;
  std::vector<float> output_norm_;
  std::vector<LayerWeights> layers_;
  // Global layers', sliding layers' (where they differ), and LongRoPE's long
  // factors' (where the file has them).
  RopeTable rope_global_, rope_sliding_, rope_long_;
  mutable std::atomic<bool> long_rope_{false};  // use_context_size's choice
  uint64_t weight_bytes_ = 0;
  // After hold_in_memory: the matrices whose tensors the file repacked read them packed.
  void adopt_repacked_weights();
  uint64_t repacked_bytes_ = 0;
  mutable ExpertTally expert_tally_;
};

}  // namespace parspec
