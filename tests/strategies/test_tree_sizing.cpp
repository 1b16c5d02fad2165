// Tree shapes chosen from measured costs (strategies/tree_sizing.h), and
// `tree`/`dyntree` choosing them as they run.
#include <gtest/gtest.h>

#include <set>

#include "core/error.h"
#include "decode/strategy.h"
#include "random_pair_test.h"
#include "strategies/tree_sizing.h"
#include "test_helpers.h"
#include "tuning/cost_family.h"
#include "tuning/cost_model.h"

namespace parspec {
namespace {

// T(n) = t1 + slope·(n − 1) for n = 1..17, D(n) = d1 for every n.
TreeCosts costs_of(double t1, double slope, double d1) {
  TreeCosts c;
  for (int n : {1, 17}) c.target.points.emplace_back(n, t1 + slope * (n - 1));
  for (int n : {1, 16}) c.draft.points.emplace_back(n, d1);
  return c;
}

int nodes_of(const TreeShape& s) {
  return tree_nodes(tree_level_sizes({"tree", 0, s.depth, s.branch, s.width}));
}

TEST(TreeSizing, CandidatesStayWithinTheNodeBudgetAndThePinnedFlags) {
  const std::vector<TreeShape> full = tree_shape_candidates(false, 0, 0);
  std::set<int> branches;
  for (const TreeShape& s : full) {
    EXPECT_GE(s.depth, 1);
    EXPECT_LE(s.depth, kMaxTreeDepth);
    EXPECT_EQ(s.width, 0);
    EXPECT_LE(nodes_of(s), kMaxTreeNodes) << s.label();
    branches.insert(s.branch);
  }
  EXPECT_EQ(branches, (std::set<int>{1, 2, 3, 4}));
  // Chains up to the deepest tree, the widest level of 4 below the root.
  EXPECT_NE(std::find(full.begin(), full.end(), TreeShape{8, 1, 0}), full.end());
  EXPECT_NE(std::find(full.begin(), full.end(), TreeShape{1, 4, 0}), full.end());
  EXPECT_EQ(std::find(full.begin(), full.end(), TreeShape{3, 3, 0}), full.end());  // 39 nodes

  for (const TreeShape& s : tree_shape_candidates(false, 2, 0)) EXPECT_EQ(s.branch, 2);
  const std::vector<TreeShape> grown = tree_shape_candidates(true, 0, 3);
  ASSERT_FALSE(grown.empty());
  for (const TreeShape& s : grown) {
    EXPECT_EQ(s.width, 3);
    EXPECT_GE(s.branch, 2);
    EXPECT_LE(nodes_of(s), kMaxTreeNodes) << s.label();
  }
  const std::vector<TreeShape> dynamic = tree_shape_candidates(true, 0, 0);
  EXPECT_NE(std::find(dynamic.begin(), dynamic.end(), TreeShape{4, 2, 3}), dynamic.end());
  EXPECT_NE(std::find(dynamic.begin(), dynamic.end(), TreeShape{5, 1, 1}), dynamic.end());
}

TEST(TreeSizing, RankSharesStartAtThePriorAndFollowTheObservations) {
  RankAcceptance a;
  double total = 0;
  for (int r = 0; r <= RankAcceptance::kRanks; ++r) total += a.share(1, r);
  EXPECT_NEAR(total, 1.0, 1e-12);
  const double prior = a.share(2, 0);
  EXPECT_GT(prior, 0.3);
  for (int i = 0; i < 50; ++i) a.observe(2, 1);
  EXPECT_GT(a.share(2, 1), 0.8);
  EXPECT_LT(a.share(2, 0), prior / 4);
  EXPECT_DOUBLE_EQ(a.share(1, 0), prior);  // other depths keep theirs
  a.observe(2, 99);                        // past the ranks a tree drafts
  EXPECT_GT(a.share(2, RankAcceptance::kRanks), a.share(1, RankAcceptance::kRanks) / 9);
  a.reset();
  EXPECT_DOUBLE_EQ(a.share(2, 0), prior);
  EXPECT_THROW(a.share(kMaxTreeDepth + 1, 0), Error);
}

TEST(TreeSizing, FlatVerificationTakesATreeAndLinearVerificationPlainSteps) {
  RankAcceptance prior;
  // A GPU-like target: 17 rows cost about one; a cheap drafter.
  const ShapeForecast flat =
      fastest_tree_shape(costs_of(10, 0.01, 0.5), prior, tree_shape_candidates(false, 0, 0));
  EXPECT_GT(flat.shape.depth, 1);
  EXPECT_GT(flat.shape.branch, 1);  // the rank-1 children pay for their free rows
  EXPECT_GT(flat.tokens_per_step, 2);
  // A compute-bound target (every row costs a token's forward): nothing pays.
  const ShapeForecast linear =
      fastest_tree_shape(costs_of(10, 10, 0.5), prior, tree_shape_candidates(false, 0, 0));
  EXPECT_EQ(linear.shape.depth, 0);
  EXPECT_DOUBLE_EQ(linear.tokens_per_step, 1);
  EXPECT_DOUBLE_EQ(linear.ms_per_step, 10);
  // In between, a chain: extra rows cost a little, the second rank rarely pays.
  RankAcceptance sure;
  for (int d = 1; d <= kMaxTreeDepth; ++d)
    for (int i = 0; i < 200; ++i) sure.observe(d, 0);
  const ShapeForecast chain =
      fastest_tree_shape(costs_of(10, 1, 0.5), sure, tree_shape_candidates(false, 0, 0));
  EXPECT_EQ(chain.shape.branch, 1);
  EXPECT_GT(chain.shape.depth, 2);
}

TEST(TreeSizing, TheNodeCostWeighsOnBushyTrees) {
  RankAcceptance prior;
  TreeCosts cheap = costs_of(10, 0.01, 0.5);
  TreeCosts dear = cheap;
  dear.node_ms = 2;
  const std::vector<TreeShape> candidates = tree_shape_candidates(false, 0, 0);
  const ShapeForecast a = fastest_tree_shape(cheap, prior, candidates);
  const ShapeForecast b = fastest_tree_shape(dear, prior, candidates);
  EXPECT_LT(nodes_of(b.shape), nodes_of(a.shape)) << a.shape.label() << " " << b.shape.label();
}

TEST(TreeSizing, ThePolicyFallsBackToPlainStepsAndProbesEverySixteenth) {
  TreeShapePolicy policy(costs_of(10, 0.2, 0.5), tree_shape_candidates(false, 0, 0));
  const TreeShape first = policy.next();
  EXPECT_GT(first.depth, 0) << first.label();
  // The target never takes the drafter's tokens: plain steps, with a tree
  // every 16th step to keep watching.
  for (int i = 0; i < 40; ++i) policy.observe({RankAcceptance::kRanks});
  std::vector<int> tree_steps;
  for (int step = 1; step <= 48; ++step)
    if (policy.next().depth > 0) tree_steps.push_back(step);
  EXPECT_EQ(tree_steps, (std::vector<int>{16, 32, 48}));
  // A new request starts from the prior again.
  policy.reset();
  EXPECT_EQ(policy.next(), first);
  const std::string note = policy.describe("tree");
  EXPECT_NE(note.find("the best shape, " + first.label() + ","), std::string::npos) << note;
  EXPECT_NE(note.find("so it starts with that shape"), std::string::npos) << note;
  // Where no tree pays, the line says it starts with plain steps.
  const TreeShapePolicy compute_bound(costs_of(10, 10, 0.5), tree_shape_candidates(false, 0, 0));
  EXPECT_NE(compute_bound.describe("tree").find("so it starts with plain steps"), std::string::npos)
      << compute_bound.describe("tree");
}

TEST(TreeSizing, TheNodeBudgetGrowsWhileARowCostsLessThanItsChance) {
  const std::vector<double> chances = {0.9, 0.8, 0.5, 0.3, 0.1, 0.05};
  // Flat to 4 rows, then each row a whole step: the first three nodes pay.
  ForwardCurve gpu;
  gpu.points = {{1, 10}, {4, 10}, {8, 50}};
  EXPECT_EQ(fastest_node_budget(chances, 1, gpu, 8), 3);
  // Each row half a step: only nodes likelier than about one half pay.
  ForwardCurve cpu;
  cpu.points = {{1, 10}, {8, 45}};
  EXPECT_EQ(fastest_node_budget(chances, 0, cpu, 8), 2);
  // Drafting already spent makes the rows cheaper beside the step.
  EXPECT_GT(fastest_node_budget(chances, 100, cpu, 8), 2);
  // Nothing likely: the root alone; never more rows than were timed.
  EXPECT_EQ(fastest_node_budget({0.01, 0.01}, 0, cpu, 8), 0);
  EXPECT_EQ(fastest_node_budget(chances, 0, gpu, 3), 2);
}

using testing_support::expect_seed_repeats;
using testing_support::short_prompt;
using TreeStrategiesSizedAsTheyRun = testing_support::RandomPairStrategyTest;

TEST_F(TreeStrategiesSizedAsTheyRun, GreedyEqualsArAndASeedRepeatsItself) {
  for (const std::string name : {"tree", "dyntree"}) {
    StrategyConfig c = base_;
    c.name = name;
    auto strategy = make_strategy(c);
    ASSERT_EQ(strategy->notes().size(), 1u) << name;
    EXPECT_NE(strategy->notes()[0].find("chosen step by step"), std::string::npos)
        << strategy->notes()[0];
    for (int i = 0; i < 3; ++i) {
      const GenerationRequest req = greedy_request(short_prompt(i), 24);
      const GenerationResult got = strategy->generate(req);
      EXPECT_EQ(got.tokens, ar_tokens(req)) << name << " prompt " << i;
      // Every step took one shape, plain or a tree, and says which.
      int64_t steps = 0;
      for (const auto& [shape, count] : got.stats.step_shapes) steps += count;
      EXPECT_EQ(steps, got.stats.verify_steps) << name;
    }
    expect_seed_repeats(*strategy, name);
  }
}

// After a long prompt the curves are timed again on its context, with cells
// after the prompt that must leave no trace: the output is still ar's, and a
// seeded request repeats itself (the curves are kept per prompt length).
TEST_F(TreeStrategiesSizedAsTheyRun, ALongPromptIsTimedOnItsOwnContext) {
  std::vector<int32_t> prompt = {256};
  for (int i = 0; i < 600; ++i) prompt.push_back((i * 37 + 11) % 256);
  for (const std::string name : {"tree", "dyntree"}) {
    StrategyConfig c = base_;
    c.name = name;
    c.ctx_size = 700;
    auto strategy = make_strategy(c);
    GenerationRequest req;
    req.prompt = prompt;
    req.n_predict = 24;
    req.sampling.temp = 0;
    const GenerationResult got = strategy->generate(req);
    EXPECT_EQ(got.tokens, ar_tokens(req, c)) << name;
    EXPECT_EQ(got.stats.n_gen, 24) << name;
    req.sampling.temp = 1.0f;
    req.sampling.seed = 7;
    const std::vector<int32_t> first = strategy->generate(req).tokens;
    EXPECT_EQ(strategy->generate(req).tokens, first) << name;
  }
}

TEST_F(TreeStrategiesSizedAsTheyRun, AGivenDepthOrNoTimingKeepsAFixedShape) {
  for (const std::string name : {"tree", "dyntree"}) {
    StrategyConfig c = base_;
    c.name = name;
    c.tree_depth = 2;
    EXPECT_TRUE(make_strategy(c)->notes().empty()) << name;
    c.tree_depth = 0;
    c.time_sides_at_start = false;  // as under serve and simulate: depth 4, 2 children
    auto fixed = make_strategy(c);
    EXPECT_TRUE(fixed->notes().empty()) << name;
    GenerationRequest req;
    req.prompt = short_prompt(2);
    req.n_predict = 12;
    req.sampling.temp = 0;
    const GenerationResult got = fixed->generate(req);
    EXPECT_EQ(got.tokens, ar_tokens(req)) << name;
    EXPECT_GT(got.stats.drafted, 0) << name;
    EXPECT_TRUE(got.stats.step_shapes.empty()) << name;
  }
  StrategyConfig c = base_;
  c.name = "dyntree";
  c.options["tree_verify_depth"] = 2;
  try {
    make_strategy(c);
    ADD_FAILURE() << "--tree-verify-depth without --tree-depth was taken";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("--tree-verify-depth needs --tree-depth"),
              std::string::npos)
        << e.what();
  }
  c.options.clear();
  c.tree_branch = 5;
  EXPECT_THROW(make_strategy(c), Error);
}

}  // namespace
}  // namespace parspec
