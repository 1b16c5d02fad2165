// `easyspec`: speculative decoding with a layer-parallel drafter ("EasySpec:
// Layer-Parallel Speculative Decoding for Efficient Multi-GPU Utilization").
// The drafter (layer_parallel.h) runs each group's attention blocks at once on
// the group's input ("fuzzy" drafting) and recomputes the accepted tokens' KV
// exactly in the next round's first forward (bonus calibration). The drafts
// form a chain of γ tokens (verified as `sd` does) or, with --lp-tree,
// EasySpec's fixed-width tree: at every depth the `width` best nodes by path
// probability are expanded `width` ways and the `width` best children kept
// (verified by token matching, exact for any tree). Either way the target
// checks every token, so the output is that of `ar`.
#include <algorithm>
#include <cmath>
#include <string>

#include "core/error.h"
#include "core/timer.h"
#include "decode/registry.h"
#include "decode/speculative.h"
#include "decode/tree_speculation.h"
#include "sample/sampler.h"
#include "strategies/easyspec/layer_parallel.h"

namespace parspec {

namespace {

const StrategyOption& lp_size_option() {
  static const StrategyOption o = option_entry(
      "--lp-size", "lp_size", "N",
      "layers per group of the layer-parallel drafter (first and last layer alone; 1 = "
      "layer-sequential)",
      2);
  return o;
}

const StrategyOption& lp_groups_option() {
  static const StrategyOption o =
      option_entry("--lp-groups", "lp_groups", "G",
                   "explicit layer groups of the drafter, e.g. 0/1-3/4-6/7 (overrides --lp-size)",
                   std::string());
  return o;
}

const StrategyOption& calibrate_option() {
  static const StrategyOption o = option_entry(
      "--calibrate", "calibrate", "MODE",
      "when the drafter recomputes fuzzy KV exactly: never, every (after each verification) or "
      "mismatch (after a rejected draft)",
      std::string("every"));
  return o;
}

const StrategyOption& lp_tree_option() {
  static const StrategyOption o = option_entry(
      "--lp-tree", "lp_tree", "",
      "draft EasySpec's fixed-width tree (--tree-depth levels, --tree-width nodes per level) "
      "instead of a chain of --draft-max tokens",
      false);
  return o;
}

std::vector<LayerGroup> configured_groups(const StrategyConfig& config) {
  const int n_layer = config.draft->config().n_layer;
  const std::string spec = option_value<std::string>(config, lp_groups_option());
  if (!spec.empty()) return parse_lp_groups(spec, n_layer);
  const int lp_size = option_value<int>(config, lp_size_option());
  check(lp_size >= 1 && lp_size <= 64, "--lp-size must be 1..64 (got ", lp_size, ")");
  return groups_from_lp_size(n_layer, lp_size);
}

// Replaces the ModelDrafter that SpeculativeStrategy made with the
// layer-parallel drafter on the same draft model and worker.
LayerParallelDrafter* install_drafter(const StrategyConfig& config,
                                      std::unique_ptr<Drafter>& drafter) {
  const Calibration calibration =
      parse_calibration(option_value<std::string>(config, calibrate_option()));
  std::vector<LayerGroup> groups = configured_groups(config);
  std::unique_ptr<GroupExecutor> executor;
  if (config.make_group_executor) executor = config.make_group_executor(*config.draft, groups);
  auto lp = std::make_unique<LayerParallelDrafter>(config.draft, *config.draft_worker,
                                                   std::move(groups), calibration,
                                                   std::move(executor), config.draft_executor);
  LayerParallelDrafter* raw = lp.get();
  drafter = std::move(lp);
  return raw;
}

std::string describe_drafter(const LayerParallelDrafter& lp, const StrategyConfig& config) {
  return "easyspec: draft layer groups " + format_lp_groups(lp.groups()) + " (" +
         lp.describe_slots() + " for a group's attention blocks), calibrate " +
         option_value<std::string>(config, calibrate_option());
}

class EasySpecChain final : public SpeculativeStrategy {
 public:
  explicit EasySpecChain(const StrategyConfig& config) : SpeculativeStrategy(config) {
    check(config_.draft_max >= 1, "--draft-max must be at least 1");
    lp_ = install_drafter(config_, drafter_);
  }

  std::string name() const override { return "easyspec"; }
  std::vector<std::string> notes() const override { return {describe_drafter(*lp_, config_)}; }

 protected:
  int spec_budget() const override { return config_.draft_max + 1; }

  void step(std::vector<int32_t>& emitted) override {
    int32_t n_tail = 0;
    int n_fed = 0;
    std::vector<Distribution> q;
    std::vector<float> logits = drafter_->catch_up(seq_, &n_tail);
    std::vector<int32_t> drafts;
    const int gamma = std::max(1, std::min(config_.draft_max, remaining() - 1));
    for (int i = 0; i < gamma; ++i) {
      Distribution qi = distribution(logits.data());
      const int32_t token = greedy() ? argmax(logits.data(), n_vocab()) : sample_from(qi, rng_);
      drafts.push_back(token);
      q.push_back(std::move(qi));
      if (i + 1 == gamma) break;
      Batch next;
      const int32_t parent = n_tail - 1 + i;
      next.add(token, drafter_->n_seen() + parent + 1, parent, true);
      logits = drafter_->propose(next);
      ++n_fed;
    }
    const int k = static_cast<int>(drafts.size());

    const int n = verify_and_commit_chain(drafts, q, emitted);
    lp_->note_mismatch(n < k);
    drafter_->accept_chain(n_tail + std::min(n, n_fed));
  }

 private:
  LayerParallelDrafter* lp_ = nullptr;
};

class EasySpecTree final : public TreeSpeculation {
 public:
  explicit EasySpecTree(const StrategyConfig& config) : TreeSpeculation(config) {
    check(config_.tree_depth >= 1 && config_.tree_depth <= 64, "--tree-depth must be 1..64");
    check(config_.tree_width >= 1 && config_.tree_width <= 256, "--tree-width must be 1..256");
    lp_ = install_drafter(config_, drafter_);
  }

  std::string name() const override { return "easyspec"; }
  std::vector<std::string> notes() const override { return {describe_drafter(*lp_, config_)}; }

 protected:
  int spec_budget() const override {
    return 2 * (config_.tree_depth * config_.tree_width + config_.tree_depth + 4);
  }

  void step(std::vector<int32_t>& emitted) override {
    draft_root();
    std::vector<int32_t> frontier = {0};
    for (int depth = 1; depth <= config_.tree_depth; ++depth) {
      if (depth > 1) draft_process(frontier);
      frontier = grow_level(frontier);
      if (frontier.empty()) break;
    }
    target_process(config_.tree_depth);
    const TreeVerdict verdict = verify(/*multi_candidate=*/false);
    lp_->note_mismatch(static_cast<int>(verdict.path.size()) < tree_.max_depth());
    finish_step(verdict, emitted);
  }

 private:
  struct Candidate {
    double log_prob;
    int32_t parent;
    int32_t token;
  };

  // Every frontier node's `width` best children; the `width` best of them by
  // path probability become the next level (returned, in BFS order).
  std::vector<int32_t> grow_level(const std::vector<int32_t>& frontier) {
    const int w = config_.tree_width;
    std::vector<Candidate> candidates;
    for (int32_t parent : frontier) {
      const Distribution& dist = tree_.draft_dist[parent];
      for (int32_t id : top_c(dist, w)) {
        if (dist[id] <= 0.0f) break;
        candidates.push_back(
            {tree_.log_probs[parent] + std::log(static_cast<double>(dist[id])), parent, id});
      }
    }
    const size_t keep = std::min<size_t>(candidates.size(), static_cast<size_t>(w));
    std::stable_sort(
        candidates.begin(), candidates.end(),
        [](const Candidate& a, const Candidate& b) { return a.log_prob > b.log_prob; });
    candidates.resize(keep);
    std::stable_sort(candidates.begin(), candidates.end(),
                     [](const Candidate& a, const Candidate& b) { return a.parent < b.parent; });
    std::vector<int32_t> level;
    for (const Candidate& c : candidates) level.push_back(tree_.add(c.token, c.parent, c.log_prob));
    return level;
  }

  LayerParallelDrafter* lp_ = nullptr;
};

}  // namespace

StrategyInfo easyspec_strategy() {
  return {
      .name = "easyspec",
      .summary =
          "EasySpec: layer-parallel (fuzzy) drafting with bonus calibration; chain or "
          "fixed-width tree",
      .needs_draft = true,
      .options = {lp_size_option(), lp_groups_option(), calibrate_option(), lp_tree_option(),
                  option_field("--draft-max", "draft_max", "N",
                               "draft tokens per step (γ; the maximum when adaptive; never more "
                               "than the tokens still to generate)",
                               &StrategyConfig::draft_max),
                  tree_depth_option(), tree_width_option()},
      .variant_key = "draft_max",
      .drafts_on_ranks = true,
      .simulation_refusal =
          "strategy 'easyspec' drafts a layer group's attention blocks on "
          "threads of its own, which a simulated clock does not follow",
      .make = [](const StrategyConfig& c) -> std::unique_ptr<Strategy> {
        if (option_value<bool>(c, lp_tree_option())) return std::make_unique<EasySpecTree>(c);
        return std::make_unique<EasySpecChain>(c);
      }};
}

}  // namespace parspec
