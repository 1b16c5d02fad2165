// PipelineTarget: the Target a strategy sees on the head of an mpirun job,
// and the session's factory of them.
#include "mpi/pipeline.h"

#include <numeric>
#include <utility>

#include "core/timer.h"
#include "mpi/session.h"

namespace parspec::mpi {

namespace {

// Target on the pipeline: the head keeps only the cell counts; the stages hold the caches.
class PipelineTarget final : public Target {
 public:
  explicit PipelineTarget(Pipeline& pipeline) : p_(pipeline) {}

  int n_vocab() const override { return p_.n_vocab(); }
  void begin(int32_t capacity) override {
    p_.begin(capacity);
    n_committed_ = n_spec_ = 0;
    capacity_ = capacity;
  }
  int32_t n_committed() const override { return n_committed_; }
  int32_t n_spec() const override { return n_spec_; }
  std::vector<float> forward(const Batch& batch) override { return collect(submit(batch)); }
  int64_t submit(const Batch& batch) override {
    const int32_t n = static_cast<int32_t>(batch.size());
    check(n_committed_ + n_spec_ + n <= capacity_, "KV cache full: ", n_committed_, " committed + ",
          n_spec_, " speculative + ", n, " new cells exceed the capacity ", capacity_);
    for (int32_t i = 0; i < n; ++i)
      check(batch.parents[i] >= -1 && batch.parents[i] < n_spec_ + i, "forward: entry ", i,
            " names parent ", batch.parents[i], " which is not an earlier cell");
    n_spec_ += n;
    ++meter_.forwards;
    return p_.send_forward(batch);
  }
  bool arrived(int64_t ticket) override { return p_.arrived(ticket); }
  std::vector<float> collect(int64_t ticket) override {
    ScopedTimer timer(meter_.ms);  // the time the head waited for the pipeline
    return p_.wait_logits(ticket);
  }
  void cancel(int64_t ticket) override { p_.cancel(ticket); }
  std::vector<int32_t> commit(std::span<const int32_t> path,
                              std::span<const int32_t> keep) override {
    for (int32_t c : path) check(c >= 0 && c < n_spec_, "commit: no speculative cell ", c);
    for (int32_t c : keep) check(c >= 0 && c < n_spec_, "commit: no speculative cell ", c);
    p_.send_commit(path, keep);
    n_committed_ += static_cast<int32_t>(path.size());
    n_spec_ = static_cast<int32_t>(keep.size());
    std::vector<int32_t> ids(keep.size());
    std::iota(ids.begin(), ids.end(), 0);
    return ids;
  }
  void truncate(int32_t n) override {
    check(n >= 0 && n <= n_committed_, "truncate: ", n, " is beyond the committed ", n_committed_);
    p_.send_truncate(n);
    n_committed_ = n;
    n_spec_ = 0;
  }
  ForwardMeter take_meter() override { return std::exchange(meter_, ForwardMeter{}); }

 private:
  Pipeline& p_;
  int32_t n_committed_ = 0, n_spec_ = 0, capacity_ = 0;
  ForwardMeter meter_;
};

}  // namespace

std::function<std::unique_ptr<Target>(const StrategyConfig&)> pipeline_targets(
    const Model& target, const PipelineOptions& options, int threads) {
  if (!session_holder() || session_holder()->transport.rank() != 0 ||
      session_holder()->transport.size() < 2)
    return nullptr;
  if (!session_holder()->pipeline) {
    claim_ranks("a target pipeline");
    session_holder()->pipeline =
        std::make_unique<Pipeline>(session_holder()->transport, target, options, threads);
  }
  Pipeline* p = session_holder()->pipeline.get();
  return [p](const StrategyConfig&) { return std::make_unique<PipelineTarget>(*p); };
}

Pipeline* running_pipeline() {
  return session_holder() ? session_holder()->pipeline.get() : nullptr;
}

}  // namespace parspec::mpi
