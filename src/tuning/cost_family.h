#pragma once
// A family of candidates in the cost model (tuning/cost_model.h): what a
// strategy's own file registers (StrategyInfo::cost) so that the cost model
// enumerates, predicts, configures and calibrates its candidates without
// knowing the strategy's name.
#include <functional>
#include <string>
#include <vector>

#include "decode/registry.h"
#include "tuning/cost_model.h"

namespace parspec {

// What the calibration (measure_costs) runs one of a family's candidates for.
enum class CalibrationRole {
  none,
  reference,  // the target's greedy continuations and its overhead per step
  chain,      // at γ = max_gamma: per-position acceptance, the draft's overhead, a verified row
  tree,       // at its calibration shape: what a tree node costs beyond the formula
  parallel,   // at the calibration window: its efficiency against its formula
};

struct CostFamily {
  CalibrationRole calibration = CalibrationRole::none;
  // How much machinery it runs, for the real-run check's tie: lower is simpler.
  int complexity = 0;
  // Its candidates the measurements cover, γ and windows up to max_gamma.
  std::function<std::vector<Candidate>(const CostMeasurements&, int max_gamma)> candidates;
  // Tokens and ms per step of one of its candidates (predict() fills the rest).
  std::function<Prediction(const CostMeasurements&, const Candidate&)> predict;
  // Sets the candidate's parameters in a config already named after it, for
  // exact verification at exactly those parameters.
  std::function<void(StrategyConfig&, const Candidate&)> configure;
  // The candidate the calibration runs: at γ (chain), at the window
  // (parallel); the parameter is ignored by families that have one shape.
  std::function<Candidate(int param)> calibration_candidate;
};

// The family of `strategy`; throws Error when the cost model does not tune it.
const CostFamily& cost_family(const std::string& strategy);
// The strategy whose family calibrates `role`.
const StrategyInfo& calibrating_strategy(CalibrationRole role);

// Building blocks of the families' predictions (the formulas of cost_model.h).
// T(n): a target step over n tokens; throws Error when L(n) was not measured.
double target_step_ms(const CostMeasurements& m, int n);
// D(n): a draft forward over n tokens, with the draft's overhead.
double draft_step_ms(const CostMeasurements& m, int n);
// The highest γ (or window) the measurements cover, at most max_gamma.
int chain_reach(const CostMeasurements& m, int max_gamma);
// N: the nodes of a tree with these level sizes.
int tree_nodes(const std::vector<int>& level_sizes);
// Whether every forward of a tree shape was measured (acceptance at its depth
// and branching, the draft's level sizes, L(N+1) within kMaxTreeNodes + 1).
bool tree_shape_fits(const CostMeasurements& m, const Candidate& c);
// A tree step: one draft forward for the root, one per level but the last, a
// verification over the root and every node, and the overhead per node.
Prediction predict_tree_step(const CostMeasurements& m, const Candidate& c);

}  // namespace parspec
