#pragma once
// The pipeline of an mpirun job (docs/distributed.md). Rank 0 is the head: it
// runs the command (tokenizer, sampling, verification, the drafter) and sees
// the target as a PipelineTarget. Ranks 1..S each own a consecutive range of
// the target's layers (the first also embeds tokens, the last also computes
// logits) and run serve_stage(): forwards, KV edits (begin, commit,
// truncate) and quit travel the pipeline in one ordered stream, so every
// stage's cache holds the same cells; logits return to the head; a forward
// the head cancels is skipped by the stages it has not reached yet.
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <set>
#include <string>
#include <vector>

#include "core/worker.h"
#include "decode/sides.h"
#include "decode/strategy.h"
#include "model/executor.h"
#include "model/kv_cache.h"
#include "model/model.h"
#include "mpi/transport.h"

namespace parspec::mpi {

struct PipelineOptions {
  int stages = 0;           // target stages (0: every rank but the head)
  std::string layer_split;  // "a,b,c": layers per stage; empty: balanced
  int head_layers = 0;      // the head computes the embedding and these first layers itself
  LinkEmulation link;
  double timeout_s = 60;  // the head's wait for a stage before it gives up
};

// The process's MPI session: made in main() when launched by mpirun with at
// least two ranks; null otherwise.
class Session;
Session* session();
// Initialises MPI when launched by mpirun (returns false otherwise, or for a
// one-rank job, which runs as a single process).
bool start_session(int* argc, char*** argv);
int session_rank();
// True on the head of an mpirun job with at least one stage rank.
bool distributed_run();
// A stage rank's life: waits for the head's set-up, serves the pipeline,
// returns the exit code the head ended with.
int serve_stage();
// The head's end: tells every stage to quit with `code`, finalises MPI.
void end_session(int code);
// A failure that leaves the job unusable (a stage stopped answering): prints
// `message` once and ends every rank (MPI_Abort).
[[noreturn]] void abort_job(const std::string& message, int code);

// The session's transport (throws Error when there is none).
Transport& session_transport();
// The other ranks of a job serve one role, the first asked for: "a target
// pipeline" or "easyspec's drafter slots". Throws Error when `role` differs.
void claim_ranks(const std::string& role);
// A peer that did not answer within `timeout_s`: ends every rank with a
// message naming it.
[[noreturn]] void abort_unanswered(int rank, double timeout_s);
std::string host_name();

// Layers per stage: `split` ("a,b,c", summing to the model's layers) or,
// when empty, consecutive ranges that balance the bytes of weights each stage
// reads per token (the last stage also reads the output matrix). Throws Error
// for a bad split.
// Only layers from `first_layer` on are split (the head keeps the ones before).
std::vector<int> split_layers(const Model& model, int stages, const std::string& split,
                              int first_layer = 0);
// `split` ("a,b,c") as layers per stage, checked: `stages` entries >= 1 adding
// up to `n_layer`. Throws Error naming --layer-split.
std::vector<int> parse_layer_split(const std::string& split, int stages, int n_layer);

// Size and FNV-1a hash of the first MiB (the GGUF header: metadata and tensor
// table) of a file, which every rank compares before it starts.
struct FileIdentity {
  uint64_t size = 0, hash = 0;
  bool operator==(const FileIdentity&) const = default;
};
FileIdentity identify_file(const std::string& path);

// Where the work of a run went, per stage (from the stages' own reports).
struct StageTimes {
  int rank = 0;
  int layer_first = 0, layer_last = 0;
  std::string host;
  int64_t forwards = 0, skipped = 0;
  int64_t abandoned = 0;  // started, then stopped between layers by a cancel
  double compute_ms = 0;  // wall time of its forwards
  double cpu_ms = 0;      // CPU time of its process meanwhile (all threads)
};

// The head's end of the pipeline, one per job, shared by every target made on it.
class Pipeline {
 public:
  Pipeline(Transport& transport, const Model& target, const PipelineOptions& options, int threads);

  // A new sequence on every stage with room for `capacity` cells; first waits
  // until every forward sent has come back.
  void begin(int32_t capacity);
  int64_t send_forward(const Batch& batch);
  // The logits of a forward (throws Error when a stage failed or timed out).
  std::vector<float> wait_logits(int64_t ticket);
  // Without waiting: whether the forward's logits are back (files whatever has arrived).
  bool arrived(int64_t ticket);
  // The forward's result is not wanted: stages that have not run it skip it.
  void cancel(int64_t ticket);
  void send_commit(std::span<const int32_t> path, std::span<const int32_t> keep);
  void send_truncate(int32_t n);
  // Waits until every forward sent has come back.
  void drain();
  void quit(int code);

  int n_vocab() const { return n_vocab_; }
  const std::vector<StageTimes>& stages() const { return stages_; }
  const PipelineOptions& options() const { return options_; }
  // "rank 1 (host): layers 0-7 ..., link ..." for reports.
  std::string describe() const;
  // Per-stage compute since the last call (forwards, skipped, ms).
  std::vector<StageTimes> take_stage_times();

 private:
  // Receives one message (waits at most the timeout) and files it.
  void pump();
  void file(Message& m);
  [[noreturn]] void stage_failed(int rank, const std::string& what);
  int first_rank() const { return 1; }

  Transport& transport_;
  PipelineOptions options_;
  int n_vocab_ = 0, n_embd_ = 0;
  // --head-layers: the head's own share of the target (its layers' cache).
  const Model* target_ = nullptr;
  int head_layers_ = 0;
  std::unique_ptr<Worker> head_worker_;
  std::unique_ptr<CpuExecutor> head_executor_;  // runs the head's layers on head_worker_
  std::unique_ptr<KvCache> head_kv_;
  std::vector<StageTimes> stages_, stage_window_;
  int64_t next_ticket_ = 0;
  std::set<int64_t> outstanding_;  // sent, result not yet back
  std::set<int64_t> cancelled_;
  std::map<int64_t, std::vector<float>> arrived_;
  std::map<int, int64_t> last_done_;  // per rank: the last forward it finished
  bool broken_ = false;               // a stage reported an error
};

// Targets on the session's pipeline, for StrategyConfig::make_target; starts
// the pipeline (once per process) on the first call. Null when this process
// is not the head of an mpirun job.
std::function<std::unique_ptr<Target>(const StrategyConfig&)> pipeline_targets(
    const Model& target, const PipelineOptions& options, int threads);
// The running pipeline (null before pipeline_targets() or off MPI).
Pipeline* running_pipeline();

}  // namespace parspec::mpi
