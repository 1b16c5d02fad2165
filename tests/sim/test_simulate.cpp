// The cluster simulator: links, the pipeline's timing on hand-computable
// profiles (batching, pipelining, cancels), cost profiles, and every
// strategy's greedy output on a simulated cluster equal to ar's.
#include <gtest/gtest.h>

#include <cmath>
#include <random>

#include "core/error.h"
#include "core/timer.h"
#include "decode/registry.h"
#include "sim/cost_profile.h"
#include "sim/sim_sides.h"
#include "sim/virtual_cluster.h"
#include "strategy_variants.h"
#include "test_helpers.h"

namespace parspec::sim {
namespace {

using testing_support::make_model_pair;
using testing_support::ModelPair;
using testing_support::TempDir;

// 1 ms per layer whatever the rows, 0.5 ms of output: times a test can add up by hand.
CostProfile flat_profile(int n_layer) {
  CostProfile p;
  p.name = "flat";
  p.n_layer = n_layer;
  p.layer = {{1, 64}, {1.0, 1.0}};
  p.output = {{1, 64}, {0.5, 0.5}};
  p.hidden_bytes_per_row = 1000;
  p.logits_bytes_per_row = 4000;
  return p;
}

TEST(SimLink, DeliversAfterLatencyAndSizeOneMessageAfterAnother) {
  Link link(/*latency_us=*/100, /*gbps=*/8);  // 8 Gb/s: 1 byte per ns, 1e6 bytes per ms
  EXPECT_DOUBLE_EQ(link.deliver(0, 1'000'000), 1.0 + 0.1);
  // Sent while the first is still on the wire: waits for it.
  EXPECT_DOUBLE_EQ(link.deliver(0.5, 1'000'000), 2.0 + 0.1);
  // Sent when the wire is free again.
  EXPECT_DOUBLE_EQ(link.deliver(10, 0), 10.1);
  Link unlimited(25, 0);
  EXPECT_DOUBLE_EQ(unlimited.deliver(3, 1'000'000'000), 3.025);
}

TEST(SimHeadClock, PausesAndRunsParallelPiecesTogether) {
  HeadClock clock(0);  // the head's own wall time left out: only what is charged counts
  clock.advance_by(2);
  EXPECT_DOUBLE_EQ(clock.now_ms(), 2);
  clock.parallel_begin();
  clock.advance_by(3);
  clock.parallel_next();
  EXPECT_DOUBLE_EQ(clock.now_ms(), 2);  // the next piece starts with the section
  clock.advance_by(1);
  clock.parallel_end();
  EXPECT_DOUBLE_EQ(clock.now_ms(), 5);  // the slowest piece ends it
  clock.advance_to(4);
  EXPECT_DOUBLE_EQ(clock.now_ms(), 5);  // never backwards

  HeadClock wall(1);
  {
    HeadClock::Pause pause(wall);
    const Stopwatch spin_real;
    while (spin_real.elapsed_ms() < 50) {
    }
  }
  EXPECT_LT(wall.now_ms(), 50);  // 50 ms of real work, paused: not the head's time
}

TEST(SimPipeline, PipelinesForwardsAndBatchesThoseWaiting) {
  HeadClock clock(0);
  PipelineLayout layout;
  layout.layers_per_stage = {2, 2};
  SimPipeline p(clock, flat_profile(4), layout);
  // One forward alone: 2 ms on stage 1, 2 + 0.5 ms on stage 2.
  const int64_t a = p.submit(1, 1);
  p.wait(a);
  EXPECT_DOUBLE_EQ(clock.now_ms(), 4.5);
  // Two forwards 1 ms apart: the second waits for stage 1, then follows the first.
  const double t0 = clock.now_ms();
  const int64_t b = p.submit(1, 1);
  clock.advance_by(1);
  const int64_t c = p.submit(1, 1);
  EXPECT_FALSE(p.arrived(b));
  p.wait(b);
  EXPECT_DOUBLE_EQ(clock.now_ms(), t0 + 4.5);
  p.wait(c);
  EXPECT_DOUBLE_EQ(clock.now_ms(), t0 + 7);  // stage 2 runs c from 4.5 to 7 (c left stage 1 at 4)
  // Forwards waiting when stage 1 becomes free run as one batch (the flat profile prices it as
  // one row).
  const double t1 = clock.now_ms();
  const int64_t d = p.submit(1, 1);
  clock.advance_by(0.5);
  const int64_t e = p.submit(2, 2), f = p.submit(3, 3);
  p.wait(d);
  EXPECT_DOUBLE_EQ(clock.now_ms(), t1 + 4.5);
  p.wait(e);
  p.wait(f);
  EXPECT_DOUBLE_EQ(clock.now_ms(), t1 + 7);
  EXPECT_EQ(p.stages()[0].forwards, 6);
  EXPECT_DOUBLE_EQ(p.stages()[0].busy_ms, 5 * 2);
}

TEST(SimPipeline, CancelledForwardsAreSkippedOrStoppedBetweenLayers) {
  HeadClock clock(0);
  PipelineLayout layout;
  layout.layers_per_stage = {4, 4};
  layout.link_latency_us = 500;  // a cancel reaches a stage 0.5 ms after it is sent
  SimPipeline p(clock, flat_profile(8), layout);
  const int64_t a = p.submit(1, 1);  // reaches stage 1 at 0.5, would run there until 4.5
  clock.advance_by(1.2);
  p.cancel(a);  // reaches stage 1 at 1.7: it stops after its second layer, at 2.5
  const int64_t b = p.submit(1, 1);
  p.wait(b);
  // b reaches stage 1 at 1.7, starts at 2.5, 4 layers to 6.5, 0.5 ms on, 4.5 on stage 2, back at
  // 11.5 + 0.5.
  EXPECT_DOUBLE_EQ(clock.now_ms(), 12);
  EXPECT_EQ(p.stages()[0].abandoned, 1);
  EXPECT_EQ(p.stages()[1].skipped, 1);  // the stopped forward passes on as skipped
  EXPECT_DOUBLE_EQ(p.stages()[0].busy_ms, 2 + 4);
  // Cancelled before any stage starts it: skipped everywhere, no time spent.
  const int64_t c = p.submit(1, 1);
  p.cancel(c);
  p.drain();
  EXPECT_EQ(p.stages()[0].skipped, 1);
  EXPECT_DOUBLE_EQ(p.stages()[0].busy_ms, 6);
}

TEST(SimProfile, RowCostInterpolatesAndExtends) {
  const RowCost c{{1, 4, 8}, {1.0, 1.0, 3.0}};
  EXPECT_DOUBLE_EQ(c.at(1), 1.0);
  EXPECT_DOUBLE_EQ(c.at(6), 2.0);
  EXPECT_DOUBLE_EQ(c.at(12), 5.0);  // the last segment's slope
  EXPECT_DOUBLE_EQ(c.scaled(2).at(6), 4.0);
}

TEST(SimProfile, RooflineIsTheSlowerOfBytesAndFlops) {
  const ModelShape s = model_shape("llama-3.1-70b");
  // 80 layers of 64 heads of 128, 8 KV heads, n_ff 28672: 855.6M weights per layer.
  EXPECT_NEAR(s.layer_params(), 855.6e6, 0.1e6);
  const CostProfile p = roofline_profile(s, 1000, 100, 2);
  // One row: 1.711 GB at 1000 GB/s = 1.711 ms; 128 rows: 2 * 855.6M * 128 FLOPs at 100 TFLOPS.
  EXPECT_NEAR(p.layer.at(1), 1.711, 0.001);
  EXPECT_NEAR(p.layer.at(128), 2 * 855.6e6 * 128 / 100e12 * 1e3, 0.001);
  EXPECT_EQ(p.logits_bytes_per_row, 128256 * 4);
  EXPECT_THROW(model_shape("llama-9b"), Error);
}

TEST(SimProfile, ScalingMultipliesByWeightsAndFilesRoundTrip) {
  const ModelShape from = model_shape("llama-3.1-8b"), to = model_shape("llama-3.1-70b");
  const CostProfile measured = roofline_profile(from, 500, 50, 2);
  const CostProfile scaled = scale_profile(measured, from, to);
  EXPECT_EQ(scaled.n_layer, 80);
  EXPECT_NEAR(scaled.layer.at(1) / measured.layer.at(1), to.layer_params() / from.layer_params(),
              1e-9);
  TempDir dir;
  scaled.save(dir.file("p.json"));
  const CostProfile back = CostProfile::load(dir.file("p.json"));
  EXPECT_EQ(back.to_json(), scaled.to_json());
  nlohmann::json bad = scaled.to_json();
  bad["rows"] = {1, 1};
  EXPECT_THROW(CostProfile::from_json(bad), Error);
  EXPECT_THROW(CostProfile::load(dir.file("missing.json")), Error);
}

TEST(SimProfile, BalancedSplitKeepsTheOutputStageNoSlower) {
  CostProfile p = flat_profile(80);
  p.output = {{1}, {3.0}};  // the output costs three layers
  const std::vector<int> split = balanced_split(p, 14, "", 0);
  ASSERT_EQ(split.size(), 14u);
  int sum = 0, widest = 0;
  for (int n : split) {
    sum += n;
    widest = std::max(widest, n);
  }
  EXPECT_EQ(sum, 80);
  EXPECT_LE(split.back() + 3, widest + 1);
  EXPECT_EQ(balanced_split(p, 2, "30,50", 0), (std::vector<int>{30, 50}));
  EXPECT_THROW(balanced_split(p, 2, "30,40", 0), Error);
}

std::vector<std::vector<int32_t>> prompts(int n, int n_vocab) {
  std::mt19937 rng(17);
  std::vector<std::vector<int32_t>> out;
  for (int i = 0; i < n; ++i) {
    std::vector<int32_t> p(3 + i % 5);
    for (int32_t& t : p) t = static_cast<int32_t>(rng() % n_vocab);
    out.push_back(p);
  }
  return out;
}

// Every strategy the simulator runs, on clusters of 2 and 4 ranks with a
// link latency, produces ar's tokens: the simulation changes the time only.
TEST(SimulatedStrategies, GreedyOutputEqualsAutoregressiveDecoding) {
  TempDir dir;
  const ModelPair pair = make_model_pair(dir, "llama", DType::F32, DType::Q4_0, 300, 5);
  Worker worker(1);
  StrategyConfig base;
  base.target = pair.target;
  base.draft = pair.draft;
  base.target_worker = &worker;
  base.ctx_size = 128;
  auto ar = make_strategy(base);
  std::vector<StrategyConfig> variants;
  for (const StrategyConfig& c : testing_support::strategy_variants())
    if (strategy_info(c.name).simulation_refusal.empty()) variants.push_back(c);
  int64_t accepted = 0;
  for (const std::vector<int>& split : {std::vector<int>{2}, std::vector<int>{1, 1}}) {
    for (StrategyConfig c : variants) {
      c.target = base.target;
      c.draft = base.draft;
      c.target_worker = &worker;
      c.ctx_size = base.ctx_size;
      ClusterSpec spec;
      spec.target = flat_profile(2);
      spec.draft = flat_profile(2);
      spec.draft.layer = {{1}, {0.1}};
      spec.pipeline.layers_per_stage = split;
      spec.pipeline.link_latency_us = 50;
      spec.head_time_scale = 0;
      SimCluster cluster(spec);
      cluster.attach(c);
      auto strategy = make_strategy(c);
      ScopedThreadClock virtual_time(&cluster.clock());
      double first_run_ms = -1;
      for (const auto& prompt : prompts(4, 300)) {
        GenerationRequest req;
        req.prompt = prompt;
        req.n_predict = 20;
        req.sampling.temp = 0;
        const std::vector<int32_t> expected = ar->generate(req).tokens;
        const GenerationResult got = strategy->generate(req);
        ASSERT_EQ(got.tokens, expected)
            << testing_support::describe(c) << " on " << split.size() << " stages";
        accepted += got.stats.accepted;
        // Without the head's wall time the clock is the model's alone: the same run, the same time.
        if (first_run_ms < 0) {
          first_run_ms = got.stats.t_gen_ms;
          EXPECT_NEAR(strategy->generate(req).stats.t_gen_ms, first_run_ms, 1e-9)
              << testing_support::describe(c);
          // Nothing runs faster than the pipeline's latency for one token per step of ar.
          EXPECT_GT(got.stats.t_gen_ms, 0);
        }
      }
    }
  }
  EXPECT_GT(accepted, 0);
}

// PipeDec keeps every stage busy with tree levels, so on a deep pipeline with
// a slow link it beats plain pipeline parallelism in simulated time; pp's
// time per token is the pipeline's latency, which the test adds up by hand.
TEST(SimulatedStrategies, PipedecOutrunsPlainPipelineOnADeepPipeline) {
  TempDir dir;
  const ModelPair pair = make_model_pair(dir, "llama", DType::F32, DType::Q8_0, 300, 5);
  Worker worker(1);
  auto run = [&](const std::string& name) {
    StrategyConfig c;
    c.name = name;
    c.target = pair.target;
    c.draft = pair.draft;
    c.target_worker = &worker;
    c.ctx_size = 128;
    c.tree_depth = 4;
    c.tree_width = 4;
    c.tree_branch = 2;
    ClusterSpec spec;
    spec.target = flat_profile(2);
    spec.draft = flat_profile(2);
    spec.draft.layer = {{1}, {0.05}};
    spec.draft.output = {{1}, {0.05}};
    spec.pipeline.layers_per_stage = {1, 1};
    spec.pipeline.link_latency_us = 1000;
    spec.head_time_scale = 0;
    SimCluster cluster(spec);
    cluster.attach(c);
    auto strategy = make_strategy(c);
    ScopedThreadClock virtual_time(&cluster.clock());
    GenerationRequest req;
    req.prompt = {5, 6, 7};
    req.n_predict = 24;
    req.sampling.temp = 0;
    return strategy->generate(req);
  };
  const GenerationResult pp = run("pp"), pipedec = run("pipedec");
  ASSERT_EQ(pp.tokens, pipedec.tokens);
  // pp: every token after the first (the prefill's) crosses 3 links (1 ms each) and 2 layers
  // plus the output: 5.5 ms.
  EXPECT_NEAR(pp.stats.t_gen_ms / (pp.stats.n_gen - 1), 5.5, 1e-9);
  EXPECT_LT(pipedec.stats.t_gen_ms, pp.stats.t_gen_ms);
}

}  // namespace
}  // namespace parspec::sim
