#pragma once
// The two sides of draft-and-verify (decode/sides.h) on a simulated cluster:
// each forward is computed for real in this process, on the whole model, so
// that the tokens are the real ones (batch invariance makes them the tokens
// the cluster would produce), while its time is the cluster's: the target's
// forwards travel the simulated pipeline, the drafter's cost its profile's
// time on the head (or, for a pool's members, on drafter nodes of their own
// that work at the same time, reached over a link).
#include <functional>
#include <map>
#include <memory>
#include <string>

#include "decode/sides.h"
#include "decode/strategy.h"
#include "sim/cost_profile.h"
#include "sim/virtual_cluster.h"

namespace parspec::sim {

struct ClusterSpec {
  PipelineLayout pipeline;
  CostProfile target, draft;
  double head_time_scale = 1;
  // Pool strategies (cosine, specinfer): each drafter on a node of its own,
  // reached over a link like the pipeline's; false: every drafter on the head.
  bool drafter_nodes = true;
};

// One simulated cluster: the head's clock, the pipeline, and factories of
// sides for StrategyConfig::make_target / make_drafter.
class SimCluster {
 public:
  explicit SimCluster(const ClusterSpec& spec);

  HeadClock& clock() { return clock_; }
  SimPipeline& pipeline() { return pipeline_; }
  const ClusterSpec& spec() const { return spec_; }

  // The target on the pipeline; the real forwards run on `real`.
  std::unique_ptr<Target> make_target(std::unique_ptr<Target> real);
  // A drafter on the head, or on a node of its own when `own_node`.
  std::unique_ptr<Drafter> make_drafter(std::unique_ptr<Drafter> real, bool own_node);
  // Sets config.make_target and config.make_drafter (the real sides on the
  // config's models and workers); pool members get nodes of their own when
  // spec().drafter_nodes. Strategies do not time their sides (fixed tree shapes).
  void attach(StrategyConfig& config);

 private:
  ClusterSpec spec_;
  HeadClock clock_;
  SimPipeline pipeline_;
};

}  // namespace parspec::sim
