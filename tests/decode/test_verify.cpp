// The verification rules on synthetic distributions: the tokens they emit
// must follow the target distribution exactly, whatever the draft is, and a
// deliberately wrong rule must be caught by the same test.
#include <gtest/gtest.h>

#include <map>

#include "decode/verify.h"
#include "sample/sampler.h"
#include "stats_helpers.h"

namespace parspec {
namespace {

using testing_support::chi_square_fit;

Distribution normalized(std::vector<float> v) {
  double s = 0;
  for (float x : v) s += x;
  for (float& x : v) x = static_cast<float>(x / s);
  return v;
}

const Distribution kTarget = normalized({0.30f, 0.05f, 0.20f, 0.15f, 0.10f, 0.20f});
const Distribution kTargetNext = normalized({0.10f, 0.40f, 0.10f, 0.10f, 0.20f, 0.10f});
const Distribution kDraft = normalized({0.10f, 0.30f, 0.25f, 0.05f, 0.25f, 0.05f});

std::vector<double> as_double(const Distribution& d) {
  return {d.begin(), d.end()};
}

TEST(VerifyChain, GreedyAcceptsTheAgreeingPrefixAndAddsTheTargetToken) {
  // 3 rows of 4 logits: argmax 2, 1, 3.
  const float logits[] = {0, 1, 5, 2, 0, 9, 1, 1, 0, 0, 0, 4};
  const int32_t agree_then_differ[] = {2, 0};
  ChainVerdict v = verify_chain_greedy(agree_then_differ, logits, 4);
  EXPECT_EQ(v.n_accepted, 1);
  EXPECT_EQ(v.next_token, 1);
  const int32_t all_agree[] = {2, 1};
  v = verify_chain_greedy(all_agree, logits, 4);
  EXPECT_EQ(v.n_accepted, 2);
  EXPECT_EQ(v.next_token, 3);  // bonus
}

// First emitted token of a one-token chain drafted from q, verified against p.
template <class Verify>
std::map<int32_t, int64_t> first_token_histogram(Verify verify, int n) {
  Rng rng(12345);
  std::map<int32_t, int64_t> hist;
  const std::vector<Distribution> q = {kDraft};
  const std::vector<Distribution> p = {kTarget, kTargetNext};
  for (int i = 0; i < n; ++i) {
    const int32_t x = sample_from(kDraft, rng);
    const int32_t draft[] = {x};
    const ChainVerdict v =
        verify(std::span<const int32_t>(draft, 1), std::span<const Distribution>(q),
               std::span<const Distribution>(p), rng);
    ++hist[v.n_accepted > 0 ? draft[0] : v.next_token];
  }
  return hist;
}

TEST(VerifyChain, RejectionSamplingFollowsTheTargetAndABrokenRuleIsCaught) {
  constexpr int n = 40000;
  const auto exact = first_token_histogram(
      [](auto d, auto q, auto p, Rng& rng) { return verify_chain_sampled(d, q, p, rng); }, n);
  EXPECT_FALSE(chi_square_fit(exact, as_double(kTarget), n).rejects());
  // Broken: on rejection, sample from p instead of the residual max(0, p - q).
  const auto broken = first_token_histogram(
      [](auto d, auto q, auto p, Rng& rng) {
        ChainVerdict v;
        const double a = std::min(1.0, double(p[0][d[0]]) / q[0][d[0]]);
        if (rng.uniform() < a) {
          v.n_accepted = 1;
          v.next_token = sample_from(p[1], rng);
        } else {
          v.next_token = sample_from(p[0], rng);
        }
        return v;
      },
      n);
  EXPECT_TRUE(chi_square_fit(broken, as_double(kTarget), n).rejects());
}

TEST(VerifyChain, SecondTokenAfterFullAcceptanceFollowsTheTarget) {
  constexpr int n = 40000;
  Rng rng(99);
  std::map<int32_t, int64_t> second;
  const Distribution q2 = normalized({0.5f, 0.1f, 0.1f, 0.1f, 0.1f, 0.1f});
  int64_t count = 0;
  for (int i = 0; i < n; ++i) {
    const int32_t draft[] = {sample_from(kDraft, rng), sample_from(q2, rng)};
    const std::vector<Distribution> q = {kDraft, q2};
    const std::vector<Distribution> p = {kTarget, kTargetNext, kTarget};
    const ChainVerdict v = verify_chain_sampled(draft, q, p, rng);
    // The second emitted token, conditioned on the first being token 0.
    const int32_t first = v.n_accepted >= 1 ? draft[0] : v.next_token;
    if (first != 0 || v.n_accepted == 0) continue;
    ++second[v.n_accepted >= 2 ? draft[1] : v.next_token];
    ++count;
  }
  ASSERT_GT(count, 2000);
  EXPECT_FALSE(chi_square_fit(second, as_double(kTargetNext), count).rejects());
}

// A root with children drawn from q; returns the first emitted token.
template <class Walk>
std::map<int32_t, int64_t> tree_histogram(Walk walk, int n_children, bool without_replacement,
                                          int n) {
  Rng rng(777);
  std::map<int32_t, int64_t> hist;
  for (int i = 0; i < n; ++i) {
    std::vector<int32_t> tokens, parents;
    Distribution remaining = kDraft;
    for (int c = 0; c < n_children; ++c) {
      const int32_t x = sample_from(without_replacement ? remaining : kDraft, rng);
      if (without_replacement) remaining[x] = 0;
      tokens.push_back(x);
      parents.push_back(-1);
    }
    const TreeView view{tokens, parents};
    auto target = [&](int32_t node) {
      return std::span<const float>(node < 0 ? kTarget : kTargetNext);
    };
    auto draft = [&](int32_t) { return std::span<const float>(kDraft); };
    const TreeVerdict v = walk(view, target, draft, rng);
    ++hist[v.path.empty() ? v.next_token : tokens[v.path[0]]];
  }
  return hist;
}

TEST(VerifyTree, MultiCandidateFollowsTheTargetAndReplacementSamplingBreaksIt) {
  constexpr int n = 40000;
  auto mc = [](const TreeView& t, const RowFn& p, const RowFn& q, Rng& rng) {
    return verify_tree_multi_candidate(t, p, q, rng);
  };
  const auto exact = tree_histogram(mc, 3, /*without_replacement=*/true, n);
  EXPECT_FALSE(chi_square_fit(exact, as_double(kTarget), n).rejects());
  // The rule assumes siblings drawn without replacement; feeding it siblings
  // drawn with replacement must be detected.
  const auto wrong = tree_histogram(mc, 3, /*without_replacement=*/false, n);
  EXPECT_TRUE(chi_square_fit(wrong, as_double(kTarget), n).rejects());
}

TEST(VerifyTree, TokenMatchingFollowsTheTarget) {
  constexpr int n = 40000;
  auto tm = [](const TreeView& t, const RowFn& p, const RowFn&, Rng& rng) {
    return verify_tree_token_matching(t, p, rng);
  };
  const auto hist = tree_histogram(tm, 2, true, n);
  EXPECT_FALSE(chi_square_fit(hist, as_double(kTarget), n).rejects());
}

TEST(VerifyTree, TypicalAcceptanceIsLossyAndTheTestSeesIt) {
  constexpr int n = 40000;
  auto typical = [](const TreeView& t, const RowFn& p, const RowFn&, Rng& rng) {
    return verify_tree_typical(t, p, rng);
  };
  const auto hist = tree_histogram(typical, 3, true, n);
  EXPECT_TRUE(chi_square_fit(hist, as_double(kTarget), n).rejects());
}

TEST(VerifyTree, GreedyWalkDescendsAlongArgmaxAndReportsUnverifiedMatches) {
  // root -> a(5) -> b(7); root -> c(6). Argmax after root is 5, after a is 7,
  // b has no target row yet.
  const std::vector<int32_t> tokens = {5, 6, 7}, parents = {-1, -1, 0};
  std::vector<float> root(8, 0), after_a(8, 0);
  root[5] = 1;
  after_a[7] = 1;
  auto rows = [&](int32_t node) -> std::span<const float> {
    if (node == -1) return root;
    if (node == 0) return after_a;
    return {};
  };
  const TreeVerdict v = verify_tree_greedy(TreeView{tokens, parents}, rows);
  EXPECT_EQ(v.path, (std::vector<int32_t>{0}));
  EXPECT_EQ(v.next_token, 7);
  EXPECT_EQ(v.matched_unverified, 2);
}

}  // namespace
}  // namespace parspec
