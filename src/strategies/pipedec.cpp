// `pipedec`: PipeDec ("PipeDec: Low-Latency Pipeline-based Inference with
// Dynamic Speculative Decoding towards Large-scale Models"). The drafter is
// the pipeline's first stage: the dynamic prediction tree (dyntree's level
// rule) grows one level per draft forward, and each level is submitted to
// the target as soon as it is drafted, so several levels are in flight at
// once (Target::submit/collect; on an MPI pipeline each stage works on a
// different level). When the oldest level in flight, the one holding the
// root, comes back, the target's token after the root is known: if it is
// among the root's children, that child's subtree survives, in the tree and
// in flight (the target keeps its cells, the drafter its cells), and every
// level left without a surviving node is cancelled; otherwise the tree
// restarts from the token. Each token is the target's own choice at the root
// (its argmax, or a draw from its distribution: token matching), so greedy
// and sampled output are exactly the target's.
#include <algorithm>

#include "core/error.h"
#include "core/timer.h"
#include "decode/registry.h"
#include "decode/tree_speculation.h"
#include "sample/sampler.h"

namespace parspec {

namespace {

class PipeDec final : public TreeSpeculation {
 public:
  explicit PipeDec(const StrategyConfig& config) : TreeSpeculation(config) {
    check_dynamic_tree_flags();
  }

  std::string name() const override { return "pipedec"; }

 protected:
  int spec_budget() const override {
    return 2 * (config_.tree_depth * config_.tree_width + config_.tree_depth + 4);
  }

  void reset() override {
    TreeSpeculation::reset();
    in_flight_.clear();
  }

  void finish(GenerationStats&) override {
    // Levels drafted beyond the last token are not wanted.
    for (const Level& level : in_flight_) target_->cancel(level.ticket);
    in_flight_.clear();
  }

  void step(std::vector<int32_t>& emitted) override {
    if (tree_.size() == 0) tree_.add(cur(), -1, 0.0);
    if (tree_.target_cells[0] == kUnprocessed) submit_level({0});
    // Fill the pipeline: every level drafted enters it at once, as deep as the
    // tree may grow and as far as the request needs, until the root's level
    // is back: then the root is decided first, since drafting below a root
    // that may be wrong delays its token and feeds the stages work that a
    // miss throws away (the paper's timestep: the oldest level completes,
    // the tree is pruned, then the next level enters).
    const int depth_limit = std::min(config_.tree_depth, remaining() - 1);
    while (tree_.max_depth() < depth_limit && !target_->arrived(in_flight_.front().ticket)) {
      draft_root();
      const int depth = tree_.max_depth();
      std::vector<int32_t> frontier, unprocessed;
      for (int32_t node = 0; node < tree_.size(); ++node) {
        if (tree_.depths[node] != depth) continue;
        frontier.push_back(node);
        if (tree_.draft_cells[node] == kUnprocessed) unprocessed.push_back(node);
      }
      draft_process(unprocessed);
      const int32_t first_new = tree_.size();
      if (!grow_level(frontier, config_.tree_width)) break;
      std::vector<int32_t> level;
      for (int32_t node = first_new; node < tree_.size(); ++node) level.push_back(node);
      submit_level(level);
    }
    decide_root(emitted);
  }

 private:
  // A level in flight: its forward and the tree nodes of its rows (-1: pruned).
  struct Level {
    int64_t ticket;
    std::vector<int32_t> nodes;
  };

  void submit_level(const std::vector<int32_t>& nodes) {
    const int32_t root_pos = static_cast<int32_t>(seq_.size()) - 1;
    Batch batch;
    const int32_t first = target_->n_spec();
    for (size_t i = 0; i < nodes.size(); ++i) {
      const int32_t node = nodes[i];
      const int32_t parent = tree_.parents[node];
      const int32_t parent_cell = parent < 0 ? -1 : tree_.target_cells[parent];
      check(parent < 0 || parent_cell >= 0, "pipedec: parent of node ", node, " not submitted");
      batch.add(tree_.tokens[node], root_pos + tree_.depths[node], parent_cell, true);
      tree_.target_cells[node] = first + static_cast<int32_t>(i);
    }
    in_flight_.push_back({target_->submit(batch), nodes});
  }

  // The oldest level holds the root: its row gives the next token.
  void decide_root(std::vector<int32_t>& emitted) {
    check(!in_flight_.empty(), "pipedec: the root is not in flight");
    const Level oldest = std::move(in_flight_.front());
    in_flight_.erase(in_flight_.begin());
    const std::vector<float> logits = target_->collect(oldest.ticket);
    const auto at = std::find(oldest.nodes.begin(), oldest.nodes.end(), 0);
    check(at != oldest.nodes.end(), "pipedec: the oldest level does not hold the root");
    const float* row = &logits[static_cast<size_t>(at - oldest.nodes.begin()) * n_vocab()];
    int32_t token = 0;
    {
      ScopedTimer timer(stats_->t_verify_ms);
      token = greedy() ? argmax(row, n_vocab()) : sample_from(distribution(row), rng_);
    }
    emitted.push_back(token);

    int32_t hit = -1, children = 0;
    for (int32_t node = 1; node < tree_.size(); ++node) {
      if (tree_.parents[node] != 0) continue;
      ++children;
      if (tree_.tokens[node] == token) hit = node;
    }
    stats_->observe_step(children, hit >= 0 ? 1 : 0, children > 0 ? 1 : 0);
    prune_to(hit, token);
  }

  // Commits the root on both sides and keeps the subtree below `hit` (or
  // restarts the tree at `token`), renumbering the levels in flight.
  void prune_to(int32_t hit, int32_t token) {
    std::vector<int32_t> survivors;  // tree indices, BFS order, hit first
    if (hit >= 0) {
      std::vector<uint8_t> inside(tree_.size(), 0);
      for (int32_t node = hit; node < tree_.size(); ++node) {
        if (node != hit && !inside[tree_.parents[node]]) continue;
        inside[node] = 1;
        survivors.push_back(node);
      }
    }
    // Target: the root becomes committed; the survivors' cells stay.
    std::vector<int32_t> target_keep;
    for (int32_t node : survivors) target_keep.push_back(tree_.target_cells[node]);
    const int32_t root_cell = tree_.target_cells[0];
    const std::vector<int32_t> target_ids =
        target_->commit(std::span<const int32_t>(&root_cell, 1), target_keep);

    // Drafter: the caught-up prefix, the root, and the hit child if drafted
    // from; its drafted descendants stay.
    std::vector<int32_t> draft_path = draft_prefix_cells_;
    draft_prefix_cells_.clear();
    if (tree_.draft_cells[0] >= 0) draft_path.push_back(tree_.draft_cells[0]);
    const bool hit_in_draft =
        hit >= 0 && tree_.draft_cells[0] != kUnprocessed && tree_.draft_cells[hit] >= 0;
    if (hit_in_draft) draft_path.push_back(tree_.draft_cells[hit]);
    std::vector<int32_t> draft_keep, draft_kept_nodes;
    if (hit_in_draft)
      for (int32_t node : survivors)
        if (node != hit && tree_.draft_cells[node] >= 0) {
          draft_keep.push_back(tree_.draft_cells[node]);
          draft_kept_nodes.push_back(node);
        }
    const std::vector<int32_t> draft_ids = drafter_->accept(draft_path, draft_keep);

    Tree next;
    std::vector<int32_t> index_of(tree_.size(), -1);
    if (hit >= 0) {
      for (size_t k = 0; k < survivors.size(); ++k) {
        const int32_t node = survivors[k];
        const int32_t parent = node == hit ? -1 : index_of[tree_.parents[node]];
        const int32_t i =
            next.add(tree_.tokens[node], parent, tree_.log_probs[node] - tree_.log_probs[hit]);
        index_of[node] = i;
        next.target_cells[i] = target_ids[k];
        next.draft_dist[i] = std::move(tree_.draft_dist[node]);
      }
      if (hit_in_draft) next.draft_cells[0] = kCommitted;
      for (size_t k = 0; k < draft_kept_nodes.size(); ++k)
        next.draft_cells[index_of[draft_kept_nodes[k]]] = draft_ids[k];
      for (int32_t i = 0; i < next.size(); ++i)
        if (next.draft_cells[i] == kUnprocessed) next.draft_dist[i].clear();
    } else {
      next.add(token, -1, 0.0);  // the restart: submitted by the next step
    }
    tree_ = std::move(next);

    // Levels in flight: renumber their rows; a level with no survivor is cancelled.
    std::vector<Level> kept;
    for (Level& level : in_flight_) {
      bool any = false;
      for (int32_t& node : level.nodes) {
        node = node >= 0 ? index_of[node] : -1;
        any |= node >= 0;
      }
      if (any)
        kept.push_back(std::move(level));
      else
        target_->cancel(level.ticket);
    }
    in_flight_ = std::move(kept);
  }

  std::vector<Level> in_flight_;  // oldest first
};

}  // namespace

StrategyInfo pipedec_strategy() {
  return {.name = "pipedec",
          .summary =
              "PipeDec: dynamic-tree levels pipelined through the target (MPI stages "
              "under mpirun), pruned as the oldest level completes",
          .needs_draft = true,
          .options = {tree_depth_option(), tree_branch_option(), tree_width_option()},
          .variant_key = "",
          .roles = {StrategyRole::generate_pipeline_drafted},
          .plan_shapes =
              [](int stages) {
                // As many levels in flight as stages, half and twice as many; narrow to wide.
                std::vector<int> depths;
                for (int depth : {std::max(2, stages / 2), std::max(2, stages), 2 * stages})
                  if (depths.empty() || depths.back() != depth) depths.push_back(depth);
                std::vector<std::string> shapes;
                for (int depth : depths)
                  for (int width : {2, 4, 8, 16, 32})
                    for (int branch : {2, 4})
                      shapes.push_back("pipedec:d" + std::to_string(depth) + "w" +
                                       std::to_string(width) + "c" + std::to_string(branch));
                return shapes;
              },
          .make = [](const StrategyConfig& c) { return std::make_unique<PipeDec>(c); }};
}

}  // namespace parspec
