// The cost model's predictions on hand-made measurements, the tuning cache
// (round trip, invalidation when a model file changes or its version is
// older), tree shapes (prediction, acceptance from the drafter's ranks,
// exactness as auto runs them), and `auto` falling back to ar when drafting
// cannot pay.
#include <fcntl.h>
#include <gtest/gtest.h>
#include <sys/stat.h>

#include <cstdlib>
#include <fstream>
#include <iterator>
#include <optional>

#include "core/error.h"
#include "decode/local_model.h"
#include "decode/registry.h"
#include "model/kv_cache.h"
#include "sample/sampler.h"
#include "test_helpers.h"
#include "tuning/cost_family.h"
#include "tuning/cost_model.h"
#include "tuning/tuning.h"

namespace parspec {
namespace {

using testing_support::TempDir;
using testing_support::write_model;

Candidate tree_shape(int depth, int branch) {
  return {"tree", 0, depth, branch, 0};
}
Candidate dyntree_shape(int depth, int branch, int width) {
  return {"dyntree", 0, depth, branch, width};
}

// L(n) = 10 + (n - 1) ms, draft 2 ms a token, P(first k accepted) = 0.8, 0.6, 0.4, 0.2.
CostMeasurements hand_made(bool parallel) {
  CostMeasurements m;
  m.target_ms = {10, 11, 12, 13, 14};
  m.draft_ms = 2;
  m.accept_prefix = {0.8, 0.6, 0.4, 0.2};
  m.parallel = parallel;
  return m;
}

// The cost model knows the families only through the registry: each tuned
// strategy brings every hook, and each calibration role has one family.
TEST(CostFamilies, EveryTunedStrategyBringsItsWholeFamily) {
  for (const StrategyInfo& info : strategy_registry()) {
    if (info.cost == nullptr) continue;
    EXPECT_TRUE(info.cost->candidates && info.cost->predict && info.cost->configure &&
                info.cost->calibration_candidate)
        << info.name;
    EXPECT_EQ(info.cost->calibration_candidate(2).strategy, info.name);
  }
  for (const CalibrationRole role : {CalibrationRole::reference, CalibrationRole::chain,
                                     CalibrationRole::tree, CalibrationRole::parallel}) {
    int families = 0;
    for (const StrategyInfo& info : strategy_registry())
      families += info.cost != nullptr && info.cost->calibration == role;
    EXPECT_EQ(families, 1) << static_cast<int>(role);
  }
  EXPECT_EQ(calibrating_strategy(CalibrationRole::reference).name, reference_strategy_name());
  EXPECT_EQ(reference_candidate().label(), "ar");
  EXPECT_THROW(cost_family("easyspec"), Error);
}

TEST(CostModel, PredictsArFromOneTokenLatency) {
  const Prediction p = predict(hand_made(false), {"ar", 0});
  EXPECT_DOUBLE_EQ(p.tok_per_s, 100.0);  // one token per 10 ms
}

TEST(CostModel, AddsTheMeasuredOverheads) {
  CostMeasurements m = hand_made(false);
  m.target_overhead_ms = 2.5;                               // per target step
  m.draft_overhead_ms = 0.5;                                // per draft token
  EXPECT_DOUBLE_EQ(predict(m, {"ar", 0}).tok_per_s, 80.0);  // 1 token per 12.5 ms
  // sd:2: 2.4 tokens per 2 × (2 + 0.5) + 12 + 2.5 = 19.5 ms.
  EXPECT_DOUBLE_EQ(predict(m, {"sd", 2}).ms_per_step, 19.5);
  EXPECT_DOUBLE_EQ(predict(m, {"sd", 2}).tok_per_s, 2400.0 / 19.5);
}

TEST(CostModel, PricesEveryVerifiedRowFromRealRuns) {
  CostMeasurements m = hand_made(false);
  m.verify_row_ms = 0.5;  // a real forward over n rows: L(n) + 0.5 ms per row after the first
  EXPECT_DOUBLE_EQ(predict(m, {"ar", 0}).ms_per_step, 10.0);  // one row: no change
  // sd:2: 2 drafts (4 ms) + L(3) (12 ms) + 2 rows × 0.5 ms.
  EXPECT_DOUBLE_EQ(predict(m, {"sd", 2}).ms_per_step, 17.0);
}

TEST(CostModel, PredictsChainSpeculation) {
  const CostMeasurements m = hand_made(false);
  EXPECT_DOUBLE_EQ(expected_accepted(m, 2), 0.8 + 0.6);
  // γ = 2: 1 + 0.8 + 0.6 = 2.4 tokens per 2 drafts (4 ms) + L(3) (12 ms) = 16 ms.
  const Prediction two = predict(m, {"sd", 2});
  EXPECT_DOUBLE_EQ(two.tokens_per_step, 2.4);
  EXPECT_DOUBLE_EQ(two.ms_per_step, 16.0);
  EXPECT_DOUBLE_EQ(two.tok_per_s, 150.0);
  // γ = 4: 1 + 2.0 = 3 tokens per 8 + 14 = 22 ms.
  EXPECT_DOUBLE_EQ(predict(m, {"sd", 4}).tok_per_s, 3000.0 / 22.0);
}

TEST(CostModel, PredictsPearlWithAndWithoutCoresOfItsOwn) {
  // γ = 2: 0.8 + 0.6 accepted, plus a correction unless all were accepted
  // (1 - 0.6) = 1.8 tokens per round; the round is max(4, 12) ms in parallel.
  const Prediction parallel = predict(hand_made(true), {"pearl", 2});
  EXPECT_DOUBLE_EQ(parallel.tokens_per_step, 1.8);
  EXPECT_DOUBLE_EQ(parallel.ms_per_step, 12.0);
  EXPECT_DOUBLE_EQ(parallel.tok_per_s, 150.0);
  // Sharing cores the two halves add up: 4 + 12 ms.
  EXPECT_DOUBLE_EQ(predict(hand_made(false), {"pearl", 2}).tok_per_s, 1800.0 / 16.0);
  // A measured efficiency of 0.5 (hand-offs, a busy machine) halves it.
  CostMeasurements slow = hand_made(true);
  slow.pearl_efficiency = 0.5;
  EXPECT_DOUBLE_EQ(predict(slow, {"pearl", 2}).tok_per_s, 75.0);
  EXPECT_DOUBLE_EQ(predict(slow, {"sd", 2}).tok_per_s, 150.0);  // sd is not affected
}

TEST(CostModel, RefusesWhatWasNotMeasured) {
  const CostMeasurements m = hand_made(false);
  EXPECT_THROW(predict(m, {"sd", 5}), Error);  // acceptance of 4 positions only
  EXPECT_THROW(predict(m, {"tree", 2}), Error);
  // Candidates stop where the measurements do: ar, sd:1..4, pearl:1..4.
  EXPECT_EQ(tuned_candidates(m).size(), 9u);
}

TEST(CostModel, ChoosesTheFastestPrediction) {
  const CostMeasurements m = hand_made(false);
  const std::vector<Prediction> ranked = rank_candidates(m);
  for (size_t i = 1; i < ranked.size(); ++i)
    EXPECT_GE(ranked[i - 1].tok_per_s, ranked[i].tok_per_s);
  // sd:1 = 1.8 / 13 ms = 138.5, sd:2 = 150, sd:3 = 2.8 / 19 = 147.4, sd:4 = 136.4.
  const TuneChoice choice = choose_strategy(m);
  EXPECT_EQ(choice.chosen.label(), "sd:2");
  EXPECT_DOUBLE_EQ(choice.predicted.tok_per_s, 150.0);
  EXPECT_DOUBLE_EQ(choice.ar.tok_per_s, 100.0);
}

TEST(CostModel, TheRealRunCheckDecides) {
  CostMeasurements m = hand_made(false);
  ASSERT_EQ(choose_strategy(m).chosen.label(), "sd:2");  // predicted 150 tok/s
  m.measured_best = "sd:3";                              // predicted 147.4, measured faster
  const TuneChoice checked = choose_strategy(m);
  EXPECT_EQ(checked.chosen.label(), "sd:3");
  EXPECT_NE(checked.reason.find("measured fastest"), std::string::npos) << checked.reason;
  m.rejected = {"sd:3"};  // a later check found it no faster than ar
  EXPECT_EQ(choose_strategy(m).chosen.label(), "sd:2");
}

// Runs of the contenders and ar (last): ms per prompt for 10 tokens each.
CandidateRuns runs_of(const std::vector<std::vector<double>>& ms) {
  CandidateRuns runs;
  runs.ms = ms;
  for (const auto& row : ms) runs.tokens.push_back(std::vector<double>(row.size(), 10));
  return runs;
}

TEST(RealRunCheck, RejectsWhatIsNotFasterThanAr) {
  const std::vector<Candidate> contenders = {{"sd", 2}, dyntree_shape(2, 3, 2)};
  const CheckOutcome out =
      decide_check(contenders, runs_of({{100, 110, 90}, {130, 140, 120}, {120, 120, 120}}));
  EXPECT_EQ(out.chosen, "sd:2");
  EXPECT_EQ(out.rejected, std::vector<std::string>{"dyntree:d2c3w2"});
  EXPECT_DOUBLE_EQ(out.ar_tok_per_s, 30 * 1000.0 / 360);
  ASSERT_EQ(out.checked.size(), 2u);
  EXPECT_DOUBLE_EQ(out.checked[0].tok_per_s, 30 * 1000.0 / 300);
  EXPECT_DOUBLE_EQ(out.checked[0].slower, 0.0);  // the fastest against itself
  // Nothing faster than ar: no choice.
  EXPECT_TRUE(decide_check({{"sd", 2}}, runs_of({{130, 130}, {120, 120}})).chosen.empty());
}

TEST(RealRunCheck, TheSimplestWithinTheNoiseOfTheFastestIsChosen) {
  const std::vector<Candidate> contenders = {dyntree_shape(2, 3, 2), {"sd", 3}};
  // The tree is 4% faster overall, but per prompt the gap swings from -10% to +20%
  // (acceptance differs by prompt): within two standard errors, so sd:3 runs.
  const std::vector<double> tree = {100, 100, 100, 100, 100, 100};
  const std::vector<double> noisy = {120, 90, 110, 92, 118, 95};
  const std::vector<double> ar = {200, 200, 200, 200, 200, 200};
  const CheckOutcome tie = decide_check(contenders, runs_of({tree, noisy, ar}));
  EXPECT_EQ(tie.chosen, "sd:3");
  EXPECT_GT(tie.checked[1].slower, 0.0);
  EXPECT_LT(tie.checked[1].slower, 2 * tie.checked[1].slower_se);
  // The same 4% on every prompt is resolved: the tree runs.
  const std::vector<double> steady(6, 104);
  EXPECT_EQ(decide_check(contenders, runs_of({tree, steady, ar})).chosen, "dyntree:d2c3w2");
  // Under 1% is a tie even when steady.
  const std::vector<double> close(6, 100.5);
  EXPECT_EQ(decide_check(contenders, runs_of({tree, close, ar})).chosen, "sd:3");
}

TEST(RealRunCheck, SimplerMeansFewerMovingParts) {
  EXPECT_LT(complexity_rank({"ar", 0}), complexity_rank({"sd", 8}));
  EXPECT_LT(complexity_rank({"sd", 2}), complexity_rank({"sd", 3}));
  EXPECT_LT(complexity_rank({"sd", 8}), complexity_rank(tree_shape(1, 2)));
  EXPECT_LT(complexity_rank(tree_shape(2, 2)), complexity_rank(dyntree_shape(2, 2, 2)));
  EXPECT_LT(complexity_rank(dyntree_shape(2, 2, 2)), complexity_rank(dyntree_shape(2, 3, 3)));
  EXPECT_LT(complexity_rank(dyntree_shape(8, 3, 4)), complexity_rank({"pearl", 1}));
}

TEST(CostModel, FallsBackToArWithinTheMargin) {
  CostMeasurements m = hand_made(false);
  m.accept_prefix = {0.05, 0.0, 0.0, 0.0};
  EXPECT_EQ(choose_strategy(m).chosen.label(), "ar");
  // sd:1 at 1.6 tokens per 2 + 11 ms = 123 tok/s is 23% faster than ar: chosen at a 5%
  // margin, not at a 30% one.
  m.accept_prefix = {0.6, 0.0, 0.0, 0.0};
  EXPECT_EQ(choose_strategy(m, 0.05).chosen.label(), "sd:1");
  const TuneChoice strict = choose_strategy(m, 0.30);
  EXPECT_EQ(strict.chosen.label(), "ar");
  EXPECT_NE(strict.reason.find("sd:1"), std::string::npos) << strict.reason;
}

TEST(CostModel, CandidateConfigsSetTheirParameter) {
  StrategyConfig base;
  base.options["adaptive_draft"] = true;
  const StrategyConfig sd = config_for_candidate(base, {"sd", 3});
  EXPECT_EQ(sd.name, "sd");
  EXPECT_EQ(sd.draft_max, 3);
  EXPECT_FALSE(std::get<bool>(sd.options.at("adaptive_draft")));
  const StrategyConfig pearl = config_for_candidate(base, {"pearl", 5});
  EXPECT_EQ(pearl.name, "pearl");
  EXPECT_EQ(std::get<int>(pearl.options.at("pearl_window")), 5);
}

// Trees: L(n) = 10 + (n - 1) ms to n = 17, D(n) = 1.5 + n / 2 ms, and at
// branching 2 the target's token is the drafter's first at depth 1 half the
// time and its second 0.2 of the time; at depth 2, 0.4 and 0.1.
CostMeasurements hand_made_trees() {
  CostMeasurements m = hand_made(false);
  m.target_ms.clear();
  for (int n = 1; n <= 17; ++n) m.target_ms.push_back(10 + (n - 1));
  m.draft_batch_ms = {2, 2.5, 3, 3.5};
  m.tree_accept = {{{0.7}, {0.6}}, {{0.5, 0.2}, {0.4, 0.1}}};
  return m;
}

TEST(CostModel, TreeShapesLevelByLevel) {
  EXPECT_EQ(tree_level_sizes(tree_shape(3, 2)), (std::vector<int>{2, 4, 8}));
  EXPECT_EQ(tree_level_sizes(dyntree_shape(4, 3, 4)), (std::vector<int>{3, 4, 4, 4}));
  EXPECT_EQ(tree_level_sizes(dyntree_shape(2, 2, 3)), (std::vector<int>{2, 3}));
  EXPECT_EQ(tree_shape(3, 2).label(), "tree:d3c2");
  EXPECT_EQ(dyntree_shape(4, 3, 2).label(), "dyntree:d4c3w2");
}

TEST(CostModel, PredictsTreesFromPerDepthRankAcceptance) {
  CostMeasurements m = hand_made_trees();
  // tree:d2c2: depth 1 accepts 0.5 + 0.2; depth 2 (0.5 + 0.2) × (0.4 + 0.1) = 0.35.
  EXPECT_DOUBLE_EQ(expected_tree_accepted(m, tree_shape(2, 2)), 1.05);
  // 6 nodes: D(1) to catch up + D(2) for level 1 + L(7) = 2 + 2.5 + 16 ms.
  const Prediction full = predict(m, tree_shape(2, 2));
  EXPECT_DOUBLE_EQ(full.tokens_per_step, 2.05);
  EXPECT_DOUBLE_EQ(full.ms_per_step, 20.5);
  // dyntree:d2c2w2 keeps the 2 likeliest of depth 2's 4 candidates: 0.5 × 0.4 and 0.2 × 0.4.
  EXPECT_DOUBLE_EQ(expected_tree_accepted(m, dyntree_shape(2, 2, 2)), 0.7 + 0.28);
  EXPECT_DOUBLE_EQ(predict(m, dyntree_shape(2, 2, 2)).ms_per_step, 2 + 2.5 + 14);
  // The measured overheads: 0.25 ms per node, 1 ms per draft forward, -0.5 per target step.
  m.tree_node_overhead_ms = 0.25;
  m.draft_overhead_ms = 1;
  m.target_overhead_ms = -0.5;
  EXPECT_DOUBLE_EQ(predict(m, tree_shape(2, 2)).ms_per_step, 20.5 + 6 * 0.25 + 2 - 0.5);
  // A chain through the tree formula (c = 1) costs what sd does.
  m.tree_node_overhead_ms = 0;
  EXPECT_DOUBLE_EQ(predict(m, tree_shape(2, 1)).ms_per_step, predict(m, {"sd", 2}).ms_per_step);
  EXPECT_DOUBLE_EQ(predict(m, tree_shape(2, 1)).tokens_per_step, 1 + 0.7 + 0.7 * 0.6);
  // Not measured: depth 3, branching 3.
  EXPECT_THROW(predict(m, tree_shape(3, 2)), Error);
  EXPECT_THROW(predict(m, tree_shape(1, 3)), Error);
}

TEST(CostModel, TreeCandidatesFitTheMeasuredBudget) {
  const CostMeasurements m = hand_made_trees();
  std::vector<std::string> labels;
  for (const Candidate& c : tuned_candidates(m)) labels.push_back(c.label());
  const auto has = [&](const std::string& l) {
    return std::find(labels.begin(), labels.end(), l) != labels.end();
  };
  EXPECT_TRUE(has("tree:d1c2"));
  EXPECT_TRUE(has("tree:d2c2"));
  EXPECT_TRUE(has("dyntree:d2c2w2"));
  EXPECT_FALSE(has("dyntree:d2c2w4"));  // the full tree: tree:d2c2
  EXPECT_FALSE(has("tree:d3c2"));       // depth 3 was not measured
  EXPECT_FALSE(has("tree:d1c3"));       // nor branching 3
  // Every candidate is a strategy entry bench and auto can run.
  StrategyConfig base;
  for (const Candidate& c : tuned_candidates(m)) {
    const StrategyConfig config = config_for_candidate(base, c);
    EXPECT_EQ(config.name, c.strategy);
    EXPECT_NO_THROW(parse_strategy_spec(c.label())) << c.label();
    if (c.depth > 0) {
      EXPECT_EQ(config.tree_depth, c.depth) << c.label();
    }
  }
  const StrategyConfig dyn = config_for_candidate(base, dyntree_shape(3, 2, 4));
  EXPECT_EQ(dyn.name, "dyntree");
  EXPECT_EQ(dyn.tree_depth, 3);
  EXPECT_EQ(dyn.tree_branch, 2);
  EXPECT_EQ(dyn.tree_width, 4);
}

TEST(CostModel, TreeAcceptanceFromRanks) {
  // Ranks of the target's tokens; index 0 is the first generated token, steps start at 1.
  // c = 2, 2 deep: step at 1 accepts ranks 0 and 1 (depths 1, 2); the next starts at 4 and
  // accepts rank 0, then rank 5 is rejected at depth 2.
  const std::vector<std::vector<int>> ranks = {{0, 0, 1, 3, 0, 5}};
  const auto table = tree_acceptance(ranks, {0}, 2);
  ASSERT_EQ(table.size(), static_cast<size_t>(kMaxTreeBranch));
  EXPECT_EQ(table[1], (std::vector<std::vector<double>>{{1.0, 0.0}, {0.0, 0.5}}));
  // c = 1 (a chain): steps at 1 (accepts 1), 3 (rank 3: none), 4 (accepts 1).
  EXPECT_EQ(table[0][0], std::vector<double>{2.0 / 3.0});
  EXPECT_EQ(table[0][1], std::vector<double>{0.0});
}

TEST(CostModel, DraftRanksOfTheTargetsTokens) {
  TempDir dir;
  const testing_support::ModelPair models =
      testing_support::make_model_pair(dir, "llama", DType::F32, DType::Q8_0, 300, 3);
  const Model& draft = *models.draft;
  Worker worker(1);
  // A sequence whose tokens are the drafter's rank 2, 0, 1 and 7 choices after their prefix.
  std::vector<int32_t> tokens = {5, 9};
  const std::vector<int> chosen = {2, 0, 1, 7};
  for (int rank : chosen) {
    KvCache kv(draft.config(), static_cast<int>(tokens.size()) + 1);
    const std::vector<float> logits = draft.forward(worker, Batch::chain(kv, tokens, false), kv);
    tokens.push_back(top_c(softmax(logits.data(), draft.config().n_vocab), 8)[rank]);
  }
  const std::vector<int> ranks = draft_ranks(models.draft, worker, tokens, 4);
  ASSERT_EQ(ranks.size(), tokens.size());
  EXPECT_EQ(std::vector<int>(ranks.begin() + 2, ranks.end()), (std::vector<int>{2, 0, 1, 4}));
}

// Tree candidates as auto runs them: greedy output equal to ar's.
TEST(CostModel, TreeCandidatesAreExact) {
  TempDir dir;
  const testing_support::ModelPair models =
      testing_support::make_model_pair(dir, "llama", DType::F32, DType::Q8_0, 300, 5);
  Worker worker(1);
  const StrategyConfig base = testing_support::pair_config(models, worker, worker, 128);
  GenerationRequest req;
  req.prompt = {256, 5, 7, 9};
  req.n_predict = 24;
  req.sampling.temp = 0;
  const auto reference = make_strategy(config_for_candidate(base, {"ar", 0}))->generate(req);
  for (const Candidate& c : {tree_shape(2, 3), dyntree_shape(3, 2, 3)}) {
    const GenerationResult got = make_strategy(config_for_candidate(base, c))->generate(req);
    EXPECT_EQ(got.tokens, reference.tokens) << c.label();
    EXPECT_GT(got.stats.drafted, 0) << c.label();
  }
}

// Sets an environment variable for a scope and restores the old value.
class ScopedEnv {
 public:
  ScopedEnv(const char* name, const char* value) : name_(name) {
    if (const char* old = std::getenv(name)) old_ = old;
    value ? setenv(name, value, 1) : unsetenv(name);
  }
  ~ScopedEnv() { old_ ? setenv(name_, old_->c_str(), 1) : unsetenv(name_); }

 private:
  const char* name_;
  std::optional<std::string> old_;
};

void write_bytes(const std::string& path, const std::string& bytes) {
  std::ofstream(path, std::ios::binary) << bytes;
}

// Where the sides run on a GPU, calibration must time them there: every
// forward it times goes through the config's make_target / make_drafter.
TEST(Calibration, TimesTheConfigsOwnSides) {
  TempDir dir;
  const auto pair = testing_support::make_model_pair(dir, "llama", DType::F32, DType::Q8_0, 300, 5);
  Worker target_worker(1), draft_worker(1);
  StrategyConfig config = testing_support::pair_config(pair, target_worker, draft_worker, 256);
  int targets = 0, drafters = 0;
  config.make_target = [&](const StrategyConfig& c) -> std::unique_ptr<Target> {
    ++targets;
    return std::make_unique<LocalTarget>(c.target, *c.target_worker);
  };
  config.make_drafter = [&](const StrategyConfig& c) -> std::unique_ptr<Drafter> {
    ++drafters;
    return std::make_unique<ModelDrafter>(c.draft, *c.draft_worker);
  };
  CalibrationOptions options;
  options.n_predict = 8;
  options.max_gamma = 2;
  options.trees = true;
  options.timing_runs = 1;
  options.parallel_window = 0;
  const std::vector<std::vector<int32_t>> prompts = {calibration_prompts(*config.target)[0]};
  const CostMeasurements m = measure_costs(config, prompts, options);
  EXPECT_GT(m.draft_ms, 0.0);
  // The timers (one side each), the strategies' runs, and the drafter that ranks for trees.
  EXPECT_GE(targets, 2);
  EXPECT_GE(drafters, 3);
}

TEST(TuneCache, RoundTripAndInvalidation) {
  TempDir dir;
  write_bytes(dir.file("t.gguf"), "target bytes");
  write_bytes(dir.file("d.gguf"), "draft");
  const std::string cache = dir.file("cache");
  TuneKey key{file_identity(dir.file("t.gguf")), file_identity(dir.file("d.gguf")), "cpu", 2, 1};
  EXPECT_FALSE(load_tuning(cache, key).has_value());

  CostMeasurements m = hand_made(true);
  m.pearl_efficiency = 0.8;
  m.target_overhead_ms = 0.25;
  m.draft_overhead_ms = 0.125;
  store_tuning(cache, key, m);
  const auto back = load_tuning(cache, key);
  ASSERT_TRUE(back.has_value());
  EXPECT_EQ(back->target_ms, m.target_ms);
  EXPECT_EQ(back->draft_ms, m.draft_ms);
  EXPECT_EQ(back->accept_prefix, m.accept_prefix);
  EXPECT_EQ(back->parallel, m.parallel);
  EXPECT_EQ(back->pearl_efficiency, m.pearl_efficiency);
  EXPECT_EQ(back->target_overhead_ms, m.target_overhead_ms);
  EXPECT_EQ(back->draft_overhead_ms, m.draft_overhead_ms);
  const CostMeasurements trees = hand_made_trees();
  store_tuning(cache, key, trees);
  const auto trees_back = load_tuning(cache, key);
  ASSERT_TRUE(trees_back.has_value());
  EXPECT_EQ(trees_back->draft_batch_ms, trees.draft_batch_ms);
  EXPECT_EQ(trees_back->tree_accept, trees.tree_accept);
  EXPECT_EQ(trees_back->tree_node_overhead_ms, trees.tree_node_overhead_ms);
  CostMeasurements checked = trees;
  checked.measured_best = "dyntree:d2c2w2";
  checked.rejected = {"sd:2"};
  checked.verify_row_ms = 0.75;
  checked.checked = {{"dyntree:d2c2w2", 31.5, 0, 0}, {"sd:3", 30.5, 0.03, 0.02}};
  checked.checked_ar_tok_per_s = 22.5;
  store_tuning(cache, key, checked);
  EXPECT_EQ(load_tuning(cache, key)->measured_best, "dyntree:d2c2w2");
  EXPECT_EQ(load_tuning(cache, key)->verify_row_ms, 0.75);
  ASSERT_EQ(load_tuning(cache, key)->checked.size(), 2u);
  EXPECT_EQ(load_tuning(cache, key)->checked[1].label, "sd:3");
  EXPECT_EQ(load_tuning(cache, key)->checked[1].slower_se, 0.02);
  EXPECT_EQ(load_tuning(cache, key)->checked_ar_tok_per_s, 22.5);
  EXPECT_EQ(load_tuning(cache, key)->rejected, checked.rejected);
  EXPECT_DOUBLE_EQ(predict(*trees_back, dyntree_shape(2, 2, 2)).tok_per_s,
                   predict(trees, dyntree_shape(2, 2, 2)).tok_per_s);

  // Other threads or another CPU: another entry.
  TuneKey other = key;
  other.threads = 1;
  EXPECT_FALSE(load_tuning(cache, other).has_value());
  other = key;
  other.cpu = "another cpu";
  EXPECT_FALSE(load_tuning(cache, other).has_value());

  // The target file changes (same size, new time; then new content): the entry is not found.
  const timespec times[2] = {{1000000000, 5}, {1000000000, 5}};
  ASSERT_EQ(utimensat(AT_FDCWD, dir.file("t.gguf").c_str(), times, 0), 0);
  const TuneKey touched{file_identity(dir.file("t.gguf")), key.draft, "cpu", 2, 1};
  EXPECT_NE(touched.target, key.target);
  EXPECT_FALSE(load_tuning(cache, touched).has_value());
  write_bytes(dir.file("t.gguf"), "other target bytes");
  const TuneKey rewritten{file_identity(dir.file("t.gguf")), key.draft, "cpu", 2, 1};
  EXPECT_FALSE(load_tuning(cache, rewritten).has_value());
  store_tuning(cache, rewritten, hand_made(false));
  ASSERT_TRUE(load_tuning(cache, rewritten).has_value());
  EXPECT_FALSE(load_tuning(cache, rewritten)->parallel);
}

TEST(TuneCache, ACorruptFileCountsAsEmpty) {
  TempDir dir;
  write_bytes(dir.file("t.gguf"), "t");
  const std::string cache = dir.file("cache");
  std::filesystem::create_directories(cache);
  write_bytes(tune_cache_file(cache), "{ not json");
  const TuneKey key{file_identity(dir.file("t.gguf")), file_identity(dir.file("t.gguf")), "c", 1,
                    0};
  EXPECT_FALSE(load_tuning(cache, key).has_value());
  store_tuning(cache, key, hand_made(false));
  EXPECT_TRUE(load_tuning(cache, key).has_value());
}

// An entry of an older cache version (before tree measurements) is not found, so
// tuning measures again; storing replaces the file.
TEST(TuneCache, AnOlderVersionIsMeasuredAgain) {
  TempDir dir;
  write_bytes(dir.file("t.gguf"), "t");
  const std::string cache = dir.file("cache");
  const TuneKey key{file_identity(dir.file("t.gguf")), file_identity(dir.file("t.gguf")), "c", 1,
                    0};
  store_tuning(cache, key, hand_made(false));
  std::ifstream in(tune_cache_file(cache));
  std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  const size_t at = text.find("\"version\": 5");
  ASSERT_NE(at, std::string::npos) << text;
  text.replace(at, 12, "\"version\": 4");
  write_bytes(tune_cache_file(cache), text);
  EXPECT_FALSE(load_tuning(cache, key).has_value());
  store_tuning(cache, key, hand_made_trees());
  ASSERT_TRUE(load_tuning(cache, key).has_value());
  EXPECT_EQ(load_tuning(cache, key)->tree_accept, hand_made_trees().tree_accept);
}

TEST(TuneCache, MissingFilesAreErrors) {
  EXPECT_THROW(file_identity("/nonexistent/model.gguf"), Error);
}

TEST(TuneCache, DirectoryFromTheEnvironment) {
  {
    ScopedEnv dir("PARSPEC_CACHE_DIR", "/tmp/some-dir");
    EXPECT_EQ(default_tune_cache_dir(), "/tmp/some-dir");
  }
  ScopedEnv no_dir("PARSPEC_CACHE_DIR", nullptr);
  {
    ScopedEnv xdg("XDG_CACHE_HOME", "/tmp/xdg");
    EXPECT_EQ(default_tune_cache_dir(), "/tmp/xdg/parspec");
  }
  ScopedEnv no_xdg("XDG_CACHE_HOME", nullptr);
  ScopedEnv home("HOME", "/tmp/home");
  EXPECT_EQ(default_tune_cache_dir(), "/tmp/home/.cache/parspec");
}

// A draft four times wider than the target and unrelated to it: every
// speculative candidate is predicted slower than ar, so auto runs ar.
TEST(AutoStrategy, FallsBackToArWhenDraftingCannotPay) {
  TempDir dir;
  ScopedEnv cache_dir("PARSPEC_CACHE_DIR", dir.file("cache").c_str());
  RandomModelSpec spec;
  spec.n_vocab = 300;
  spec.seed = 1;
  auto target = Model::load(write_model(dir, "target.gguf", spec));
  spec.n_embd = 256;
  spec.n_ff = 1024;
  spec.n_layer = 4;
  spec.seed = 99;
  auto draft = Model::load(write_model(dir, "draft.gguf", spec));
  Worker worker(1);
  StrategyConfig c;
  c.target = target;
  c.draft = draft;
  c.target_worker = &worker;
  c.draft_worker = &worker;
  c.ctx_size = 128;
  c.name = "auto";
  const auto strategy = make_strategy(c);
  EXPECT_EQ(strategy->name(), "auto");
  EXPECT_EQ(strategy->runs(), "ar");
  ASSERT_FALSE(strategy->notes().empty());
  EXPECT_NE(strategy->notes().front().find("auto: runs ar"), std::string::npos);

  c.name = "ar";
  const auto ar = make_strategy(c);
  GenerationRequest req;
  req.prompt = {256, 5, 7, 9};
  req.n_predict = 16;
  req.sampling.temp = 0;
  const GenerationResult got = strategy->generate(req);
  EXPECT_EQ(got.tokens, ar->generate(req).tokens);
  EXPECT_EQ(got.stats.drafted, 0);

  // The second one reads the cache and agrees.
  c.name = "auto";
  EXPECT_EQ(make_strategy(c)->runs(), "ar");
  EXPECT_TRUE(std::filesystem::exists(tune_cache_file(dir.file("cache"))));
}

TEST(AutoStrategy, IsArWithoutADraftModel) {
  TempDir dir;
  auto target = Model::load(write_model(dir, "target.gguf", RandomModelSpec()));
  Worker worker(1);
  StrategyConfig c;
  c.target = target;
  c.target_worker = &worker;
  c.ctx_size = 64;
  c.name = "auto";
  EXPECT_EQ(make_strategy(c)->runs(), "ar");
}

}  // namespace
}  // namespace parspec
