// The pool strategies (cosine, specinfer) with several drafters: routing
// score and policy, adaptive speculation, greedy output == ar and sampled
// output distributed as ar's, concurrent drafting on own workers, and routing
// that learns which drafter agrees with the target.
#include <gtest/gtest.h>

#include <map>

#include "core/error.h"
#include "core/threads.h"
#include "decode/strategy.h"
#include "model/model.h"
#include "sampling_exactness.h"
#include "strategies/cosine/cosine.h"
#include "strategies/pool/routing.h"
#include "test_helpers.h"

namespace parspec {
namespace {

using testing_support::make_model_pair;
using testing_support::ModelPair;
using testing_support::TempDir;

TEST(RoutingScore, IsTheMeanNormalisedHarmonicMean) {
  const std::vector<float> c = {0.8f, 0.9f, 0.5f, 1.0f};
  const std::vector<float> d = {0.5f, 1.0f, 0.0f, 0.0f};
  // 0.8*0.5/(0.4+0.2*0.5) = 0.8; 1; 0; 0/0 counts 0.
  EXPECT_NEAR(routing_score(c, d), (0.8 + 1.0 + 0.0 + 0.0) / 4, 1e-6);
  EXPECT_NEAR(routing_score(std::vector<float>{0.3f}, std::vector<float>{0.5f}), 0.3, 1e-6);
  EXPECT_EQ(routing_score({}, {}), 0.0);
  EXPECT_THROW(routing_score(c, std::vector<float>{1.0f}), Error);
}

TEST(RoutingPolicy, RoutesToAllFirstThenExploitsAndExplores) {
  RoutingParams p;
  p.threshold = 2.0f;
  p.explore = 1.0f;  // exploring: every slot random
  p.exploit = 0.0f;  // exploiting: every slot the best
  RoutingPolicy policy(4, p);
  Rng rng(7);
  EXPECT_EQ(policy.choose(1, rng), (std::vector<int>{0, 1, 2, 3}));  // first step: all
  const std::vector<float> sure = {0.9f, 0.9f}, right = {1.0f, 1.0f}, wrong = {0.0f, 0.0f};
  policy.update(2, sure, right);
  for (int i : {0, 1, 3}) policy.update(i, sure, wrong);
  EXPECT_GT(policy.scores()[2], policy.scores()[0]);
  policy.observe_acceptance(3);  // >= threshold: exploit
  EXPECT_FALSE(policy.exploring());
  for (int r = 0; r < 20; ++r) EXPECT_EQ(policy.choose(1, rng), std::vector<int>{2});
  EXPECT_EQ(policy.choose(9, rng).size(), 4u);  // clamped to the pool
  policy.observe_acceptance(1);                 // below: explore at random
  EXPECT_TRUE(policy.exploring());
  std::map<int, int> seen;
  for (int r = 0; r < 200; ++r) ++seen[policy.choose(1, rng)[0]];
  EXPECT_EQ(seen.size(), 4u);
  policy.reset();
  EXPECT_EQ(policy.scores(), std::vector<double>(4, 0.5));
}

TEST(AdaptiveSpeculation, CutsTheLargestGammaWhileTheSumExceedsTheBound) {
  EXPECT_EQ(adaptive_speculation({4, 4, 2}, 6), (std::vector<int>{2, 2, 2}));
  EXPECT_EQ(adaptive_speculation({5, 1}, 3), (std::vector<int>{2, 1}));
  EXPECT_EQ(adaptive_speculation({3, 3}, 1), (std::vector<int>{1, 1}));  // never below 1
  EXPECT_EQ(adaptive_speculation({3, 2}, 10), (std::vector<int>{3, 2}));
  EXPECT_EQ(adaptive_speculation({3, 2}, 0), (std::vector<int>{3, 2}));  // no bound
}

// Given latencies: L(n) = 9 + n ms for n = 1..8 (linear beyond), no overhead.
LatencyModel given_latencies(double draft_token_ms) {
  LatencyModel m;
  for (int n = 1; n <= 8; ++n) m.target_ms.push_back(9.0 + n);
  m.draft_token_ms = draft_token_ms;
  return m;
}

TEST(CosineSchedule, LatencyModelIsTheTuningCostModel) {
  CostMeasurements measured;
  measured.target_ms = {5, 6};
  measured.target_overhead_ms = 0.5;
  measured.draft_ms = 1;
  measured.draft_overhead_ms = 0.25;
  const LatencyModel m = latency_model(measured);
  EXPECT_DOUBLE_EQ(m.verify_ms(1, 0), 5.5);  // L(1) + overhead
  EXPECT_DOUBLE_EQ(m.verify_ms(2, 2), 8.5);  // L(4): the last slope, 1 ms per token
  EXPECT_DOUBLE_EQ(m.draft_ms(4), 5.0);      // 4 × (d + overhead)
  EXPECT_THROW(latency_model(CostMeasurements()), Error);
}

TEST(CosineSchedule, NearTiesGoToTheLargerBatch) {
  // L(n) = 2n ms, but L(10) = 20.6: two requests of γ = 4 cost 10.3 ms each
  // together, one alone 10 ms: 3% apart, inside the default near tie of 5%.
  LatencyModel m;
  for (int n = 1; n <= 10; ++n) m.target_ms.push_back(2.0 * n);
  m.target_ms[9] = 20.6;
  const std::vector<PoolRequest> pool = {{10, 4, 0}, {10, 4, 0}};
  EXPECT_EQ(schedule_batch(pool, m, {}).members, (std::vector<int>{0, 1}));
  ScheduleBounds exact;
  exact.near_tie = 0;
  const BatchChoice alone = schedule_batch(pool, m, exact);
  EXPECT_EQ(alone.members, (std::vector<int>{0}));
  EXPECT_DOUBLE_EQ(alone.objective, 10.0);
}

TEST(CosineSchedule, ExtrapolationFollowsTheUpperHalfNotOneNoisyTiming) {
  LatencyModel m;
  m.target_ms = {1, 2, 3, 4, 5, 6, 7, 8};
  EXPECT_DOUBLE_EQ(m.extrapolation_slope(), 1.0);
  EXPECT_DOUBLE_EQ(m.verify_ms(10, 0), 10.0);
  // A slow last timing: the last two alone would say 4 ms per token; the fit
  // over sizes 5..8 (5, 6, 7, 10) says 1.6.
  m.target_ms.back() = 10;
  EXPECT_NEAR(m.extrapolation_slope(), 1.6, 1e-12);
  EXPECT_NEAR(m.verify_ms(10, 0), 10 + 1.6 * 2, 1e-12);
  m.target_ms = {3, 2};  // never a negative slope
  EXPECT_DOUBLE_EQ(m.verify_ms(5, 0), 2.0);
}

TEST(CosineSchedule, BatchesEveryRequestWhenThatIsCheapestPerRequest) {
  const std::vector<PoolRequest> pool = {{10, 4, 0}, {20, 4, 0}, {30, 4, 0}};
  // b requests: T_ttl = 4·2 + L(5b) = 17 + 5b ms; per request lowest at b = 3.
  const BatchChoice c = schedule_batch(pool, given_latencies(2), {});
  EXPECT_EQ(c.members, (std::vector<int>{0, 1, 2}));
  EXPECT_EQ(c.gammas, (std::vector<int>{4, 4, 4}));
  EXPECT_EQ(c.gamma_total, 12);
  EXPECT_EQ(c.critical_length, 30);
  EXPECT_DOUBLE_EQ(c.t_ttl_ms, 32.0);
  EXPECT_NEAR(c.objective, 32.0 / 3, 1e-12);
  EXPECT_TRUE(c.feasible);
}

TEST(CosineSchedule, GammaMaxCutsTheLargestGammasOfTheBatch) {
  const std::vector<PoolRequest> pool = {{10, 4, 0}, {20, 4, 0}, {30, 4, 0}};
  ScheduleBounds bounds;
  bounds.gamma_max = 6;
  // b = 3: γ cut to 2,2,2, T = 4 + L(9) = 22 (7.3 per request); b = 2: 3,3, T = 23.
  const BatchChoice c = schedule_batch(pool, given_latencies(2), bounds);
  EXPECT_EQ(c.members, (std::vector<int>{0, 1, 2}));
  EXPECT_EQ(c.gammas, (std::vector<int>{2, 2, 2}));
  EXPECT_DOUBLE_EQ(c.t_ttl_ms, 22.0);
  bounds.max_latency_ms = 21.5;  // now no batch is fast enough: the shortest alone
  const BatchChoice late = schedule_batch(pool, given_latencies(2), bounds);
  EXPECT_FALSE(late.feasible);
  EXPECT_EQ(late.members, std::vector<int>{0});
}

TEST(CosineSchedule, MemoryBoundLeavesTheLargeRequestOut) {
  const std::vector<PoolRequest> pool = {{10, 4, 1}, {20, 4, 1}, {5, 4, 5}};
  ScheduleBounds bounds;
  bounds.gamma_max = 6;
  bounds.max_memory = 3;
  const BatchChoice c = schedule_batch(pool, given_latencies(2), bounds);
  EXPECT_EQ(c.members, (std::vector<int>{0, 1}));
  EXPECT_EQ(c.gammas, (std::vector<int>{3, 3}));
  EXPECT_DOUBLE_EQ(c.t_ttl_ms, 23.0);  // 3·2 + L(8)
}

TEST(CosineSchedule, LambdaTradesLatencyForVerifiedTokens) {
  // Slow drafting (10 ms a token): the γ = 8 request costs 98 ms alone.
  const std::vector<PoolRequest> pool = {{10, 1, 0}, {10, 8, 0}};
  ScheduleBounds bounds;
  // λ = 0: the short request alone (21 ms) beats both (100 / 2 = 50 ms).
  EXPECT_EQ(schedule_batch(pool, given_latencies(10), bounds).members, std::vector<int>{0});
  bounds.lambda = 5;  // 21 − 5 = 16 vs 50 − 45 = 5: both
  EXPECT_EQ(schedule_batch(pool, given_latencies(10), bounds).members, (std::vector<int>{0, 1}));
  EXPECT_TRUE(schedule_batch({}, given_latencies(10), bounds).members.empty());
}

TEST(CosineSchedule, DraftersPerRequestShrinkWithVerifierLoad) {
  EXPECT_EQ(participating_drafters(2, 4, 1), 2);
  EXPECT_EQ(participating_drafters(0, 4, 1), 4);  // 0: the whole pool
  EXPECT_EQ(participating_drafters(0, 4, 3), 2);
  EXPECT_EQ(participating_drafters(2, 4, 3), 1);  // never below one
  EXPECT_EQ(participating_drafters(9, 4, 1), 4);  // never above the pool
}

// Three drafters of different quality: the pair's draft, an unrelated model
// and the target itself (always right when greedy).
struct Pool {
  TempDir dir, other_dir;
  ModelPair pair, unrelated;
  Pool(int n_vocab, uint64_t seed)
      : pair(make_model_pair(dir, "llama", DType::F32, DType::Q4_0, n_vocab, seed)),
        unrelated(make_model_pair(other_dir, "llama", DType::F32, DType::F32, n_vocab, seed + 1)) {}
  StrategyConfig config(const std::string& name, Worker& worker) const {
    StrategyConfig c;
    c.name = name;
    c.target = pair.target;
    c.target_worker = &worker;
    c.drafters = {pair.draft, unrelated.target, pair.target};
    c.drafter_names = {"draft", "unrelated", "self"};
    return c;
  }
};

std::vector<std::vector<int32_t>> prompts(int n) {
  std::vector<std::vector<int32_t>> out;
  for (int i = 0; i < n; ++i) {
    std::vector<int32_t> p = {256};
    for (int j = 0; j <= i % 5; ++j) p.push_back((i * 37 + j * 11 + 5) % 256);
    out.push_back(p);
  }
  return out;
}

TEST(PoolStrategies, GreedyOutputEqualsAutoregressive) {
  const Pool pool(300, 11);
  Worker worker(1), w0(1), w1(1), w2(1);
  StrategyConfig ar = pool.config("ar", worker);
  ar.ctx_size = 128;
  std::vector<StrategyConfig> variants;
  for (const char* name : {"cosine", "specinfer"}) {
    StrategyConfig c = pool.config(name, worker);
    c.ctx_size = 128;
    c.draft_max = 4;
    variants.push_back(c);
  }
  StrategyConfig c = variants[0];
  c.options["route"] = 1;
  c.draft_max = 6;
  variants.push_back(c);
  c.options["route"] = 0;
  c.draft_p_min = 0.3f;
  variants.push_back(c);
  c = variants[0];
  c.drafter_workers = {&w0, &w1, &w2};  // concurrent drafting
  variants.push_back(c);
  c.options["gamma_max"] = 2;
  c.verifier_load = [] { return 3; };  // a busy server: one drafter, γ cut to 1
  variants.push_back(c);
  c = variants[0];
  c.options["route"] = 0;
  c.options["fusion_top"] = 3;  // the drafters' runner-ups as leaves
  variants.push_back(c);
  c.options["tree_budget"] = 3;  // tree selection: the 3 nodes most likely accepted
  variants.push_back(c);
  const auto reference = make_strategy(ar);
  for (const auto& prompt : prompts(12)) {
    GenerationRequest req;
    req.prompt = prompt;
    req.n_predict = 20;
    req.sampling.temp = 0;
    const std::vector<int32_t> expected = reference->generate(req).tokens;
    for (size_t v = 0; v < variants.size(); ++v) {
      const GenerationResult got = make_strategy(variants[v])->generate(req);
      ASSERT_EQ(got.tokens, expected) << variants[v].name << " variant " << v;
      EXPECT_LE(got.stats.accepted, got.stats.drafted);
      EXPECT_GE(got.stats.tau(), 1.0);
      ASSERT_EQ(got.stats.drafter_use.size(), 3u);
      EXPECT_EQ(got.stats.drafter_use[1].name, "unrelated");
      if (v + 1 == variants.size()) {
        EXPECT_LE(got.stats.drafted, 3 * got.stats.verify_steps) << "the tree budget holds";
      }
    }
  }
}

// Drafters on workers of their own draft at the same time on threads the pool
// keeps: steps and requests start no thread, nor does a later strategy that
// borrows the same threads again.
TEST(PoolStrategies, ConcurrentDraftingStartsNoThreadPerStep) {
  const Pool pool(300, 11);
  Worker worker(1), w0(1), w1(1), w2(1);
  StrategyConfig c = pool.config("cosine", worker);
  c.ctx_size = 128;
  c.draft_max = 4;
  c.drafter_workers = {&w0, &w1, &w2};
  GenerationRequest req;
  req.n_predict = 20;
  req.sampling.temp = 0;
  req.prompt = prompts(1)[0];
  make_strategy(c)->generate(req);  // the pool's threads are started (or borrowed) here
  const uint64_t before = threads_started();
  for (int round = 0; round < 2; ++round) {
    const auto strategy = make_strategy(c);
    for (const auto& prompt : prompts(3)) {
      req.prompt = prompt;
      const GenerationResult got = strategy->generate(req);
      EXPECT_GT(got.stats.verify_steps, 1);
    }
  }
  EXPECT_EQ(threads_started(), before);
}

TEST(PoolStrategies, RoutingLearnsWhichDrafterAgreesWithTheTarget) {
  const Pool pool(300, 21);
  Worker worker(1);
  StrategyConfig c = pool.config("cosine", worker);
  c.ctx_size = 160;
  c.options["route"] = 1;
  c.options["route_exploit"] = 0.0f;
  c.options["tree_budget"] = 0;  // every drafted node verified
  GenerationRequest req;
  req.prompt = {256, 70, 71};
  req.n_predict = 120;
  req.sampling.temp = 0;
  const GenerationResult got = make_strategy(c)->generate(req);
  const auto& use = got.stats.drafter_use;
  // The target drafting for itself is never wrong: routing settles on it.
  EXPECT_GT(use[2].score, use[0].score);
  EXPECT_GT(use[2].score, use[1].score);
  EXPECT_GT(use[2].routed_steps, use[0].routed_steps + use[1].routed_steps);
  // Every fused token came from some drafter; the first step used all three.
  int64_t fused = 0;
  for (const auto& u : use) {
    fused += u.fused_tokens;
    EXPECT_GE(u.routed_steps, 1);
  }
  EXPECT_GT(fused, 0);
  // Once routed to the self-drafter, whole chains are accepted (K = 4: τ up to 5).
  EXPECT_GT(got.stats.tau(), 4.0);
}

TEST(PoolStrategies, SampledOutputMatchesTheTargetDistribution) {
  const Pool pool(260, 3);
  Worker worker(1);
  const SamplingParams params = testing_support::untruncated_sampling(1.5f);
  auto histograms = [&](StrategyConfig c) {
    c.ctx_size = 64;
    return testing_support::sample_histograms(c, 2500, params);
  };
  const auto reference = histograms(pool.config("ar", worker));
  for (const char* name : {"cosine", "specinfer"}) {
    StrategyConfig c = pool.config(name, worker);
    c.options["route"] = 2;
    if (c.name == "cosine") c.options["fusion_top"] = 2;
    std::string why;
    EXPECT_TRUE(testing_support::same_distribution(histograms(c), reference, &why))
        << name << " " << why;
  }
}

TEST(PoolStrategies, ClearErrors) {
  const Pool pool(300, 5);
  Worker worker(1);
  StrategyConfig c = pool.config("cosine", worker);
  c.drafters.clear();
  EXPECT_THROW(make_strategy(c), Error);  // no drafters and no -md
  TempDir dir;
  const ModelPair other = make_model_pair(dir, "llama", DType::F32, DType::F32, 280, 1);
  c = pool.config("specinfer", worker);
  c.drafters.push_back(other.draft);  // another vocabulary
  EXPECT_THROW(make_strategy(c), Error);
  c = pool.config("cosine", worker);
  c.options["route"] = -1;
  EXPECT_THROW(make_strategy(c), Error);
}

}  // namespace
}  // namespace parspec
