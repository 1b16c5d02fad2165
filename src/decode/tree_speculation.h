#pragma once
// Shared machinery of the tree strategies (`tree`, `dyntree`): a draft tree
// kept as BFS-ordered node arrays, its processing by the draft and the target
// model (each node is a speculative KV cell of each model that processed it),
// verification, and pruning to the surviving subtree.
#include <vector>

#include "decode/registry.h"
#include "decode/speculative.h"

namespace parspec {

// Options both tree strategies take.
StrategyOption tree_depth_option();
StrategyOption tree_branch_option();
StrategyOption tree_width_option();  // of the trees grown level by level
StrategyOption lossy_typical_option();

// A fixed tree shape where the flags leave it open (0): depth 4, 2 children
// per node, 8 nodes kept per level.
void apply_fixed_tree_defaults(StrategyConfig& config);
// Whether tree and dyntree choose their shapes as they run: no depth given,
// and timing allowed (StrategyConfig::time_sides_at_start).
bool sizes_tree_as_it_runs(const StrategyConfig& config);

class TreeSpeculation : public SpeculativeStrategy {
 public:
  // `sizes_itself`: the strategy chooses the shape the flags leave open;
  // otherwise the fixed defaults fill it in (apply_fixed_tree_defaults).
  explicit TreeSpeculation(const StrategyConfig& config, bool sizes_itself = false);

 protected:
  // Node 0 is the root: cur, the last emitted token. Node i > 0 hangs below
  // parents[i] < i; nodes are appended level by level, so index order is BFS
  // order and every subtree's nodes keep their relative order.
  struct Tree {
    std::vector<int32_t> tokens, parents, depths;
    std::vector<double> log_probs;  // cumulative draft log-probability from the root
    // Speculative cell of the node in each model's cache; kUnprocessed if that
    // model has not run on it; kCommitted for a root already in the cache.
    std::vector<int32_t> draft_cells, target_cells;
    std::vector<Distribution> draft_dist;   // after the node: children are chosen from it
    std::vector<Distribution> target_rows;  // after the node: logits (greedy) or probabilities
    int size() const { return static_cast<int>(tokens.size()); }
    int max_depth() const { return depths.empty() ? 0 : depths.back(); }
    int32_t add(int32_t token, int32_t parent, double log_prob);
  };
  static constexpr int32_t kUnprocessed = -1;
  static constexpr int32_t kCommitted = -2;

  // Runs the draft on the given nodes (their parents processed) in one forward.
  void draft_process(const std::vector<int32_t>& nodes);
  // Runs the target on every unprocessed node of depth <= max_depth (and the
  // root) in one forward.
  void target_process(int max_depth);
  // Makes sure the draft has processed the root (feeding what it lags).
  void draft_root();
  // Distribution that children are chosen from: the sampling distribution
  // when sampling; the plain softmax when greedy (one-hot would rank nothing).
  Distribution draft_distribution(const float* logits) const;
  // dyntree's level rule: appends below `frontier` the `width` best of its
  // nodes' top-c children (c = tree_branch) by cumulative draft
  // log-probability, in BFS order; false if nothing could be added.
  bool grow_level(const std::vector<int32_t>& frontier, int width);
  // The flags of a tree grown level by level (dyntree, pipedec): depth,
  // branching and width in range, or Error naming the flag.
  void check_dynamic_tree_flags() const;
  // Verification walk over the tree (greedy, multi-candidate or token matching).
  TreeVerdict verify(bool multi_candidate);
  // A plain step's verdict: the target's own token after the root, nothing
  // drafted (a subtree kept from the step before may match it).
  TreeVerdict verify_root_only();
  // The drafter's rank of the token the verdict emits at each depth 1, 2, ...
  // below the root, as far as the drafter scored the parent (`cap`: not among
  // the top cap). Before finish_step.
  std::vector<int> path_ranks(const TreeVerdict& verdict, int cap) const;
  // Accounts the verdict: checked nodes were proposed, the path accepted.
  void observe(const TreeVerdict& verdict);
  // Emits the verdict's tokens, commits both caches and prunes the tree to
  // the subtree the next step starts from.
  void finish_step(const TreeVerdict& verdict, std::vector<int32_t>& emitted);

  void reset() override;

  Tree tree_;
  // Draft cells before the root's own cell (tokens the draft caught up on).
  std::vector<int32_t> draft_prefix_cells_;
};

}  // namespace parspec
