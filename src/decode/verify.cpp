#include "decode/verify.h"

#include <algorithm>
#include <cmath>

#include "core/error.h"
#include "sample/sampler.h"

namespace parspec {

namespace {

// Children of every node (index n_nodes stands for the root), in index order.
std::vector<std::vector<int32_t>> children_of(const TreeView& tree) {
  const int32_t n = static_cast<int32_t>(tree.tokens.size());
  check(tree.parents.size() == tree.tokens.size(), "tree: tokens and parents differ in length");
  std::vector<std::vector<int32_t>> children(n + 1);
  for (int32_t i = 0; i < n; ++i) {
    const int32_t parent = tree.parents[i];
    check(parent >= -1 && parent < i, "tree: node ", i, " has invalid parent ", parent);
    children[parent < 0 ? n : parent].push_back(i);
  }
  return children;
}

// Residual max(0, p - q) into p; returns its mass.
double residual_inplace(std::vector<float>& p, std::span<const float> q) {
  double mass = 0.0;
  for (size_t i = 0; i < p.size(); ++i) {
    p[i] = std::max(0.0f, p[i] - q[i]);
    mass += p[i];
  }
  return mass;
}

void normalize(std::vector<float>& v) {
  double sum = 0.0;
  for (float x : v) sum += x;
  if (sum <= 0) return;
  const float inv = static_cast<float>(1.0 / sum);
  for (float& x : v) x *= inv;
}

// The generic walk: `choose` looks at the node reached so far and either
// names the accepted child (>= 0) or returns -1 after setting next_token.
template <class Choose>
TreeVerdict walk(const TreeView& tree, const RowFn& target_row, Choose&& choose) {
  const auto children = children_of(tree);
  const int32_t root = static_cast<int32_t>(tree.tokens.size());
  TreeVerdict verdict;
  int32_t node = -1;
  for (;;) {
    const std::span<const float> row = target_row(node);
    check(!row.empty(), "tree verification: no target distribution for node ", node);
    const auto& kids = children[node < 0 ? root : node];
    const int32_t child = choose(node, row, kids, verdict.next_token);
    if (child < 0) break;
    verdict.path.push_back(child);
    node = child;
    if (target_row(node).empty()) {
      // The child was accepted but the target has not processed it: stop here;
      // the caller continues from this node next step.
      verdict.path.pop_back();
      verdict.next_token = tree.tokens[child];
      verdict.matched_unverified = child;
      break;
    }
  }
  return verdict;
}

int32_t child_with_token(const TreeView& tree, const std::vector<int32_t>& kids, int32_t token) {
  for (int32_t c : kids)
    if (tree.tokens[c] == token) return c;
  return -1;
}

}  // namespace

ChainVerdict verify_chain_greedy(std::span<const int32_t> draft, const float* target_logits,
                                 int n_vocab) {
  ChainVerdict v;
  for (size_t i = 0;; ++i) {
    const int32_t best = argmax(target_logits + i * n_vocab, n_vocab);
    if (i == draft.size() || draft[i] != best) {
      v.next_token = best;
      return v;
    }
    ++v.n_accepted;
  }
}

bool verify_token_sampled(int32_t x, std::span<const float> q, std::span<const float> p, Rng& rng,
                          int32_t* next) {
  const double px = p[x], qx = q[x];
  // qx > 0 always holds for a token sampled from q; guard anyway.
  const double accept = qx > 0 ? std::min(1.0, px / qx) : 0.0;
  if (rng.uniform() < accept) return true;
  std::vector<float> residual(p.begin(), p.end());
  if (residual_inplace(residual, q) > 0) {
    *next = sample_from(std::span<const float>(residual), rng);
  } else {
    // p == q up to rounding: the residual is empty, p itself is exact.
    *next = sample_from(p, rng);
  }
  return false;
}

ChainVerdict verify_chain_sampled(std::span<const int32_t> draft, std::span<const Distribution> q,
                                  std::span<const Distribution> p, Rng& rng) {
  check(q.size() == draft.size() && p.size() == draft.size() + 1,
        "verify_chain_sampled: needs one draft and one more target distribution per draft token");
  ChainVerdict v;
  for (size_t i = 0; i < draft.size(); ++i) {
    if (!verify_token_sampled(draft[i], q[i], p[i], rng, &v.next_token)) return v;
    ++v.n_accepted;
  }
  v.next_token = sample_from(p[draft.size()], rng);
  return v;
}

TreeVerdict verify_tree_greedy(const TreeView& tree, const RowFn& target_logits) {
  return walk(
      tree, target_logits,
      [&](int32_t, std::span<const float> row, const std::vector<int32_t>& kids, int32_t& next) {
        const int32_t best = argmax(row.data(), static_cast<int>(row.size()));
        const int32_t child = child_with_token(tree, kids, best);
        if (child < 0) next = best;
        return child;
      });
}

TreeVerdict verify_tree_token_matching(const TreeView& tree, const RowFn& target_probs, Rng& rng) {
  return walk(
      tree, target_probs,
      [&](int32_t, std::span<const float> row, const std::vector<int32_t>& kids, int32_t& next) {
        const int32_t x = sample_from(row, rng);
        const int32_t child = child_with_token(tree, kids, x);
        if (child < 0) next = x;
        return child;
      });
}

TreeVerdict verify_tree_multi_candidate(const TreeView& tree, const RowFn& target_probs,
                                        const RowFn& draft_probs, Rng& rng) {
  return walk(tree, target_probs,
              [&](int32_t node, std::span<const float> row, const std::vector<int32_t>& kids,
                  int32_t& next) {
                std::vector<float> p(row.begin(), row.end());
                std::vector<float> q;
                if (!kids.empty()) {
                  const std::span<const float> q_row = draft_probs(node);
                  check(q_row.size() == p.size(), "tree verification: missing draft distribution");
                  q.assign(q_row.begin(), q_row.end());
                }
                for (int32_t c : kids) {
                  const int32_t x = tree.tokens[c];
                  const double accept = q[x] > 0 ? std::min(1.0, double(p[x]) / q[x]) : 0.0;
                  if (rng.uniform() < accept) return c;
                  if (residual_inplace(p, q) <= 0) {
                    // p was covered by q: what is left is p's own shape.
                    p.assign(row.begin(), row.end());
                  }
                  normalize(p);
                  q[x] = 0.0f;
                  normalize(q);
                }
                next = sample_from(std::span<const float>(p), rng);
                return -1;
              });
}

TreeVerdict verify_tree_typical(const TreeView& tree, const RowFn& target_probs, Rng& rng,
                                float epsilon, float delta) {
  return walk(
      tree, target_probs,
      [&](int32_t, std::span<const float> row, const std::vector<int32_t>& kids, int32_t& next) {
        double entropy = 0.0;
        for (float v : row)
          if (v > 0) entropy -= v * std::log(static_cast<double>(v));
        const double threshold = std::min<double>(epsilon, delta * std::exp(-entropy));
        for (int32_t c : kids)
          if (row[tree.tokens[c]] > threshold) return c;
        next = sample_from(row, rng);
        return -1;
      });
}

}  // namespace parspec
