#include "sim/virtual_cluster.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <limits>
#include <numeric>
#include <sstream>

#include "core/error.h"
#include "mpi/pipeline.h"

namespace parspec::sim {

namespace {

constexpr double kNever = std::numeric_limits<double>::infinity();

double wall_ms() {
  return std::chrono::duration<double, std::milli>(
             std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

}  // namespace

double Link::deliver(double sent_ms, int64_t bytes) {
  const double on_wire = std::max(sent_ms, free_ms_);
  const double wire_ms = gbps_ > 0 ? static_cast<double>(bytes) * 8.0 / (gbps_ * 1e6) : 0.0;
  free_ms_ = on_wire + wire_ms;
  return free_ms_ + latency_ms_;
}

HeadClock::HeadClock(double head_time_scale) : wall_mark_(wall_ms()), scale_(head_time_scale) {
  check(head_time_scale >= 0, "the head's time scale must not be negative");
}

void HeadClock::sync() {
  const double w = wall_ms();
  if (paused_ == 0) now_ += (w - wall_mark_) * scale_;
  wall_mark_ = w;
}

double HeadClock::now_ms() {
  sync();
  return now_;
}

void HeadClock::advance_to(double t_ms) {
  sync();
  now_ = std::max(now_, t_ms);
}

void HeadClock::advance_by(double ms) {
  sync();
  now_ += ms;
}

void HeadClock::parallel_begin() {
  sync();
  sections_.push_back({now_, now_});
}

void HeadClock::parallel_next() {
  check(!sections_.empty(), "parallel section: next() outside a section");
  sync();
  sections_.back().end = std::max(sections_.back().end, now_);
  now_ = sections_.back().start;
}

void HeadClock::parallel_end() {
  check(!sections_.empty(), "parallel section: end without a beginning");
  sync();
  now_ = std::max(sections_.back().end, now_);
  sections_.pop_back();
}

HeadClock::Pause::Pause(HeadClock& clock) : clock_(clock) {
  clock_.sync();
  ++clock_.paused_;
}

HeadClock::Pause::~Pause() {
  clock_.sync();
  --clock_.paused_;
}

SimPipeline::SimPipeline(HeadClock& clock, const CostProfile& target, const PipelineLayout& layout)
    : clock_(clock), cost_(target), layout_(layout) {
  const int n = static_cast<int>(layout.layers_per_stage.size());
  check(n >= 1, "a simulated pipeline needs at least one stage");
  check(layout.head_layers + std::accumulate(layout.layers_per_stage.begin(),
                                             layout.layers_per_stage.end(), 0) ==
            target.n_layer,
        "simulated pipeline: the stages' layers do not add up to the profile's ", target.n_layer);
  int first = layout.head_layers;
  for (int i = 0; i < n; ++i) {
    Stage s;
    s.layers = layout.layers_per_stage[i];
    s.first = i == 0;
    s.last = i + 1 == n;
    stages_.push_back(s);
    from_head_.emplace_back(layout.link_latency_us, layout.link_gbps);
    onward_.emplace_back(layout.link_latency_us, layout.link_gbps);
    reports_.push_back({.rank = i + 1, .layer_first = first, .layer_last = first + s.layers});
    first += s.layers;
  }
}

std::string SimPipeline::describe() const {
  std::ostringstream out;
  out << "simulated pipeline of " << stages_.size() << " stage" << (stages_.size() == 1 ? "" : "s")
      << " (rank 0: head";
  if (layout_.head_layers > 0) out << " + layers 0-" << layout_.head_layers - 1;
  out << ")";
  for (const SimStageReport& r : reports_)
    out << "; rank " << r.rank << ": layers " << r.layer_first << "-" << r.layer_last - 1;
  out << "; link: " << layout_.link_latency_us << " us";
  if (layout_.link_gbps > 0) out << ", " << layout_.link_gbps << " Gb/s";
  out << "; target cost: " << cost_.name;
  return out.str();
}

double SimPipeline::running_end(const Stage& s, size_t index, bool* abandoned) const {
  *abandoned = false;
  // All of the batch cancelled: the stage stops after the layer in progress when the last cancel
  // reaches it.
  double last_cancel = 0;
  for (int64_t t : s.batch) last_cancel = std::max(last_cancel, forwards_.at(t).cancel_at[index]);
  if (last_cancel >= s.full_end || s.per_layer <= 0) return s.full_end;
  const double layers_done = std::max(1.0, std::ceil((last_cancel - s.start) / s.per_layer));
  const double end = s.start + layers_done * s.per_layer;
  if (end >= s.full_end) return s.full_end;
  *abandoned = true;
  return end;
}

double SimPipeline::next_event(const Stage& s, size_t index) const {
  if (s.running) {
    bool abandoned = false;
    return running_end(s, index, &abandoned);
  }
  if (!s.inbox.empty()) return std::max(s.free, s.inbox.front().at);
  return kNever;
}

void SimPipeline::pass_on(size_t index, int64_t ticket, double t, bool skipped) {
  Forward& f = forwards_.at(ticket);
  if (stages_[index].last) {
    const int64_t bytes =
        kMessageHeaderBytes + (skipped ? 0 : f.logit_rows * cost_.logits_bytes_per_row);
    f.at_head = onward_[index].deliver(t, bytes);
    f.skipped = skipped;
    last_return_ = std::max(last_return_, f.at_head);
    // A cancelled forward is of no more interest once it is back.
    if (f.cancel_at[index] < kNever) forwards_.erase(ticket);
    return;
  }
  const int64_t bytes =
      kMessageHeaderBytes + (skipped ? 0 : f.rows * (kRowEntryBytes + cost_.hidden_bytes_per_row));
  stages_[index + 1].inbox.push_back({ticket, onward_[index].deliver(t, bytes), skipped});
}

void SimPipeline::start_batch(size_t index, double t) {
  Stage& s = stages_[index];
  SimStageReport& r = reports_[index];
  int rows = 0, logit_rows = 0;
  s.batch.clear();
  while (!s.inbox.empty() && s.inbox.front().at <= t) {
    const Arrival a = s.inbox.front();
    s.inbox.pop_front();
    const Forward& f = forwards_.at(a.ticket);
    ++r.forwards;
    if (a.skipped || f.cancel_at[index] <= t) {
      ++r.skipped;
      pass_on(index, a.ticket, t, true);
      continue;
    }
    s.batch.push_back(a.ticket);
    rows += f.rows;
    logit_rows += f.logit_rows;
  }
  if (s.batch.empty()) {
    s.free = t;
    return;
  }
  s.running = true;
  s.start = t;
  s.per_layer = cost_.layer.at(rows);
  s.full_end = t + s.layers * s.per_layer +
               (s.first && layout_.head_layers == 0 ? cost_.embed_ms : 0.0) +
               (s.last && logit_rows > 0 ? cost_.output.at(logit_rows) : 0.0);
}

void SimPipeline::end_batch(size_t index, double t, bool abandoned) {
  Stage& s = stages_[index];
  s.running = false;
  s.free = t;
  reports_[index].busy_ms += t - s.start;
  if (abandoned) reports_[index].abandoned += static_cast<int64_t>(s.batch.size());
  for (int64_t ticket : s.batch) pass_on(index, ticket, t, abandoned);
  s.batch.clear();
}

bool SimPipeline::process_next(double limit) {
  size_t best = stages_.size();
  double best_t = kNever;
  for (size_t i = 0; i < stages_.size(); ++i) {
    const double t = next_event(stages_[i], i);
    if (t < best_t) {
      best_t = t;
      best = i;
    }
  }
  if (best == stages_.size() || best_t > limit) return false;
  Stage& s = stages_[best];
  if (s.running) {
    bool abandoned = false;
    const double end = running_end(s, best, &abandoned);
    end_batch(best, end, abandoned);
  } else {
    start_batch(best, best_t);
  }
  return true;
}

void SimPipeline::run_until(double t) {
  while (process_next(t)) {
  }
}

int64_t SimPipeline::submit(int rows, int logit_rows) {
  check(rows >= 1, "a forward needs at least one row");
  // The head's own layers run before the forward leaves it.
  if (layout_.head_layers > 0)
    clock_.advance_by(cost_.embed_ms + layout_.head_layers * cost_.layer.at(rows));
  const double now = clock_.now_ms();
  run_until(now);
  const int64_t ticket = next_ticket_++;
  Forward f;
  f.rows = rows;
  f.logit_rows = logit_rows;
  f.cancel_at.assign(stages_.size(), kNever);
  forwards_[ticket] = f;
  const int64_t bytes =
      kMessageHeaderBytes +
      rows * (kRowEntryBytes + (layout_.head_layers > 0 ? cost_.hidden_bytes_per_row : 0));
  stages_[0].inbox.push_back({ticket, from_head_[0].deliver(now, bytes), false});
  return ticket;
}

bool SimPipeline::arrived(int64_t ticket) {
  const double now = clock_.now_ms();
  run_until(now);
  const auto found = forwards_.find(ticket);
  check(found != forwards_.end(), "simulated pipeline: forward ", ticket, " is not in flight");
  return found->second.at_head >= 0 && found->second.at_head <= now;
}

void SimPipeline::wait(int64_t ticket) {
  const auto found = forwards_.find(ticket);
  check(found != forwards_.end(), "simulated pipeline: forward ", ticket, " is not in flight");
  // The head waits: nothing it could send meanwhile changes what the stages do.
  while (found->second.at_head < 0)
    check(process_next(kNever), "simulated pipeline: forward ", ticket, " never returns");
  clock_.advance_to(found->second.at_head);
  check(!found->second.skipped, "simulated pipeline: forward ", ticket, " was cancelled");
  forwards_.erase(found);
}

void SimPipeline::cancel(int64_t ticket) {
  const auto found = forwards_.find(ticket);
  if (found == forwards_.end()) return;
  const double now = clock_.now_ms();
  run_until(now);
  Forward& f = found->second;
  if (f.at_head >= 0 && f.at_head <= now) {
    forwards_.erase(found);  // back already: nothing to stop
    return;
  }
  for (size_t i = 0; i < stages_.size(); ++i)
    f.cancel_at[i] = std::min(f.cancel_at[i], from_head_[i].deliver(now, kMessageHeaderBytes));
}

void SimPipeline::drain() {
  const double now = clock_.now_ms();
  run_until(now);
  std::vector<int64_t> open;
  for (const auto& [ticket, f] : forwards_) open.push_back(ticket);
  for (int64_t ticket : open) cancel(ticket);
  auto unresolved = [&] {
    return std::any_of(forwards_.begin(), forwards_.end(),
                       [](const auto& entry) { return entry.second.at_head < 0; });
  };
  while (unresolved()) check(process_next(kNever), "simulated pipeline: a forward is lost");
  clock_.advance_to(last_return_);
  forwards_.clear();
}

std::vector<int> balanced_split(const CostProfile& target, int stages, const std::string& split,
                                int head_layers) {
  const int n_layer = target.n_layer - head_layers;
  check(head_layers >= 0 && n_layer >= 1, "--head-layers ", head_layers, ": the profile has ",
        target.n_layer, " layers and every stage needs one");
  check(stages >= 1 && stages <= n_layer, "--stages ", stages, ": the profile has ", n_layer,
        " layers for the stages");
  if (!split.empty()) return mpi::parse_layer_split(split, stages, n_layer);
  // Every layer costs the same, the last stage also the output: the fewest layers on the last
  // stage that keeps it no slower than the largest other stage, the rest spread evenly.
  const double layer = target.layer.at(1), output = target.output.at(1);
  std::vector<int> best;
  double best_max = kNever;
  for (int last = 1; last <= n_layer - (stages - 1); ++last) {
    const int rest = n_layer - last;
    std::vector<int> c(stages, 0);
    c[stages - 1] = last;
    for (int i = 0; i + 1 < stages; ++i) c[i] = rest / (stages - 1) + (i < rest % (stages - 1));
    if (stages == 1 && rest > 0) continue;
    double worst = last * layer + output;
    for (int i = 0; i + 1 < stages; ++i) worst = std::max(worst, c[i] * layer);
    if (worst < best_max - 1e-12) {
      best_max = worst;
      best = c;
    }
  }
  return best;
}

}  // namespace parspec::sim
