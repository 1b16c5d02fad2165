#pragma once
// Where forwards are executed: the one seam between what runs a model (the
// decoding sides, the server's batcher, MPI pipeline stages, layer-parallel
// drafting) and the hardware it runs on. Callers hold a model, its KV caches
// and their batches; an executor runs them. CpuExecutor is the CPU backend (a
// Worker's threads and the Model's own kernels); the server's ForwardBatcher
// is another implementation that gathers the forwards of many requests into
// one multi-sequence forward. The CUDA backend (src/cuda) is one more
// implementation of these six calls: every caller above the model layer goes
// through them, so none of it knows which device runs a forward.
//
// Every implementation must give the results Model's own functions give, bit
// for bit (docs/design.md, "Batch invariance"): speculative decoding is tested
// for losslessness with ==.
#include <cstdint>
#include <span>
#include <vector>

#include "core/worker.h"
#include "model/kv_cache.h"
#include "model/model.h"

namespace parspec {

class ForwardExecutor {
 public:
  virtual ~ForwardExecutor() = default;

  // Model::forward: the batch's entries become new cells of `kv`; returns the
  // logits of the entries that want them, in batch order.
  virtual std::vector<float> forward(const Model& model, const Batch& batch, KvCache& kv) = 0;
  // Model::forward_multi: several sequences, each on its own cache, in one pass.
  virtual std::vector<std::vector<float>> forward_multi(
      const Model& model, std::span<const Model::SequenceBatch> sequences) = 0;

  // The layer pieces (pipeline stages, layer-parallel drafting), as the
  // Model functions of the same names.
  virtual void forward_layers(const Model& model, const Batch& batch, KvCache& kv,
                              int32_t first_cell, int layer_first, int layer_last,
                              float* hidden) = 0;
  virtual void attention_output(const Model& model, int layer, const Batch& batch, KvCache& kv,
                                int32_t first_cell, const float* hidden, float* out,
                                AttentionProbe* probe) = 0;
  virtual void mlp_block(const Model& model, int layer, int n_tokens, float* hidden) = 0;
  virtual void output_logits(const Model& model, const float* hidden, int n, float* logits) = 0;

  // Layer-parallel drafting's forward in one call, for executors that keep
  // the activations on their device between the pieces: the batch's
  // embedding; per group of consecutive layers (`group_ends`: each group's end)
  // forward_layers for a group of one, and for more the group's attention
  // blocks all on the group's input, then in order h += attention_output and
  // h += mlp_block of each of its layers; then the logits of the rows that want
  // them, into `logits`. The batch's cells are in `kv` from first_cell. The
  // results are those of the pieces composed so. Returns false, having run
  // nothing, where the executor has no such pass (callers compose the pieces).
  virtual bool forward_layer_groups(const Model& /*model*/, const Batch& /*batch*/, KvCache& /*kv*/,
                                    int32_t /*first_cell*/, std::span<const int> /*group_ends*/,
                                    std::vector<float>& /*logits*/) {
    return false;
  }
};

// The CPU backend: the Model's functions on a Worker's threads. One job at a
// time, as its worker: callers that run at the same time need one each.
class CpuExecutor final : public ForwardExecutor {
 public:
  explicit CpuExecutor(Worker& worker) : worker_(worker) {}

  Worker& worker() const { return worker_; }

  std::vector<float> forward(const Model& model, const Batch& batch, KvCache& kv) override;
  std::vector<std::vector<float>> forward_multi(
      const Model& model, std::span<const Model::SequenceBatch> sequences) override;
  void forward_layers(const Model& model, const Batch& batch, KvCache& kv, int32_t first_cell,
                      int layer_first, int layer_last, float* hidden) override;
  void attention_output(const Model& model, int layer, const Batch& batch, KvCache& kv,
                        int32_t first_cell, const float* hidden, float* out,
                        AttentionProbe* probe) override;
  void mlp_block(const Model& model, int layer, int n_tokens, float* hidden) override;
  void output_logits(const Model& model, const float* hidden, int n, float* logits) override;

 private:
  Worker& worker_;
};

}  // namespace parspec
