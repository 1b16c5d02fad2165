#include "decode/tree_speculation.h"

#include <algorithm>
#include <cmath>

#include "core/error.h"
#include "core/timer.h"
#include "sample/sampler.h"

namespace parspec {

StrategyOption tree_depth_option() {
  return option_field("--tree-depth", "tree_depth", "D",
                      "levels below the root (0: tree and dyntree choose the shape step by step "
                      "from this machine's forward times and the acceptance so far, except under "
                      "serve and simulate; otherwise 4)",
                      &StrategyConfig::tree_depth);
}

StrategyOption tree_branch_option() {
  return option_field("--tree-branch", "tree_branch", "C",
                      "children per node (0: chosen with the depth; otherwise 2)",
                      &StrategyConfig::tree_branch);
}

StrategyOption tree_width_option() {
  return option_field("--tree-width", "tree_width", "W",
                      "nodes kept per level (0: chosen with the depth; otherwise 8)",
                      &StrategyConfig::tree_width);
}

void apply_fixed_tree_defaults(StrategyConfig& config) {
  if (config.tree_depth == 0) config.tree_depth = 4;
  if (config.tree_branch == 0) config.tree_branch = 2;
  if (config.tree_width == 0) config.tree_width = 8;
}

StrategyOption lossy_typical_option() {
  return option_flag(
      "--lossy-typical", "lossy_typical",
      "LOSSY: accept tree tokens by typical acceptance (Medusa/PPD) instead of exact verification",
      &StrategyConfig::lossy_typical);
}

int32_t TreeSpeculation::Tree::add(int32_t token, int32_t parent, double log_prob) {
  tokens.push_back(token);
  parents.push_back(parent);
  depths.push_back(parent < 0 ? 0 : depths[parent] + 1);
  log_probs.push_back(log_prob);
  draft_cells.push_back(kUnprocessed);
  target_cells.push_back(kUnprocessed);
  draft_dist.emplace_back();
  target_rows.emplace_back();
  return static_cast<int32_t>(tokens.size() - 1);
}

bool sizes_tree_as_it_runs(const StrategyConfig& config) {
  return config.tree_depth == 0 && config.time_sides_at_start;
}

TreeSpeculation::TreeSpeculation(const StrategyConfig& config, bool sizes_itself)
    : SpeculativeStrategy(config) {
  if (!sizes_itself) apply_fixed_tree_defaults(config_);
}

void TreeSpeculation::check_dynamic_tree_flags() const {
  check(config_.tree_depth >= 1 && config_.tree_depth <= 64, "--tree-depth must be 1..64");
  check(config_.tree_branch >= 1 && config_.tree_branch <= 64, "--tree-branch must be 1..64");
  check(config_.tree_width >= 1 && config_.tree_width <= 1024, "--tree-width must be 1..1024");
}

void TreeSpeculation::reset() {
  tree_ = Tree();
  draft_prefix_cells_.clear();
}

Distribution TreeSpeculation::draft_distribution(const float* logits) const {
  return greedy() ? softmax(logits, n_vocab()) : distribution(logits);
}

void TreeSpeculation::draft_root() {
  if (tree_.size() == 0) tree_.add(cur(), -1, 0.0);
  if (tree_.draft_cells[0] != kUnprocessed) return;
  int32_t n_tail = 0;
  const std::vector<float> logits = drafter_->catch_up(seq_, &n_tail);
  draft_prefix_cells_.clear();
  for (int32_t c = 0; c + 1 < n_tail; ++c) draft_prefix_cells_.push_back(c);
  tree_.draft_cells[0] = n_tail - 1;
  tree_.draft_dist[0] = draft_distribution(logits.data());
}

void TreeSpeculation::draft_process(const std::vector<int32_t>& nodes) {
  if (nodes.empty()) return;
  const int32_t root_pos = static_cast<int32_t>(seq_.size()) - 1;
  Batch batch;
  for (int32_t node : nodes) {
    const int32_t parent_cell = tree_.draft_cells[tree_.parents[node]];
    check(parent_cell != kUnprocessed, "draft tree: parent of node ", node, " not processed");
    batch.add(tree_.tokens[node], root_pos + tree_.depths[node],
              parent_cell == kCommitted ? -1 : parent_cell, true);
  }
  const int32_t first = drafter_->n_spec();
  const std::vector<float> logits = drafter_->propose(batch);
  for (size_t i = 0; i < nodes.size(); ++i) {
    tree_.draft_cells[nodes[i]] = first + static_cast<int32_t>(i);
    tree_.draft_dist[nodes[i]] = draft_distribution(&logits[i * n_vocab()]);
  }
}

void TreeSpeculation::target_process(int max_depth) {
  const int32_t root_pos = static_cast<int32_t>(seq_.size()) - 1;
  Batch batch;
  std::vector<int32_t> nodes;
  const int32_t first = target_->n_spec();
  for (int32_t node = 0; node < tree_.size(); ++node) {
    if (tree_.target_cells[node] != kUnprocessed || tree_.depths[node] > max_depth) continue;
    const int32_t parent = tree_.parents[node];
    int32_t parent_cell = -1;
    if (parent >= 0) {
      parent_cell = tree_.target_cells[parent];
      if (parent_cell == kUnprocessed) continue;  // its parent is beyond max_depth
    }
    batch.add(tree_.tokens[node], root_pos + tree_.depths[node], parent_cell, true);
    tree_.target_cells[node] = first + static_cast<int32_t>(nodes.size());
    nodes.push_back(node);
  }
  if (nodes.empty()) return;
  const std::vector<float> logits = target_->forward(batch);
  for (size_t i = 0; i < nodes.size(); ++i) {
    const float* row = &logits[i * n_vocab()];
    tree_.target_rows[nodes[i]] = greedy() ? Distribution(row, row + n_vocab()) : distribution(row);
  }
}

bool TreeSpeculation::grow_level(const std::vector<int32_t>& frontier, int width) {
  struct Candidate {
    double log_prob;
    int32_t parent;
    int32_t token;
  };
  std::vector<Candidate> candidates;
  const int c = config_.tree_branch;
  for (int32_t parent : frontier) {
    const Distribution& dist = tree_.draft_dist[parent];
    for (int32_t id : top_c(dist, c)) {
      if (dist[id] <= 0.0f) break;
      candidates.push_back(
          {tree_.log_probs[parent] + std::log(static_cast<double>(dist[id])), parent, id});
    }
  }
  const size_t keep =
      std::min<size_t>({candidates.size(), static_cast<size_t>(width), frontier.size() * c});
  if (keep == 0) return false;
  std::stable_sort(candidates.begin(), candidates.end(),
                   [](const Candidate& a, const Candidate& b) { return a.log_prob > b.log_prob; });
  candidates.resize(keep);
  // Keep BFS order within the level: by parent, then by rank.
  std::stable_sort(candidates.begin(), candidates.end(),
                   [](const Candidate& a, const Candidate& b) { return a.parent < b.parent; });
  for (const Candidate& cand : candidates) tree_.add(cand.token, cand.parent, cand.log_prob);
  return true;
}

TreeVerdict TreeSpeculation::verify(bool multi_candidate) {
  // The verifier's view leaves the root out: node i+1 of the tree is node i there.
  std::vector<int32_t> tokens(tree_.tokens.begin() + 1, tree_.tokens.end());
  std::vector<int32_t> parents;
  for (int32_t i = 1; i < tree_.size(); ++i) parents.push_back(tree_.parents[i] - 1);
  const TreeView view{tokens, parents};
  auto rows = [&](const std::vector<Distribution>& v) {
    return [&v](int32_t node) { return std::span<const float>(v[node + 1]); };
  };
  TreeVerdict verdict;
  ScopedTimer timer(stats_->t_verify_ms);
  if (greedy())
    verdict = verify_tree_greedy(view, rows(tree_.target_rows));
  else if (config_.lossy_typical)
    verdict = verify_tree_typical(view, rows(tree_.target_rows), rng_);
  else if (multi_candidate)
    verdict =
        verify_tree_multi_candidate(view, rows(tree_.target_rows), rows(tree_.draft_dist), rng_);
  else
    verdict = verify_tree_token_matching(view, rows(tree_.target_rows), rng_);
  // Back to tree indices.
  for (int32_t& node : verdict.path) ++node;
  if (verdict.matched_unverified >= 0) ++verdict.matched_unverified;
  return verdict;
}

TreeVerdict TreeSpeculation::verify_root_only() {
  if (tree_.size() == 0) tree_.add(cur(), -1, 0.0);
  target_process(0);
  return verify(/*multi_candidate=*/false);
}

std::vector<int> TreeSpeculation::path_ranks(const TreeVerdict& verdict, int cap) const {
  std::vector<int> ranks;
  int32_t parent = 0;
  for (size_t i = 0; i <= verdict.path.size(); ++i) {
    const Distribution& dist = tree_.draft_dist[parent];
    if (dist.empty()) break;
    const int32_t token =
        i < verdict.path.size() ? tree_.tokens[verdict.path[i]] : verdict.next_token;
    const float p = dist[token];
    int rank = 0;
    for (size_t id = 0; id < dist.size() && rank < cap; ++id)
      rank += dist[id] > p || (dist[id] == p && static_cast<int32_t>(id) < token);
    ranks.push_back(rank);
    if (i < verdict.path.size()) parent = verdict.path[i];
  }
  return ranks;
}

void TreeSpeculation::observe(const TreeVerdict& verdict) {
  // Every node the target checked was a proposal; its depth is its draft position.
  int64_t proposed = 0;
  for (int32_t node = 1; node < tree_.size(); ++node) proposed += tree_.target_cells[node] >= 0;
  const int accepted = static_cast<int>(verdict.path.size());
  const int32_t end = verdict.path.empty() ? 0 : verdict.path.back();
  bool end_had_checked_children = false;
  for (int32_t node = end + 1; node < tree_.size(); ++node)
    end_had_checked_children |= tree_.parents[node] == end && tree_.target_cells[node] >= 0;
  stats_->observe_step(proposed, accepted, accepted + (end_had_checked_children ? 1 : 0));
}

void TreeSpeculation::finish_step(const TreeVerdict& verdict, std::vector<int32_t>& emitted) {
  observe(verdict);

  for (int32_t node : verdict.path) emitted.push_back(tree_.tokens[node]);
  emitted.push_back(verdict.next_token);

  // Target: the root and the accepted path become committed.
  std::vector<int32_t> target_path = {tree_.target_cells[0]};
  for (int32_t node : verdict.path) target_path.push_back(tree_.target_cells[node]);
  check(target_path[0] >= 0, "tree step: the target did not process the root");
  target_->commit(target_path, {});

  // The subtree that survives: below the matched-but-unchecked child, if any.
  const int32_t new_root = verdict.matched_unverified;
  std::vector<int32_t> survivors;  // tree indices, BFS order, new_root first
  if (new_root >= 0) {
    std::vector<uint8_t> inside(tree_.size(), 0);
    inside[new_root] = 1;
    for (int32_t node = new_root; node < tree_.size(); ++node) {
      if (node != new_root && !(tree_.parents[node] >= 0 && inside[tree_.parents[node]])) continue;
      inside[node] = 1;
      survivors.push_back(node);
    }
  }

  // Draft: commit the caught-up prefix, the root and the accepted nodes it
  // has processed (and the new root if processed); keep the survivors' cells.
  std::vector<int32_t> draft_path = draft_prefix_cells_;
  if (tree_.draft_cells[0] >= 0) draft_path.push_back(tree_.draft_cells[0]);
  bool draft_continues = true;
  std::vector<int32_t> accepted = verdict.path;
  if (new_root >= 0) accepted.push_back(new_root);
  for (int32_t node : accepted) {
    draft_continues = draft_continues && tree_.draft_cells[node] >= 0;
    if (draft_continues) draft_path.push_back(tree_.draft_cells[node]);
  }
  std::vector<int32_t> draft_keep;
  std::vector<int32_t> kept_nodes;
  const bool new_root_in_draft = new_root >= 0 && draft_continues;
  if (new_root_in_draft) {
    for (int32_t node : survivors)
      if (node != new_root && tree_.draft_cells[node] >= 0) {
        draft_keep.push_back(tree_.draft_cells[node]);
        kept_nodes.push_back(node);
      }
  }
  const std::vector<int32_t> new_ids = drafter_->accept(draft_path, draft_keep);
  draft_prefix_cells_.clear();

  // Rebuild the tree from the survivors (or start a new one at next_token).
  Tree next;
  if (new_root >= 0) {
    std::vector<int32_t> index_of(tree_.size(), -1);
    for (int32_t node : survivors) {
      const int32_t parent = node == new_root ? -1 : index_of[tree_.parents[node]];
      const int32_t i =
          next.add(tree_.tokens[node], parent, tree_.log_probs[node] - tree_.log_probs[new_root]);
      index_of[node] = i;
      next.draft_dist[i] = std::move(tree_.draft_dist[node]);
    }
    if (new_root_in_draft) next.draft_cells[0] = kCommitted;
    for (size_t k = 0; k < kept_nodes.size(); ++k)
      next.draft_cells[index_of[kept_nodes[k]]] = new_ids[k];
    // Nodes the draft never processed carry no distribution.
    for (int32_t i = 0; i < next.size(); ++i)
      if (next.draft_cells[i] == kUnprocessed) next.draft_dist[i].clear();
  }
  tree_ = std::move(next);
}

}  // namespace parspec
