// GenerationStats: sums of several generations and the JSON every output shares.
#include <gtest/gtest.h>

#include "decode/generation_stats.h"

namespace parspec {
namespace {

GenerationStats sample(int64_t n_gen, double t_gen_ms) {
  GenerationStats s;
  s.n_prompt = 10;
  s.n_gen = n_gen;
  s.t_prompt_ms = 4;
  s.t_gen_ms = t_gen_ms;
  s.verify_steps = n_gen / 2;
  s.target_forwards = n_gen / 2 + 1;
  s.draft_forwards = n_gen;
  s.t_draft_ms = 1.5;
  s.t_verify_ms = 2.5;
  return s;
}

TEST(GenerationStats, SumAddsCountsTimesAndPositions) {
  GenerationStats a = sample(20, 100);
  a.observe_step(3, 2, 3);
  GenerationStats b = sample(30, 50);
  b.observe_step(4, 4, 4);
  b.observe_step(1, 0, 1);
  a += b;
  EXPECT_EQ(a.n_prompt, 20);
  EXPECT_EQ(a.n_gen, 50);
  EXPECT_DOUBLE_EQ(a.t_prompt_ms, 8);
  EXPECT_DOUBLE_EQ(a.t_gen_ms, 150);
  EXPECT_EQ(a.verify_steps, 25);
  EXPECT_EQ(a.target_forwards, 27);
  EXPECT_EQ(a.draft_forwards, 50);
  EXPECT_DOUBLE_EQ(a.t_draft_ms, 3);
  EXPECT_DOUBLE_EQ(a.t_verify_ms, 5);
  EXPECT_EQ(a.drafted, 8);
  EXPECT_EQ(a.accepted, 6);
  // Positions summed, the shorter list extended with zeros.
  EXPECT_EQ(a.per_position.proposed, (std::vector<int64_t>{3, 2, 2, 1}));
  EXPECT_EQ(a.per_position.accepted, (std::vector<int64_t>{2, 2, 1, 1}));
  EXPECT_DOUBLE_EQ(a.tok_per_s(), 50 * 1000.0 / 150);
  EXPECT_DOUBLE_EQ(a.alpha(), 6.0 / 8);
  EXPECT_DOUBLE_EQ(a.tau(), 50.0 / 25);
}

TEST(GenerationStats, SumMergesDrafterUseByNameAndKeepsTheLaterState) {
  GenerationStats a, b;
  a.draft_window = 3;
  a.drafter_use = {{"d0", 5, 2, 0.25}, {"d1", 1, 0, 0.5}};
  b.drafter_use = {{"d1", 4, 3, 0.75}, {"d2", 2, 1, 0.125}};
  a += b;
  EXPECT_EQ(a.draft_window, 3);  // b ran without a window
  ASSERT_EQ(a.drafter_use.size(), 3u);
  EXPECT_EQ(a.drafter_use[0].name, "d0");
  EXPECT_EQ(a.drafter_use[0].routed_steps, 5);
  EXPECT_EQ(a.drafter_use[1].name, "d1");
  EXPECT_EQ(a.drafter_use[1].routed_steps, 5);
  EXPECT_EQ(a.drafter_use[1].fused_tokens, 3);
  EXPECT_DOUBLE_EQ(a.drafter_use[1].score, 0.75);
  EXPECT_EQ(a.drafter_use[2].name, "d2");
  GenerationStats c;
  c.draft_window = 5;
  a += c;
  EXPECT_EQ(a.draft_window, 5);
}

TEST(GenerationStats, JsonNamesTheMetrics) {
  GenerationStats s = sample(20, 100);
  s.observe_step(4, 3, 4);
  s.draft_window = 4;
  const nlohmann::json j = s.to_json();
  EXPECT_EQ(j.size(), 16u);
  EXPECT_EQ(j["n_prompt"], 10);
  EXPECT_EQ(j["n_gen"], 20);
  EXPECT_EQ(j["t_prompt_ms"], 4.0);
  EXPECT_EQ(j["t_gen_ms"], 100.0);
  EXPECT_EQ(j["tok_per_s"], 200.0);
  EXPECT_EQ(j["prompt_tok_per_s"], 2500.0);
  EXPECT_EQ(j["drafted"], 4);
  EXPECT_EQ(j["accepted"], 3);
  EXPECT_EQ(j["tau"], 2.0);
  EXPECT_EQ(j["alpha"], 0.75);
  EXPECT_EQ(j["verify_steps"], 10);
  EXPECT_EQ(j["target_forwards"], 11);
  EXPECT_EQ(j["draft_forwards"], 20);
  EXPECT_EQ(j["t_draft_ms"], 1.5);
  EXPECT_EQ(j["t_verify_ms"], 2.5);
  EXPECT_EQ(j["draft_window"], 4);
  // Nothing divides by zero before a generation ran.
  const nlohmann::json empty = GenerationStats{}.to_json();
  EXPECT_EQ(empty["tok_per_s"], 0.0);
  EXPECT_EQ(empty["prompt_tok_per_s"], 0.0);
  EXPECT_EQ(empty["alpha"], 0.0);
  EXPECT_EQ(empty["tau"], 0.0);
}

}  // namespace
}  // namespace parspec
