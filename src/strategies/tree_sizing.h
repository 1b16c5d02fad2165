#pragma once
// Tree shapes from measured costs, for `tree` and `dyntree` when no shape is
// given. A tree pays only where verifying its nodes costs little more than
// one token: on a GPU up to a tile of rows, on a CPU hardly ever. So the
// shape is the one the cost model of `tune` (predict_tree_step) forecasts
// fastest from this machine's forward curve of the target T(n) and of the
// drafter D(n), timed at start-up on the strategy's own sides, and from the
// acceptance of the drafter's ranks seen so far in the request; a plain step
// (the target's own next token) where no tree beats it.
#include <array>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "decode/sides.h"
#include "decode/tree_speculation.h"
#include "model/forward_timing.h"
#include "tuning/cost_model.h"

namespace parspec {

// depth 0: a plain step. branch 1: a chain. width 0: a full tree.
struct TreeShape {
  int depth = 0, branch = 1, width = 0;
  bool operator==(const TreeShape&) const = default;
  std::string label() const;  // "plain", "d3c2", "d4c2w3"
};

struct TreeCosts {
  ForwardCurve target;  // T(n), n = 1..kMaxTreeNodes + 1
  ForwardCurve draft;   // D(n), n = 1..kMaxTreeNodes
  double node_ms = 0;   // each drafted node beyond the forwards
};

// What a drafted node costs beyond the forwards: its distribution over the
// vocabulary (a softmax) and the choice of its top children, timed at start-up
// on a row of the drafter's vocabulary.
double measure_node_ms(int n_vocab);

// T(n) and D(n) up to 17 and 16 (tuning/side_timers.h), timed on the sides as
// they will run (their cells dropped and meters emptied), and the node's cost.
TreeCosts measure_tree_costs(Target& target, Drafter& drafter);

// How often the target's token is the drafter's rank-r token at tree depth d,
// over the request's steps so far, from a prior worth a few steps.
class RankAcceptance {
 public:
  static constexpr int kRanks = kMaxTreeBranch;
  RankAcceptance() { reset(); }
  void reset();
  // The target's token at `depth` (1-based) was the drafter's rank `rank`
  // (kRanks or more: none of the ranks a tree would draft).
  void observe(int depth, int rank);
  // P(rank r at depth d), d in 1..kMaxTreeDepth.
  double share(int depth, int rank) const;

 private:
  std::array<std::array<double, kRanks + 1>, kMaxTreeDepth> counts_{};
};

// The shapes a strategy may take: full trees of c = 1..kMaxTreeBranch (tree),
// or the grown trees of dyntree (c = 1..3, w = 1..kMaxTreeBranch), each at most
// kMaxTreeNodes nodes and kMaxTreeDepth deep; `branch`/`width` > 0 keep only
// shapes with that value.
std::vector<TreeShape> tree_shape_candidates(bool dynamic, int branch, int width);

struct ShapeForecast {
  TreeShape shape;
  double tokens_per_step = 1, ms_per_step = 0;
  double tokens_per_ms() const { return ms_per_step > 0 ? tokens_per_step / ms_per_step : 0; }
};

// One step of `shape` (a plain step: one token per T(1)).
ShapeForecast forecast_tree_step(const TreeCosts& costs, const RankAcceptance& acceptance,
                                 const TreeShape& shape);
// The fastest of `candidates`, however it compares with a plain step
// (`candidates` must not be empty).
ShapeForecast best_tree_shape(const TreeCosts& costs, const RankAcceptance& acceptance,
                              const std::vector<TreeShape>& candidates);
// The fastest of `candidates` and a plain step.
ShapeForecast fastest_tree_shape(const TreeCosts& costs, const RankAcceptance& acceptance,
                                 const std::vector<TreeShape>& candidates);

// The count B of drafted nodes to verify that makes a step fastest: the
// nodes' chances of being accepted (their path acceptance, highest first)
// give 1 + their sum over the first B tokens a step, for `drafting_ms` (spent
// already) + T(B + 1); B = 0 verifies the root alone. At most max_rows − 1.
int fastest_node_budget(const std::vector<double>& sorted_acceptance, double drafting_ms,
                        const ForwardCurve& verify, int max_rows);

// The shape of each step of a request: the fastest forecast at the acceptance
// seen so far, a plain step unless a tree beats it by 5% (what the forecast
// leaves out). While plain, every 16th step is the best tree, so that the
// acceptance keeps being observed. Only timings kept for the process (at
// start-up, and per prompt length) and the request's own tokens decide, so
// two runs of a request with one seed take the same shapes in one process.
class TreeShapePolicy {
 public:
  TreeShapePolicy(TreeCosts costs, std::vector<TreeShape> candidates);
  void reset();  // a new request: the prior again, the start-up T(n)
  // This request's T(n) and D(n), timed on its own context (a long prompt).
  void use_request_curves(const ForwardCurve& target, const ForwardCurve& draft);
  TreeShape next();
  // After a step: the drafter's rank of the target's token at depths 1, 2, ...
  // as far as the step drafted below the path.
  void observe(const std::vector<int>& ranks);
  // The start-up line: what was timed and the first step's shape.
  std::string describe(const std::string& strategy) const;

 private:
  // The fastest forecast at `acceptance`; plain unless a tree beats it by 5%.
  ShapeForecast choose(const RankAcceptance& acceptance) const;

  // The costs a step is weighed with: the start-up ones, or this request's.
  const TreeCosts& step_costs() const { return request_costs_ ? *request_costs_ : costs_; }

  TreeCosts costs_;
  std::optional<TreeCosts> request_costs_;
  std::vector<TreeShape> candidates_;
  RankAcceptance acceptance_;
  int plain_steps_ = 0;
};

// A tree strategy that, with no depth given (sizes_tree_as_it_runs), takes
// its shapes from a TreeShapePolicy timed on its own sides at start-up.
class SizedTreeSpeculation : public TreeSpeculation {
 protected:
  // `dynamic`: dyntree's grown shapes, else full trees; the flags given pin
  // the branching and width of the candidates.
  SizedTreeSpeculation(const StrategyConfig& config, bool dynamic);

  bool sized() const { return policy_.has_value(); }
  std::vector<std::string> sizing_notes() const;
  void reset() override;
  // After a prompt of kLongContext tokens or more, T(n) and D(n) are timed
  // again on that context (once per power of two of prompt length in a
  // process): a row's attention over a long cache is what the start-up
  // timing, on a short one, leaves out.
  void prefill() override;
  static constexpr int kLongContext = 512;
  // The step's shape (counted in the statistics). A plain one is taken here:
  // the step is then over and depth 0 is returned.
  TreeShape begin_sized_step(std::vector<int32_t>& emitted);
  // Learns from the verdict, then finish_step.
  void end_step(const TreeVerdict& verdict, std::vector<int32_t>& emitted);

 private:
  std::optional<TreeShapePolicy> policy_;
  // T(n) and D(n) by the prompt's power of two.
  std::map<int, std::pair<ForwardCurve, ForwardCurve>> long_context_curves_;
};

}  // namespace parspec
