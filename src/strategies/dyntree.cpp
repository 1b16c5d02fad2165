// `dyntree`: PipeDec's dynamic prediction tree on one machine ("PipeDec:
// Low-Latency Pipeline-based Inference with Dynamic Speculative Decoding
// towards Large-scale Models", section 3.3). The tree grows one level per draft
// forward; each level keeps the top min(w, n·c) candidates by cumulative draft
// log-probability, where n is the number of nodes of the level above and each
// contributes its c best children. The target checks the tree, verification
// is token matching (exact for any tree), and the tree is pruned to the
// subtree below the matched token, which keeps its KV cells in the draft
// cache and is reused by the next step.
#include <algorithm>

#include "core/error.h"
#include "decode/registry.h"
#include "decode/tree_speculation.h"
#include "strategies/tree_sizing.h"
#include "tuning/cost_family.h"

namespace parspec {

namespace {

StrategyOption tree_verify_depth_option() {
  return option_entry("--tree-verify-depth", "tree_verify_depth", "V",
                      "levels the target checks per step (0 = all); deeper levels are kept for "
                      "the next step",
                      0);
}

class DynamicTree final : public SizedTreeSpeculation {
 public:
  explicit DynamicTree(const StrategyConfig& config)
      : SizedTreeSpeculation(config, /*dynamic=*/true) {
    const int verify_depth = option_value<int>(config_, tree_verify_depth_option());
    check(verify_depth >= 0, "--tree-verify-depth must not be negative");
    if (sized()) {
      check(verify_depth == 0, "--tree-verify-depth needs --tree-depth");
      return;
    }
    check_dynamic_tree_flags();
    verify_depth_ =
        verify_depth == 0 ? config_.tree_depth : std::min(verify_depth, config_.tree_depth);
  }

  std::string name() const override { return "dyntree"; }
  std::vector<std::string> notes() const override { return sizing_notes(); }

 protected:
  int spec_budget() const override {
    const int depth = sized() ? kMaxTreeDepth : config_.tree_depth;
    const int width = sized() ? kMaxTreeBranch : config_.tree_width;
    return 2 * (depth * width + depth + 4);
  }

  void step(std::vector<int32_t>& emitted) override {
    if (sized()) {
      const TreeShape shape = begin_sized_step(emitted);
      if (shape.depth == 0) return;
      config_.tree_depth = verify_depth_ = shape.depth;
      config_.tree_branch = shape.branch;
      config_.tree_width = shape.width;
    }
    draft_root();
    // Update: grow level by level until the tree is tree_depth deep. Levels
    // kept from the previous step are not recomputed.
    while (tree_.max_depth() < config_.tree_depth) {
      const int depth = tree_.max_depth();
      std::vector<int32_t> frontier, unprocessed;
      for (int32_t node = 0; node < tree_.size(); ++node) {
        if (tree_.depths[node] != depth) continue;
        frontier.push_back(node);
        if (tree_.draft_cells[node] == kUnprocessed) unprocessed.push_back(node);
      }
      draft_process(unprocessed);
      if (!grow_level(frontier, config_.tree_width)) break;
    }
    target_process(verify_depth_);
    end_step(verify(/*multi_candidate=*/false), emitted);
  }

 private:
  int verify_depth_ = 0;
};

Candidate dynamic_shape(int depth, int branch, int width) {
  return {"dyntree", 0, depth, branch, width};
}

// The cost model's dynamic trees: shapes narrower than the full tree of their
// depth and c (c 2..3, w 2..kMaxTreeBranch), priced as a tree step; its
// calibration shape prices a node.
std::shared_ptr<const CostFamily> dyntree_cost() {
  auto family = std::make_shared<CostFamily>();
  family->calibration = CalibrationRole::tree;
  family->complexity = 3;
  family->candidates = [](const CostMeasurements& m, int) {
    std::vector<Candidate> out;
    for (int c = 2; c <= 3; ++c)
      for (int w = 2; w <= kMaxTreeBranch; ++w)
        for (int d = 2; d <= kMaxTreeDepth && tree_shape_fits(m, dynamic_shape(d, c, w)); ++d)
          if (tree_level_sizes(dynamic_shape(d, c, w)) != tree_level_sizes(dynamic_shape(d, c, 0)))
            out.push_back(dynamic_shape(d, c, w));
    return out;
  };
  family->predict = predict_tree_step;
  family->configure = [](StrategyConfig& config, const Candidate& c) {
    apply_strategy_spec(parse_strategy_spec(c.label()), config);
    tree_verify_depth_option().set(config, 0);
    config.lossy_typical = false;
  };
  family->calibration_candidate = [](int) { return dynamic_shape(3, 2, 3); };
  return family;
}

}  // namespace

StrategyInfo dyntree_strategy() {
  return {.name = "dyntree",
          .summary = "PipeDec's dynamic tree: grown level by level, pruned to the matched subtree",
          .needs_draft = true,
          .options = {tree_depth_option(), tree_branch_option(), tree_width_option(),
                      tree_verify_depth_option(), lossy_typical_option()},
          .variant_key = "",
          .served = true,
          .cost = dyntree_cost(),
          .make = [](const StrategyConfig& c) { return std::make_unique<DynamicTree>(c); }};
}

}  // namespace parspec
