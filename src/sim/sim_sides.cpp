#include "sim/sim_sides.h"

#include <algorithm>
#include <utility>

#include "core/error.h"
#include "core/timer.h"
#include "decode/local_model.h"

namespace parspec::sim {

namespace {

int logit_rows(const Batch& batch) {
  return static_cast<int>(std::count(batch.want_logits.begin(), batch.want_logits.end(), 1));
}

class SimTarget final : public Target {
 public:
  SimTarget(std::unique_ptr<Target> real, SimCluster& cluster)
      : real_(std::move(real)), cluster_(cluster) {}

  int n_vocab() const override { return real_->n_vocab(); }
  void begin(int32_t capacity) override {
    cluster_.pipeline().drain();
    HeadClock::Pause pause(cluster_.clock());
    real_->begin(capacity);
    logits_.clear();
  }
  int32_t n_committed() const override { return real_->n_committed(); }
  int32_t n_spec() const override { return real_->n_spec(); }
  std::vector<float> forward(const Batch& batch) override { return collect(submit(batch)); }
  int64_t submit(const Batch& batch) override {
    std::vector<float> logits;
    {
      HeadClock::Pause pause(cluster_.clock());
      logits = real_->forward(batch);
      real_->take_meter();
    }
    const int64_t ticket =
        cluster_.pipeline().submit(static_cast<int>(batch.size()), logit_rows(batch));
    logits_[ticket] = std::move(logits);
    ++meter_.forwards;
    return ticket;
  }
  bool arrived(int64_t ticket) override { return cluster_.pipeline().arrived(ticket); }
  std::vector<float> collect(int64_t ticket) override {
    const auto found = logits_.find(ticket);
    check(found != logits_.end(), "simulated target: forward ", ticket, " is not in flight");
    {
      ScopedTimer timer(meter_.ms);  // the time the head waited for the pipeline
      cluster_.pipeline().wait(ticket);
    }
    std::vector<float> logits = std::move(found->second);
    logits_.erase(found);
    return logits;
  }
  void cancel(int64_t ticket) override {
    if (logits_.erase(ticket) != 0) cluster_.pipeline().cancel(ticket);
  }
  std::vector<int32_t> commit(std::span<const int32_t> path,
                              std::span<const int32_t> keep) override {
    HeadClock::Pause pause(cluster_.clock());
    return real_->commit(path, keep);
  }
  void truncate(int32_t n) override {
    HeadClock::Pause pause(cluster_.clock());
    real_->truncate(n);
  }
  ForwardMeter take_meter() override { return std::exchange(meter_, ForwardMeter{}); }

 private:
  std::unique_ptr<Target> real_;
  SimCluster& cluster_;
  std::map<int64_t, std::vector<float>> logits_;
  ForwardMeter meter_;
};

class SimDrafter final : public Drafter {
 public:
  SimDrafter(std::unique_ptr<Drafter> real, SimCluster& cluster, bool own_node)
      : real_(std::move(real)), cluster_(cluster) {
    if (own_node) {
      const PipelineLayout& p = cluster.spec().pipeline;
      to_node_ = std::make_unique<Link>(p.link_latency_us, p.link_gbps);
      to_head_ = std::make_unique<Link>(p.link_latency_us, p.link_gbps);
    }
  }

  int n_vocab() const override { return real_->n_vocab(); }
  void begin(int32_t capacity) override {
    HeadClock::Pause pause(cluster_.clock());
    real_->begin(capacity);
  }
  int32_t n_seen() const override { return real_->n_seen(); }
  int32_t n_spec() const override { return real_->n_spec(); }
  std::vector<float> propose(const Batch& nodes) override {
    std::vector<float> logits;
    {
      HeadClock::Pause pause(cluster_.clock());
      logits = real_->propose(nodes);
      real_->take_meter();
    }
    HeadClock& clock = cluster_.clock();
    const double start = clock.now_ms();
    const int rows = static_cast<int>(nodes.size()), wanted = logit_rows(nodes);
    const CostProfile& cost = cluster_.spec().draft;
    if (to_node_) {
      // Rows to the drafter's node, its forward when it is free, logits back.
      const double at_node = to_node_->deliver(start, kMessageHeaderBytes + kRowEntryBytes * rows);
      const double done = std::max(at_node, node_free_) + cost.forward_ms(rows, wanted);
      node_free_ = done;
      clock.advance_to(
          to_head_->deliver(done, kMessageHeaderBytes + wanted * cost.logits_bytes_per_row));
    } else {
      clock.advance_by(cost.forward_ms(rows, wanted));
    }
    ++meter_.forwards;
    meter_.ms += clock.now_ms() - start;
    return logits;
  }
  std::vector<int32_t> accept(std::span<const int32_t> path,
                              std::span<const int32_t> keep) override {
    HeadClock::Pause pause(cluster_.clock());
    return real_->accept(path, keep);
  }
  void roll_back(int32_t n) override {
    HeadClock::Pause pause(cluster_.clock());
    real_->roll_back(n);
  }
  ForwardMeter take_meter() override { return std::exchange(meter_, ForwardMeter{}); }

 private:
  std::unique_ptr<Drafter> real_;
  SimCluster& cluster_;
  std::unique_ptr<Link> to_node_, to_head_;
  double node_free_ = 0;
  ForwardMeter meter_;
};

}  // namespace

SimCluster::SimCluster(const ClusterSpec& spec)
    : spec_(spec), clock_(spec.head_time_scale), pipeline_(clock_, spec_.target, spec_.pipeline) {}

std::unique_ptr<Target> SimCluster::make_target(std::unique_ptr<Target> real) {
  return std::make_unique<SimTarget>(std::move(real), *this);
}

std::unique_ptr<Drafter> SimCluster::make_drafter(std::unique_ptr<Drafter> real, bool own_node) {
  return std::make_unique<SimDrafter>(std::move(real), *this, own_node);
}

void SimCluster::attach(StrategyConfig& config) {
  config.time_sides_at_start = false;  // the virtual clock prices the forwards
  config.make_target = [this](const StrategyConfig& c) -> std::unique_ptr<Target> {
    return make_target(std::make_unique<LocalTarget>(c.target, *c.target_worker));
  };
  const bool pool = !config.drafters.empty();
  config.make_drafter = [this, pool](const StrategyConfig& c) -> std::unique_ptr<Drafter> {
    Worker* worker = c.draft_worker != nullptr ? c.draft_worker : c.target_worker;
    return make_drafter(std::make_unique<ModelDrafter>(c.draft, *worker),
                        pool && spec_.drafter_nodes);
  };
}

}  // namespace parspec::sim
