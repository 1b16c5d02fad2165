#pragma once
// The generation side of the server: a bounded queue of completion jobs, a
// fixed number of generation slots (one thread each, running one strategy
// object per request on batched sides, serve/forward_batcher.h), and each
// job's output as text pieces for the HTTP side to send.
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "core/worker.h"
#include "decode/strategy.h"
#include "model/executor.h"
#include "serve/forward_batcher.h"
#include "serve/metrics.h"
#include "serve/request_scheduler.h"
#include "tokenizer/tokenizer.h"

namespace parspec {

// A stretch of generated text and who produced its last token: an accepted
// draft token or the target's own (sampled from its logits).
struct OutputPiece {
  std::string text;
  bool from_draft = false;
};

struct CompletionJob {
  using Clock = std::chrono::steady_clock;
  // The request.
  std::vector<int32_t> prompt;
  int max_tokens = 16;
  SamplingParams sampling;
  std::vector<std::string> stop;
  bool ignore_eos = false;  // generate through end-of-generation tokens (benchmarks)
  Clock::time_point arrival = Clock::now();

  // Set by the HTTP side when the client went away: the generation stops at
  // its next token.
  std::atomic<bool> cancelled{false};

  // The result, guarded by `mutex`; `cv` signals new pieces and the end.
  std::mutex mutex;
  std::condition_variable cv;
  std::deque<OutputPiece> pieces;  // released, not yet sent
  bool finished = false;
  std::string finish_reason;  // "stop" or "length"
  std::string error;          // set when generation failed
  std::vector<int32_t> tokens;
  GenerationStats stats;
  std::string strategy;
  double ttft_ms = -1;
  // cosine: what the request scheduler decided for this request's steps.
  struct Scheduling {
    int64_t steps = 0, waits = 0, forced = 0;
    int64_t batch_sum = 0, gamma_sum = 0, drafters_sum = 0;  // over its steps
  } scheduling;
};

struct EngineOptions {
  StrategyConfig base;  // strategy name, models, worker, options
  int ctx_size = 4096;  // most tokens a request may hold (prompt + max_tokens)
  int slots = 4;        // requests generating at once
  int max_queue = 64;   // requests waiting for a slot
  int token_budget = 512;
  // Drafting passes run on this worker beside the verification pass (null: on
  // the target's worker, after it).
  Worker* draft_worker = nullptr;
  // Executors the batcher's passes run on instead (a GPU's): the target's
  // (null: the CPU, base.target_worker), and the other models' (null: as
  // draft_worker says); a draft executor runs beside the target's passes.
  ForwardExecutor* target_executor = nullptr;
  ForwardExecutor* draft_executor = nullptr;
  // cosine: the request scheduler that grants each step (null: none) and each
  // request's memory per context token for its m_i (MiB: KV of the target and
  // the drafters).
  std::shared_ptr<RequestScheduler> scheduler;
  double kv_mib_per_token = 0;
};

class Engine {
 public:
  Engine(EngineOptions options, const Tokenizer& tokenizer);
  ~Engine();

  // Queues a job; false when the queue is full (or the engine drains).
  bool submit(std::shared_ptr<CompletionJob> job);
  // Stops taking jobs, finishes the queued and running ones, joins the slots.
  void drain();

  // Requests waiting for a slot.
  int queue_depth() const;
  int active() const;
  const EngineOptions& options() const { return options_; }
  ServerMetrics& metrics() { return metrics_; }
  const ForwardBatcher& batcher() const { return batcher_; }
  std::optional<RequestScheduler::Stats> scheduler_stats() const;

 private:
  void slot_main();
  void run(CompletionJob& job);

  EngineOptions options_;
  const Tokenizer& tokenizer_;
  // Rounds of the batcher run on the options' executors, or on these: the
  // target's worker and the draft worker (when given).
  std::unique_ptr<CpuExecutor> cpu_target_, cpu_draft_;
  ForwardBatcher batcher_;
  ServerMetrics metrics_;
  mutable std::mutex mutex_;
  std::condition_variable cv_;
  std::deque<std::shared_ptr<CompletionJob>> queue_;
  int active_ = 0;
  bool draining_ = false;
  std::vector<std::thread> slots_;  // started by start_thread (core/threads.h)
};

}  // namespace parspec
