#include "strategies/tree_sizing.h"

#include <algorithm>
#include <cstdio>

#include "core/error.h"
#include "core/timer.h"
#include "sample/sampler.h"
#include "tuning/cost_family.h"
#include "tuning/side_timers.h"

namespace parspec {

namespace {

// The prior: what a small general drafter's ranks scored on the zoo and on
// its 8B-class inflation (rank 0 about 0.6, rank 1 lifting a 2-ary tree's
// depth to about 0.78), worth kPriorSteps observations at each depth.
constexpr std::array<double, RankAcceptance::kRanks + 1> kPriorShares = {0.60, 0.15, 0.06, 0.03,
                                                                         0.16};
constexpr double kPriorSteps = 8;

Candidate as_candidate(const TreeShape& s) {
  return {"tree", 0, s.depth, s.branch, s.width};
}

// The cost model's measurements for these costs and acceptance: the tree
// acceptance of every branching from the per-depth rank shares.
CostMeasurements measurements(const TreeCosts& costs, const RankAcceptance& acceptance) {
  CostMeasurements m;
  for (int n = 1; n <= kMaxTreeNodes + 1; ++n) m.target_ms.push_back(costs.target.at(n));
  for (int n = 1; n <= kMaxTreeNodes; ++n) m.draft_batch_ms.push_back(costs.draft.at(n));
  m.draft_ms = m.draft_batch_ms.front();
  m.tree_node_overhead_ms = costs.node_ms;
  m.tree_accept.assign(kMaxTreeBranch, {});
  for (int c = 1; c <= kMaxTreeBranch; ++c)
    for (int d = 1; d <= kMaxTreeDepth; ++d) {
      std::vector<double> ranks;
      for (int r = 0; r < c; ++r) ranks.push_back(acceptance.share(d, r));
      m.tree_accept[c - 1].push_back(std::move(ranks));
    }
  return m;
}

}  // namespace

std::string TreeShape::label() const {
  if (depth == 0) return "plain";
  char text[48];
  if (width > 0)
    std::snprintf(text, sizeof text, "d%dc%dw%d", depth, branch, width);
  else
    std::snprintf(text, sizeof text, "d%dc%d", depth, branch);
  return text;
}

double measure_node_ms(int n_vocab) {
  std::vector<float> logits(n_vocab);
  for (int i = 0; i < n_vocab; ++i) logits[i] = static_cast<float>((i * 7919) % 1013) / 97.0f;
  int32_t sink = 0;
  const double fastest = sorted_times(
                             [&] {
                               const Stopwatch watch;
                               const std::vector<float> dist = softmax(logits.data(), n_vocab);
                               sink += top_c(dist, kMaxTreeBranch).front();
                               return watch.elapsed_ms();
                             },
                             0, 3)
                             .front();
  return sink >= 0 ? fastest : 0;
}

TreeCosts measure_tree_costs(Target& target, Drafter& drafter) {
  TreeCosts costs;
  costs.target = time_target_curve(target, kMaxTreeNodes + 1);
  costs.draft = time_draft_curve(drafter, kMaxTreeNodes);
  costs.node_ms = measure_node_ms(drafter.n_vocab());
  return costs;
}

void RankAcceptance::reset() {
  for (auto& depth : counts_)
    for (int r = 0; r <= kRanks; ++r) depth[r] = kPriorSteps * kPriorShares[r];
}

void RankAcceptance::observe(int depth, int rank) {
  if (depth < 1 || depth > kMaxTreeDepth) return;
  counts_[depth - 1][std::clamp(rank, 0, kRanks)] += 1;
}

double RankAcceptance::share(int depth, int rank) const {
  check(depth >= 1 && depth <= kMaxTreeDepth && rank >= 0 && rank <= kRanks,
        "rank acceptance: depth ", depth, ", rank ", rank, " out of range");
  const auto& counts = counts_[depth - 1];
  double total = 0;
  for (double c : counts) total += c;
  return counts[rank] / total;
}

std::vector<TreeShape> tree_shape_candidates(bool dynamic, int branch, int width) {
  std::vector<TreeShape> out;
  const int max_branch = dynamic ? 3 : kMaxTreeBranch;
  for (int c = 1; c <= max_branch; ++c) {
    if (branch > 0 && c != branch) continue;
    // A chain's width is 1; a full tree's 0; a grown tree's 2..kMaxTreeBranch.
    std::vector<int> widths = {0};
    if (dynamic) widths = c == 1 ? std::vector<int>{1} : std::vector<int>{2, 3, 4};
    for (int w : widths) {
      if (dynamic && width > 0 && w != width) continue;
      for (int d = 1; d <= kMaxTreeDepth; ++d) {
        const TreeShape shape{d, c, w};
        if (tree_nodes(tree_level_sizes(as_candidate(shape))) > kMaxTreeNodes) break;
        out.push_back(shape);
      }
    }
  }
  return out;
}

ShapeForecast forecast_tree_step(const TreeCosts& costs, const RankAcceptance& acceptance,
                                 const TreeShape& shape) {
  ShapeForecast f;
  f.shape = shape;
  if (shape.depth == 0) {
    f.ms_per_step = costs.target.at(1);
    return f;
  }
  const Prediction p = predict_tree_step(measurements(costs, acceptance), as_candidate(shape));
  f.tokens_per_step = p.tokens_per_step;
  f.ms_per_step = p.ms_per_step;
  return f;
}

ShapeForecast best_tree_shape(const TreeCosts& costs, const RankAcceptance& acceptance,
                              const std::vector<TreeShape>& candidates) {
  check(!candidates.empty(), "tree shapes: no candidate shape");
  const CostMeasurements m = measurements(costs, acceptance);
  ShapeForecast best{};
  for (const TreeShape& shape : candidates) {
    const Prediction p = predict_tree_step(m, as_candidate(shape));
    const ShapeForecast f{shape, p.tokens_per_step, p.ms_per_step};
    if (best.shape.depth == 0 || f.tokens_per_ms() > best.tokens_per_ms()) best = f;
  }
  return best;
}

ShapeForecast fastest_tree_shape(const TreeCosts& costs, const RankAcceptance& acceptance,
                                 const std::vector<TreeShape>& candidates) {
  const ShapeForecast plain = forecast_tree_step(costs, acceptance, TreeShape{});
  if (candidates.empty()) return plain;
  const ShapeForecast best = best_tree_shape(costs, acceptance, candidates);
  return best.tokens_per_ms() > plain.tokens_per_ms() ? best : plain;
}

int fastest_node_budget(const std::vector<double>& sorted_acceptance, double drafting_ms,
                        const ForwardCurve& verify, int max_rows) {
  int best = 0;
  double expected = 1, best_rate = 1 / (drafting_ms + verify.at(1));
  for (size_t b = 1; b <= sorted_acceptance.size() && static_cast<int>(b) < max_rows; ++b) {
    expected += sorted_acceptance[b - 1];
    const double rate = expected / (drafting_ms + verify.at(static_cast<int>(b) + 1));
    if (rate > best_rate) best = static_cast<int>(b), best_rate = rate;
  }
  return best;
}

TreeShapePolicy::TreeShapePolicy(TreeCosts costs, std::vector<TreeShape> candidates)
    : costs_(std::move(costs)), candidates_(std::move(candidates)) {
  check(!candidates_.empty(), "tree shapes: no candidate shape");
}

void TreeShapePolicy::reset() {
  acceptance_.reset();
  plain_steps_ = 0;
  request_costs_.reset();
}

void TreeShapePolicy::use_request_curves(const ForwardCurve& target, const ForwardCurve& draft) {
  request_costs_ = costs_;
  request_costs_->target = target;
  request_costs_->draft = draft;
}

ShapeForecast TreeShapePolicy::choose(const RankAcceptance& acceptance) const {
  constexpr double kMargin = 0.05;
  const ShapeForecast plain = forecast_tree_step(step_costs(), acceptance, TreeShape{});
  const ShapeForecast best = best_tree_shape(step_costs(), acceptance, candidates_);
  return best.tokens_per_ms() >= (1 + kMargin) * plain.tokens_per_ms() ? best : plain;
}

TreeShape TreeShapePolicy::next() {
  constexpr int kProbeEvery = 16;
  const TreeShape chosen = choose(acceptance_).shape;
  if (chosen.depth > 0) {
    plain_steps_ = 0;
    return chosen;
  }
  if (++plain_steps_ % kProbeEvery != 0) return chosen;
  // The probe: the best tree, however it compares with a plain step.
  return best_tree_shape(step_costs(), acceptance_, candidates_).shape;
}

void TreeShapePolicy::observe(const std::vector<int>& ranks) {
  for (size_t d = 0; d < ranks.size(); ++d) acceptance_.observe(static_cast<int>(d) + 1, ranks[d]);
}

std::string TreeShapePolicy::describe(const std::string& strategy) const {
  const RankAcceptance prior;
  const ShapeForecast plain = forecast_tree_step(costs_, prior, TreeShape{});
  const ShapeForecast best_tree = best_tree_shape(costs_, prior, candidates_);
  const bool tree_first = choose(prior).shape.depth > 0;
  char line[640];
  std::snprintf(line, sizeof line,
                "%s: the shape is chosen step by step from this machine's forward times "
                "(target L(1) %.3f ms, L(9) %.3f ms, L(17) %.3f ms; draft D(1) %.3f ms, D(16) "
                "%.3f ms; %.3f ms a node) and the acceptance so far; at the prior acceptance "
                "the best shape, %s, forecasts %.2f tokens a step, %.0f tok/s against %.0f "
                "plain, so it starts with %s (--tree-depth N fixes the shape)",
                strategy.c_str(), costs_.target.at(1), costs_.target.at(9), costs_.target.at(17),
                costs_.draft.at(1), costs_.draft.at(16), costs_.node_ms,
                best_tree.shape.label().c_str(), best_tree.tokens_per_step,
                1000 * best_tree.tokens_per_ms(), 1000 * plain.tokens_per_ms(),
                tree_first ? "that shape" : "plain steps (a tree every 16th)");
  return line;
}

SizedTreeSpeculation::SizedTreeSpeculation(const StrategyConfig& config, bool dynamic)
    : TreeSpeculation(config, sizes_tree_as_it_runs(config)) {
  if (!sizes_tree_as_it_runs(config_)) return;
  const int max_branch = dynamic ? 3 : kMaxTreeBranch;
  check(config_.tree_branch >= 0 && config_.tree_branch <= max_branch &&
            (!dynamic || (config_.tree_width >= 0 && config_.tree_width <= kMaxTreeBranch)),
        "without --tree-depth, the shapes chosen as it runs have at most ", max_branch,
        " children per node (--tree-branch)",
        dynamic ? " and " + std::to_string(kMaxTreeBranch) + " nodes per level (--tree-width)"
                : std::string());
  policy_.emplace(measure_tree_costs(*target_, *drafter_),
                  tree_shape_candidates(dynamic, config_.tree_branch, config_.tree_width));
}

std::vector<std::string> SizedTreeSpeculation::sizing_notes() const {
  return policy_ ? std::vector<std::string>{policy_->describe(name())} : std::vector<std::string>{};
}

void SizedTreeSpeculation::reset() {
  TreeSpeculation::reset();
  if (policy_) policy_->reset();
}

void SizedTreeSpeculation::prefill() {
  TreeSpeculation::prefill();
  const int context = static_cast<int>(seq_.size());
  if (!policy_ || context < kLongContext) return;
  int bucket = kLongContext;
  while (bucket * 2 <= context) bucket *= 2;
  auto it = long_context_curves_.find(bucket);
  if (it == long_context_curves_.end()) {
    ForwardCurve target = time_target_curve_here(*target_, kMaxTreeNodes + 1);
    ForwardCurve draft = time_draft_curve_here(*drafter_, kMaxTreeNodes);
    it = long_context_curves_.emplace(bucket, std::make_pair(std::move(target), std::move(draft)))
             .first;
  }
  policy_->use_request_curves(it->second.first, it->second.second);
}

TreeShape SizedTreeSpeculation::begin_sized_step(std::vector<int32_t>& emitted) {
  const TreeShape shape = policy_->next();
  ++stats_->step_shapes[shape.label()];
  if (shape.depth == 0) end_step(verify_root_only(), emitted);
  return shape;
}

void SizedTreeSpeculation::end_step(const TreeVerdict& verdict, std::vector<int32_t>& emitted) {
  if (policy_) policy_->observe(path_ranks(verdict, RankAcceptance::kRanks));
  finish_step(verdict, emitted);
}

}  // namespace parspec
