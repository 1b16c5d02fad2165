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

namespace parspec {

namespace {

class DynamicTree final : public TreeSpeculation {
 public:
  explicit DynamicTree(const StrategyConfig& config) : TreeSpeculation(config) {
    check_dynamic_tree_flags();
    check(config_.tree_verify_depth >= 0, "--tree-verify-depth must not be negative");
    verify_depth_ = config_.tree_verify_depth == 0
                        ? config_.tree_depth
                        : std::min(config_.tree_verify_depth, config_.tree_depth);
  }

  std::string name() const override { return "dyntree"; }

 protected:
  int spec_budget() const override {
    return 2 * (config_.tree_depth * config_.tree_width + config_.tree_depth + 4);
  }

  void step(std::vector<int32_t>& emitted) override {
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
    finish_step(verify(/*multi_candidate=*/false), emitted);
  }

 private:
  int verify_depth_ = 0;
};

}  // namespace

StrategyInfo dyntree_strategy() {
  return {.name = "dyntree",
          .summary = "PipeDec's dynamic tree: grown level by level, pruned to the matched subtree",
          .needs_draft = true,
          .options = {tree_depth_option(), tree_branch_option(),
                      option_field("--tree-width", "tree_width", "W", "nodes kept per level",
                                   &StrategyConfig::tree_width),
                      option_field("--tree-verify-depth", "tree_verify_depth", "V",
                                   "levels the target checks per step (0 = all); deeper levels are "
                                   "kept for the next step",
                                   &StrategyConfig::tree_verify_depth),
                      lossy_typical_option()},
          .variant_key = "",
          .make = [](const StrategyConfig& c) { return std::make_unique<DynamicTree>(c); }};
}

}  // namespace parspec
