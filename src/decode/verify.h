#pragma once
// Verification rules shared by the strategies. Every exact rule emits tokens
// distributed exactly as the target model would sample them (greedy: exactly
// its argmax sequence). Distributions are dense probability vectors after the
// request's sampling filters (sample/sampler.h `probabilities`).
#include <cstdint>
#include <functional>
#include <span>
#include <vector>

#include "sample/rng.h"

namespace parspec {

using Distribution = std::vector<float>;

struct ChainVerdict {
  int n_accepted = 0;      // draft tokens accepted, a prefix of the chain
  int32_t next_token = 0;  // the target's correction, or the bonus after full acceptance
};

// Greedy: accept while draft[i] == argmax(target row i); next = argmax of the
// first disagreeing row (row k after full acceptance). target_logits holds
// draft.size() + 1 rows of n_vocab.
ChainVerdict verify_chain_greedy(std::span<const int32_t> draft, const float* target_logits,
                                 int n_vocab);

// One token of speculative sampling: accept x (drawn from q) with probability
// min(1, p(x)/q(x)); otherwise draw *next from norm(max(0, p - q)), or from p
// itself when that is empty (p == q up to rounding). Returns whether x is accepted.
bool verify_token_sampled(int32_t x, std::span<const float> q, std::span<const float> p, Rng& rng,
                          int32_t* next);

// Speculative sampling (Leviathan et al.; Chen et al.): accept draft[i] with
// probability min(1, p_i(x)/q_i(x)); at the first rejection sample from
// norm(max(0, p_i - q_i)); after full acceptance sample the bonus from p_k.
// q has draft.size() rows (the distributions the drafts were sampled from),
// p has draft.size() + 1.
ChainVerdict verify_chain_sampled(std::span<const int32_t> draft, std::span<const Distribution> q,
                                  std::span<const Distribution> p, Rng& rng);

// A draft tree seen by the verifier: node i has token tokens[i] and parent
// parents[i] (-1: the root, i.e. the last committed token). Children of a node
// are the nodes naming it as parent, in index order.
struct TreeView {
  std::span<const int32_t> tokens;
  std::span<const int32_t> parents;
};

struct TreeVerdict {
  std::vector<int32_t> path;  // accepted nodes, root's child first
  int32_t next_token = 0;     // sampled at the end of the path (correction or bonus)
  // Node whose token equals next_token among the children of the path's end,
  // when that child exists but could not be checked (no target distribution):
  // the caller may keep its subtree. -1 otherwise.
  int32_t matched_unverified = -1;
};

// For the tree walks below, `target_row(node)` gives the target's logits or
// probabilities after node (node -1: after the root), or an empty span when
// the target has not processed that node; the walk stops there.
using RowFn = std::function<std::span<const float>(int32_t node)>;

// Greedy: descend to the child whose token is the argmax; stop when none is.
TreeVerdict verify_tree_greedy(const TreeView& tree, const RowFn& target_logits);

// Token matching (PipeDec's rule): sample x from the target distribution at
// the current node; descend to the child with token x if there is one,
// otherwise stop with x. Exact for any tree shape.
TreeVerdict verify_tree_token_matching(const TreeView& tree, const RowFn& target_probs, Rng& rng);

// Multi-candidate speculative sampling over siblings (SpecInfer's scheme in
// its recursive form): the children of a node must have been sampled WITHOUT
// replacement from the draft distribution `draft_probs(node)`. Each child is
// accepted with probability min(1, p(x)/q(x)); on rejection p becomes
// norm(max(0, p - q)) and x is removed from q; if every child is rejected the
// token is sampled from the final p.
TreeVerdict verify_tree_multi_candidate(const TreeView& tree, const RowFn& target_probs,
                                        const RowFn& draft_probs, Rng& rng);

// LOSSY, opt-in (--lossy-typical): typical acceptance as in Medusa/PPD: a
// child x is accepted when p(x) > min(epsilon, delta * exp(-H(p))); the first
// accepted child (in index order) is descended into; otherwise x ~ p.
TreeVerdict verify_tree_typical(const TreeView& tree, const RowFn& target_probs, Rng& rng,
                                float epsilon = 0.09f, float delta = 0.3f);

}  // namespace parspec
