// `tree`: static-tree speculation as in SpecInfer (PipeDec's STPP baseline).
// The draft expands every node into its top-c children (sampling: c children
// drawn without replacement from its distribution) down to a fixed depth; the
// target checks the whole tree in one forward with the tree attention mask.
#include <algorithm>
#include <cmath>

#include "core/error.h"
#include "decode/registry.h"
#include "decode/tree_speculation.h"
#include "sample/sampler.h"
#include "strategies/tree_sizing.h"
#include "tuning/cost_family.h"

namespace parspec {

namespace {

class StaticTree final : public SizedTreeSpeculation {
 public:
  explicit StaticTree(const StrategyConfig& config)
      : SizedTreeSpeculation(config, /*dynamic=*/false) {
    check(config_.tree_depth >= 0 && config_.tree_depth <= 16, "--tree-depth must be 1..16");
    check(config_.tree_branch >= 0 && config_.tree_branch <= 16, "--tree-branch must be 1..16");
    if (sized()) return;
    int64_t nodes = 0, level = 1;
    for (int d = 0; d < config_.tree_depth; ++d) nodes += (level *= config_.tree_branch);
    check(nodes <= 4096, "a static tree of branch ", config_.tree_branch, " and depth ",
          config_.tree_depth, " has ", nodes, " nodes; at most 4096 are allowed");
    n_nodes_ = static_cast<int>(nodes);
  }

  std::string name() const override { return "tree"; }
  std::vector<std::string> notes() const override { return sizing_notes(); }

 protected:
  int spec_budget() const override {
    return sized() ? kMaxTreeNodes + 2 * kMaxTreeDepth + 4 : n_nodes_ + 2 * config_.tree_depth + 4;
  }

  void step(std::vector<int32_t>& emitted) override {
    if (sized()) {
      const TreeShape shape = begin_sized_step(emitted);
      if (shape.depth == 0) return;
      config_.tree_depth = shape.depth;
      config_.tree_branch = shape.branch;
    }
    draft_root();
    std::vector<int32_t> frontier = {0};
    for (int depth = 1; depth <= config_.tree_depth; ++depth) {
      std::vector<int32_t> level;
      for (int32_t parent : frontier) {
        for (int32_t token : choose_children(tree_.draft_dist[parent])) {
          const double lp = tree_.log_probs[parent] + std::log(tree_.draft_dist[parent][token]);
          level.push_back(tree_.add(token, parent, lp));
        }
      }
      if (depth < config_.tree_depth) draft_process(level);
      frontier = std::move(level);
    }
    target_process(config_.tree_depth);
    end_step(verify(/*multi_candidate=*/true), emitted);
  }

 private:
  // Greedy: the c most likely tokens. Sampling: c draws without replacement,
  // as multi-candidate verification requires.
  std::vector<int32_t> choose_children(const Distribution& dist) {
    if (greedy()) return top_c(dist, config_.tree_branch);
    std::vector<int32_t> chosen;
    std::vector<float> remaining = dist;
    for (int i = 0; i < config_.tree_branch; ++i) {
      double mass = 0.0;
      for (float v : remaining) mass += v;
      if (mass <= 0.0) break;
      const int32_t token = sample_from(std::span<const float>(remaining), rng_);
      chosen.push_back(token);
      remaining[token] = 0.0f;
    }
    return chosen;
  }

  int n_nodes_ = 0;
};

Candidate full_shape(int depth, int branch) {
  return {"tree", 0, depth, branch, 0};
}

// The cost model's full trees (c 2..kMaxTreeBranch, as deep as the
// measurements reach), priced as a tree step.
std::shared_ptr<const CostFamily> tree_cost() {
  auto family = std::make_shared<CostFamily>();
  family->complexity = 2;
  family->candidates = [](const CostMeasurements& m, int) {
    std::vector<Candidate> out;
    for (int c = 2; c <= kMaxTreeBranch; ++c)
      for (int d = 1; d <= kMaxTreeDepth && tree_shape_fits(m, full_shape(d, c)); ++d)
        out.push_back(full_shape(d, c));
    return out;
  };
  family->predict = predict_tree_step;
  family->configure = [](StrategyConfig& config, const Candidate& c) {
    apply_strategy_spec(parse_strategy_spec(c.label()), config);
    config.lossy_typical = false;
  };
  family->calibration_candidate = [](int) { return full_shape(2, 2); };
  return family;
}

}  // namespace

StrategyInfo tree_strategy() {
  return {.name = "tree",
          .summary = "static tree (SpecInfer): every node expanded into its top-c children",
          .needs_draft = true,
          .options = {tree_depth_option(), tree_branch_option(), lossy_typical_option()},
          .variant_key = "",
          .served = true,
          .cost = tree_cost(),
          .make = [](const StrategyConfig& c) { return std::make_unique<StaticTree>(c); }};
}

}  // namespace parspec
