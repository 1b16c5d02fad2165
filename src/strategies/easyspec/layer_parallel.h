#pragma once
// Layer-parallel drafting as in EasySpec ("EasySpec: Layer-Parallel
// Speculative Decoding for Efficient Multi-GPU Utilization"): the draft
// model's layers are cut into consecutive groups; inside a group every layer's
// attention reads the group's *input* hidden state h0, so the group's attention
// blocks run at the same time ("fuzzy" drafting), and then
//   for each layer i of the group, in order: h += attn_i(h0); h += mlp_i(h).
// A group of one layer is the exact layer. KV rows written by a fuzzy forward
// are marked; "bonus calibration" drops them after a verification so that the
// next round's first forward (accepted tokens + the bonus token) rewrites them
// layer-sequentially, i.e. exactly.
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "core/worker.h"
#include "decode/sides.h"
#include "model/executor.h"
#include "model/kv_cache.h"
#include "model/model.h"

namespace parspec {

// Layers [first, last) of the draft model.
struct LayerGroup {
  int first = 0, last = 0;
  int size() const { return last - first; }
  bool operator==(const LayerGroup&) const = default;
};

// Groups of `lp_size` consecutive layers with the first and the last layer
// alone (as the authors do); the group before the last layer may be shorter.
// lp_size 1 is layer-sequential drafting. Throws Error for lp_size < 1.
std::vector<LayerGroup> groups_from_lp_size(int n_layer, int lp_size);
// Parses "0/1-3/4-6/7": groups separated by '/', each a layer or a range
// "a-b" (inclusive); together they must cover 0..n_layer-1 in order. Throws
// Error naming the problem otherwise.
std::vector<LayerGroup> parse_lp_groups(const std::string& spec, int n_layer);
// The inverse of parse_lp_groups.
std::string format_lp_groups(const std::vector<LayerGroup>& groups);
int widest_group(const std::vector<LayerGroup>& groups);

// When the drafter rewrites fuzzy KV rows exactly (bonus calibration).
enum class Calibration { kNever, kEvery, kMismatch };
Calibration parse_calibration(const std::string& name);  // never | every | mismatch

// Runs the attention blocks of one layer group side by side: out + i·n·n_embd
// receives attention_output of layer group.first + i on `h0` (n rows), and each
// layer's KV rows of the batch's cells are written to `kv`. Block i runs on
// slot i % slots(). Executors: threads of this process (below) or MPI ranks
// that each hold a replica of the draft model and of its cache
// (mpi/group_ranks.h); for those the drafter reports every edit of its cache,
// in order, through the hooks below.
class GroupExecutor {
 public:
  virtual ~GroupExecutor() = default;
  // How many attention blocks it runs at once.
  virtual int slots() const = 0;
  // Where the slots run, for reports: "2 threads", "MPI ranks 0-1".
  virtual std::string describe() const = 0;
  virtual void run_attention(const Model& model, LayerGroup group, const Batch& batch, KvCache& kv,
                             int32_t first_cell, const float* h0, float* out) = 0;

  // The drafter's cache edits (threads share its cache: nothing to do).
  // A new sequence with room for `capacity` cells.
  virtual void begin(int32_t capacity) {}
  // A fuzzy forward's cells, registered before its groups run.
  virtual void add_cells(const Batch& batch) {}
  // A layer-sequential forward's cells, with the rows it wrote to `kv` from `first_cell` on.
  virtual void add_exact(const Batch& batch, KvCache& kv, int32_t first_cell) {}
  virtual void commit(std::span<const int32_t> path, std::span<const int32_t> keep) {}
  virtual void truncate(int32_t n) {}
};

// `slots` threads (the caller and slots - 1 of a Worker), each with a
// one-thread Worker of its own for the block's matmuls; a group wider than
// `slots` runs its blocks in turns.
class ThreadGroupExecutor final : public GroupExecutor {
 public:
  explicit ThreadGroupExecutor(int slots);
  int slots() const override { return pool_.n_threads(); }
  std::string describe() const override;
  void run_attention(const Model& model, LayerGroup group, const Batch& batch, KvCache& kv,
                     int32_t first_cell, const float* h0, float* out) override;

 private:
  Worker pool_;
  std::vector<std::unique_ptr<Worker>> slot_workers_;
  std::vector<std::unique_ptr<CpuExecutor>> slot_executors_;  // one per slot worker
};

// The blocks of a group one after another on one executor (a GPU's, whose
// kernels spread each block over the device).
class SequentialGroupExecutor final : public GroupExecutor {
 public:
  explicit SequentialGroupExecutor(ForwardExecutor& executor) : executor_(executor) {}
  int slots() const override { return 1; }
  std::string describe() const override { return "its device, one block after another"; }
  void run_attention(const Model& model, LayerGroup group, const Batch& batch, KvCache& kv,
                     int32_t first_cell, const float* h0, float* out) override;

 private:
  ForwardExecutor& executor_;
};

// Forwards of a LayerParallelDrafter since the last take_counts().
struct LayerParallelCounts {
  int64_t fuzzy_forwards = 0;
  int64_t exact_forwards = 0;
  int64_t calibrations = 0;  // verifications after which fuzzy KV rows were dropped
  int64_t dropped_rows = 0;  // committed rows dropped to be recomputed exactly
};

// A Drafter that runs the draft model layer-parallel. A forward runs exactly
// (layer-sequential, Model::forward) when it extends the committed prefix (an
// entry with parent -1: prefill, catch-up) while no committed row is fuzzy and
// calibration is on; every other forward is fuzzy. With every group of one
// layer both are the same computation, bit for bit, and every row counts as
// exact.
class LayerParallelDrafter final : public Drafter {
 public:
  // `worker` runs the layer-sequential parts (MLPs, exact forwards, logits),
  // or `device` where given (a GPU's executor); `executor` the groups'
  // attention blocks (null: on `device` one after another, or a
  // ThreadGroupExecutor as wide as the widest group; unused while every group
  // has one layer).
  LayerParallelDrafter(std::shared_ptr<const Model> model, Worker& worker,
                       std::vector<LayerGroup> groups, Calibration calibration,
                       std::unique_ptr<GroupExecutor> executor = nullptr,
                       ForwardExecutor* device = nullptr);

  int n_vocab() const override { return model_->config().n_vocab; }
  void begin(int32_t capacity) override;
  int32_t n_seen() const override;
  int32_t n_spec() const override;
  std::vector<float> propose(const Batch& nodes) override;
  // Commits the path; then, if calibration applies (every verification, or
  // only after a mismatch: see note_mismatch), drops the committed rows from
  // the first fuzzy one on, so that n_seen() falls back and the next catch-up
  // recomputes them exactly. Calibration drops every speculative cell, so
  // `keep` must then be empty.
  std::vector<int32_t> accept(std::span<const int32_t> path,
                              std::span<const int32_t> keep) override;
  void roll_back(int32_t n) override;
  ForwardMeter take_meter() override;

  // Whether the verification the next accept() follows rejected a draft
  // (read by --calibrate mismatch; reset by accept()).
  void note_mismatch(bool mismatch) { mismatch_ = mismatch; }
  LayerParallelCounts take_counts();

  const std::vector<LayerGroup>& groups() const { return groups_; }
  // Where the groups' attention blocks run ("1 thread" when no group has two layers).
  std::string describe_slots() const;
  const KvCache& kv() const;
  // Whether committed row `pos` / speculative cell `cell` was written fuzzily.
  bool committed_fuzzy(int32_t pos) const { return committed_fuzzy_.at(pos) != 0; }
  bool spec_fuzzy(int32_t cell) const { return spec_fuzzy_.at(cell) != 0; }

 private:
  std::vector<float> fuzzy_forward(const Batch& batch);

  std::shared_ptr<const Model> model_;
  std::unique_ptr<CpuExecutor> own_forwards_;  // on the worker, where no device is given
  ForwardExecutor& forwards_;                  // the layer-sequential parts
  std::vector<LayerGroup> groups_;
  std::vector<int> group_ends_;  // each group's end, as forward_layer_groups takes them
  Calibration calibration_;
  std::unique_ptr<GroupExecutor> executor_;
  std::unique_ptr<KvCache> kv_;
  std::vector<uint8_t> committed_fuzzy_, spec_fuzzy_;
  bool mismatch_ = false;
  ForwardMeter meter_;
  LayerParallelCounts counts_;
};

// Cosine similarity between the exact and the fuzzy computation of one layer
// (a layer inside a group, after its first): the attention input (h_i against
// the group's h0), q, k, v and the attention output, averaged over tokens.
struct LayerSimilarity {
  int layer = 0, group = 0, offset = 0;  // offset: position inside its group (>= 1)
  double h = 0, q = 0, k = 0, v = 0, attn = 0;
  int64_t tokens = 0;
};

// Runs `tokens` through the draft model one token at a time on top of the
// exact prefix, each token both exactly and fuzzily (with `groups`), and
// compares them from position `skip` on. Layers that are first in their group
// are identical and are left out.
std::vector<LayerSimilarity> measure_layer_similarity(const Model& model, Worker& worker,
                                                      const std::vector<LayerGroup>& groups,
                                                      std::span<const int32_t> tokens, int skip);

}  // namespace parspec
