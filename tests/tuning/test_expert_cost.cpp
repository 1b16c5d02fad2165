// The cost model on a mixture-of-experts target: the cost of an expert fitted
// from timed forwards, the experts a real verification touches, verifications
// priced by them, and a real calibration of a small MoE pair.
#include <gtest/gtest.h>

#include <cmath>

#include "core/error.h"
#include "decode/strategy.h"
#include "test_helpers.h"
#include "tuning/cost_model.h"
#include "tuning/tuning.h"

namespace parspec {
namespace {

using testing_support::TempDir;

// Distinct experts of n tokens routed independently, 2 of 8 each.
double independent_experts(int n) {
  return 8.0 * (1.0 - std::pow(0.75, n));
}

TEST(ExpertCost, FitsTheCostOfAnExpertBesideTheCostOfARow) {
  std::vector<double> ms, experts;
  for (int n = 1; n <= 12; ++n) {
    experts.push_back(independent_experts(n));
    ms.push_back(3.0 + 0.25 * n + 1.5 * experts.back());
  }
  EXPECT_NEAR(fit_expert_ms(ms, experts), 1.5, 1e-9);
  // Experts that do not vary (or too few sizes) say nothing about their cost.
  EXPECT_EQ(fit_expert_ms(ms, std::vector<double>(12, 2.0)), 0.0);
  EXPECT_EQ(fit_expert_ms({1, 2}, {2, 3}), 0.0);
  // Never negative: more experts never make a forward cheaper.
  for (double& m : ms) m = 10.0 - 0.5 * m;
  EXPECT_EQ(fit_expert_ms(ms, experts), 0.0);
}

TEST(ExpertCost, RealVerificationsTouchExpertsByTheFittedOverlap) {
  CostMeasurements m;
  m.n_expert = 8;
  m.n_expert_used = 2;
  // Independent routing is overlap 0.75: the model reproduces it at every n.
  m.expert_overlap = fit_expert_overlap(8, 2, 5, independent_experts(5));
  EXPECT_NEAR(m.expert_overlap, 0.75, 1e-12);
  for (int n = 1; n <= 10; ++n) EXPECT_NEAR(verify_experts(m, n), independent_experts(n), 1e-9);
  // Text whose tokens share their experts: fewer than independent, at least k.
  m.expert_overlap = fit_expert_overlap(8, 2, 5, 3.0);
  EXPECT_NEAR(verify_experts(m, 5), 3.0, 1e-9);
  EXPECT_EQ(verify_experts(m, 1), 2.0);
  EXPECT_GT(verify_experts(m, 9), 3.0);
  EXPECT_EQ(fit_expert_overlap(8, 2, 5, 2.0), 1.0);  // every token the same two experts
  EXPECT_EQ(fit_expert_overlap(8, 2, 5, 8.0), 0.0);  // every expert by the second token
  CostMeasurements dense;
  EXPECT_EQ(verify_experts(dense, 4), 0.0);
}

TEST(ExpertCost, VerificationsArePricedAtTheirRealExperts) {
  CostMeasurements m;
  m.target_ms = {10, 14, 16, 17};
  m.draft_ms = 1;
  m.accept_prefix = {0.9, 0.8, 0.7};
  const double dense_sd3 = predict(m, {"sd", 3, 0, 0, 0}).ms_per_step;
  EXPECT_EQ(verification_ms(m, 4), 17.0);  // dense: L(n) as timed

  // The timed forwards touched 2, 4, 6, 8 experts; real text touches fewer.
  m.n_expert = 8;
  m.n_expert_used = 2;
  m.target_experts = {2, 4, 6, 8};
  m.expert_ms = 1.5;
  m.expert_overlap = fit_expert_overlap(8, 2, 4, 5.0);
  EXPECT_EQ(verification_ms(m, 1), 10.0);
  EXPECT_NEAR(verification_ms(m, 4), 17.0 - 1.5 * 3.0, 1e-9);
  EXPECT_NEAR(predict(m, {"sd", 3, 0, 0, 0}).ms_per_step, dense_sd3 - 4.5, 1e-9);
  EXPECT_THROW(verification_ms(m, 5), Error);
}

TEST(ExpertCost, CalibrationOfAMixtureOfExpertsPairMeasuresItsExperts) {
  TempDir dir;
  const auto pair =
      testing_support::make_model_pair(dir, "mixtral", DType::F32, DType::Q8_0, 300, 11);
  Worker target_worker(1), draft_worker(1);
  const StrategyConfig config =
      testing_support::pair_config(pair, target_worker, draft_worker, 256);
  CalibrationOptions options;
  options.n_predict = 16;
  options.max_gamma = 4;
  options.trees = false;
  options.timing_runs = 2;
  options.parallel_window = 0;
  const CostMeasurements m = measure_costs(config, calibration_prompts(*config.target), options);
  EXPECT_EQ(m.n_expert, 4);
  EXPECT_EQ(m.n_expert_used, 2);
  ASSERT_EQ(m.target_experts.size(), m.target_ms.size());
  EXPECT_EQ(m.target_experts[0], 2.0);  // one token: its own two
  for (double e : m.target_experts) {
    EXPECT_GE(e, 2.0);
    EXPECT_LE(e, 4.0);
  }
  EXPECT_GT(m.target_experts.back(), 2.0);
  EXPECT_GE(m.expert_ms, 0.0);
  EXPECT_GE(m.expert_overlap, 0.0);
  EXPECT_LE(m.expert_overlap, 1.0);
  EXPECT_GE(verify_experts(m, 5), 2.0);

  // The tuning cache keeps them.
  const std::string cache = dir.file("cache");
  const TuneKey key{file_identity(dir.file("mixtral-target.gguf")),
                    file_identity(dir.file("mixtral-draft.gguf")), "cpu", 1, 1};
  store_tuning(cache, key, m);
  const auto back = load_tuning(cache, key);
  ASSERT_TRUE(back.has_value());
  EXPECT_EQ(back->target_experts, m.target_experts);
  EXPECT_EQ(back->expert_ms, m.expert_ms);
  EXPECT_EQ(back->expert_overlap, m.expert_overlap);
  EXPECT_EQ(back->n_expert, 4);
}

}  // namespace
}  // namespace parspec
