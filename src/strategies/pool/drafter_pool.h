#pragma once
// The speculation cluster of the pool strategies (cosine, specinfer): several
// drafters, each a Drafter with its own KV cache, made from the config's
// `drafters` (or its one draft model). Members on workers of their own run
// their forwards at the same time; members that share a worker, or whose
// forwards go through the server's batcher (the config's make_drafter), run
// one after the other on the calling thread. A member on another process (an
// MPI rank) is one more Drafter implementation: the pool only calls the
// Drafter interface, so such a member plugs in through make_drafter.
#include <functional>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "core/threads.h"
#include "decode/sides.h"
#include "decode/strategy.h"

namespace parspec {

class DrafterPool {
 public:
  // Throws Error when there is no drafter or one's vocabulary differs from the target's.
  explicit DrafterPool(const StrategyConfig& config);

  int size() const { return static_cast<int>(members_.size()); }
  Drafter& member(int i) { return *members_[i]; }
  const std::string& name(int i) const { return names_[i]; }
  bool concurrent() const { return concurrent_; }

  // Runs job(i) for every i of `members`, concurrently when the pool can (the
  // first on the calling thread, the others on the pool's own threads);
  // rethrows the first error after every job ended.
  void run(std::span<const int> members, const std::function<void(int)>& job);
  // Forwards of every member since the last call.
  ForwardMeter take_meter();

 private:
  std::vector<std::unique_ptr<Drafter>> members_;
  std::vector<std::string> names_;
  bool concurrent_ = false;
  std::vector<BorrowedRunner> runners_;  // concurrent pools: one per member after the first
};

}  // namespace parspec
