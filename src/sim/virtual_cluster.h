#pragma once
// A simulated cluster on a virtual clock: the head (rank 0: the command, the
// drafter, verification) and a pipeline of target stages (ranks 1..S), as
// the MPI runtime lays them out (docs/distributed.md), with links that
// deliver each message after a latency plus its size at a bandwidth, one
// message after another per link. Nothing here computes a model: forwards
// take the time a cost profile gives, and the head's own work takes its wall
// time here (scaled), so a strategy's real code runs unchanged against it
// (sim_sides.h) while the time is the cluster's.
#include <cstdint>
#include <deque>
#include <map>
#include <string>
#include <vector>

#include "core/timer.h"
#include "sim/cost_profile.h"

namespace parspec::sim {

// Sizes of what travels besides hidden states and logits: a message's header
// (ticket, kind) and a forward's entry per row (token, position, parent, wants logits).
constexpr int64_t kMessageHeaderBytes = 32, kRowEntryBytes = 16;

// One direction between two nodes.
class Link {
 public:
  Link(double latency_us, double gbps) : latency_ms_(latency_us / 1e3), gbps_(gbps) {}
  // When a message of `bytes` sent at `sent_ms` is delivered: it goes on the
  // wire when the link is free (or at once with unlimited bandwidth, gbps 0),
  // takes its size at the bandwidth, then the latency.
  double deliver(double sent_ms, int64_t bytes);

 private:
  double latency_ms_, gbps_;
  double free_ms_ = 0;
};

// The head's clock: virtual milliseconds that advance by the costs the
// simulation charges, by waits for what the cluster sends back, and by the
// head's own work between them (its wall time here times `head_time_scale`;
// the real forwards that give the tokens are not counted: Pause).
class HeadClock final : public ThreadClock {
 public:
  explicit HeadClock(double head_time_scale);
  double now_ms() override;
  void advance_to(double t_ms);
  void advance_by(double ms);
  void parallel_begin() override;
  void parallel_next() override;
  void parallel_end() override;

  // Real work done only to know the tokens: not the head's time.
  class Pause {
   public:
    explicit Pause(HeadClock& clock);
    ~Pause();
    Pause(const Pause&) = delete;
    Pause& operator=(const Pause&) = delete;

   private:
    HeadClock& clock_;
  };

 private:
  void sync();
  double now_ = 0, wall_mark_ = 0, scale_ = 1;
  int paused_ = 0;
  struct Section {
    double start = 0, end = 0;
  };
  std::vector<Section> sections_;
};

// What one stage did over a run, on the virtual clock.
struct SimStageReport {
  int rank = 0;
  int layer_first = 0, layer_last = 0;
  int64_t forwards = 0, skipped = 0, abandoned = 0;
  double busy_ms = 0;
};

struct PipelineLayout {
  int head_layers = 0;                // layers the head runs before stage 1
  std::vector<int> layers_per_stage;  // stage 1, 2, ...
  double link_latency_us = 0, link_gbps = 0;
};

// The target's pipeline: the head submits forwards (rows, rows wanting
// logits) and collects them; each stage runs, as one batch, every forward
// waiting when it becomes free, and passes each on; a cancelled forward is
// skipped by the stages its cancel reaches before they start it, and a batch
// whose forwards are all cancelled stops after the layer in progress. KV
// edits travel with the stream and cost nothing.
class SimPipeline {
 public:
  SimPipeline(HeadClock& clock, const CostProfile& target, const PipelineLayout& layout);

  // Waits (on the virtual clock) until every forward sent has come back.
  void drain();
  int64_t submit(int rows, int logit_rows);
  // Whether the forward's logits are at the head by now.
  bool arrived(int64_t ticket);
  // Advances the head's clock to the forward's return.
  void wait(int64_t ticket);
  void cancel(int64_t ticket);

  const std::vector<SimStageReport>& stages() const { return reports_; }
  std::string describe() const;

 private:
  struct Forward {
    int rows = 0, logit_rows = 0;
    std::vector<double> cancel_at;  // per stage: when the cancel reaches it (infinite: none)
    double at_head = -1;            // when the logits (or the skip) reach the head; -1: not yet
    bool skipped = false;
  };
  struct Arrival {
    int64_t ticket;
    double at;
    bool skipped;
  };
  struct Stage {
    int layers = 0;
    bool first = false, last = false;
    std::deque<Arrival> inbox;
    bool running = false;
    std::vector<int64_t> batch;
    double start = 0, full_end = 0, per_layer = 0, free = 0;
  };

  // Processes the earliest event at or before `limit`; false when there is none.
  bool process_next(double limit);
  double next_event(const Stage& s, size_t index) const;
  double running_end(const Stage& s, size_t index, bool* abandoned) const;
  void start_batch(size_t index, double t);
  void end_batch(size_t index, double t, bool abandoned);
  void pass_on(size_t index, int64_t ticket, double t, bool skipped);
  void run_until(double t);

  HeadClock& clock_;
  CostProfile cost_;
  PipelineLayout layout_;
  std::vector<Stage> stages_;
  std::vector<Link> from_head_, onward_;  // head -> stage i; stage i -> i+1 (the last: -> head)
  std::map<int64_t, Forward> forwards_;   // not yet back at the head and collected
  std::vector<SimStageReport> reports_;
  int64_t next_ticket_ = 0;
  double last_return_ = 0;  // when the last forward came back to the head
};

// Layers per stage that balance the stages' cost of a one-row forward (the
// output on the last stage), or `split` ("a,b,...") checked against the
// profile's layers.
std::vector<int> balanced_split(const CostProfile& target, int stages, const std::string& split,
                                int head_layers);

}  // namespace parspec::sim
