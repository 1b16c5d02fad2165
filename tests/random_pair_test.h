#pragma once
// A fixture for the tests of one strategy on a random model pair: a target
// (F32) and a Q4_0 draft made from the same seed, one worker, a short
// context, and `ar`'s output on them as the reference.
#include <gtest/gtest.h>

#include <cstdint>
#include <string>
#include <vector>

#include "decode/strategy.h"
#include "test_helpers.h"

namespace parspec::testing_support {

// Short prompts of the random models' byte tokens, after BOS (256).
inline std::vector<int32_t> short_prompt(int i) {
  std::vector<int32_t> p = {256};
  for (int j = 0; j <= i % 5; ++j) p.push_back((i * 37 + j * 11 + 5) % 256);
  return p;
}

// A sampled request (short_prompt(1), seed 99) gives the same tokens twice.
inline void expect_seed_repeats(Strategy& strategy, const std::string& label = "") {
  GenerationRequest req;
  req.prompt = short_prompt(1);
  req.n_predict = 24;
  req.sampling.temp = 1.0f;
  req.sampling.seed = 99;
  const std::vector<int32_t> first = strategy.generate(req).tokens;
  EXPECT_EQ(strategy.generate(req).tokens, first) << label;
}

class RandomPairStrategyTest : public ::testing::Test {
 protected:
  void SetUp() override {
    pair_ = make_model_pair(dir_, "llama", DType::F32, DType::Q4_0, 300, 11);
    base_.target = pair_.target;
    base_.draft = pair_.draft;
    base_.target_worker = &target_worker_;
    base_.ctx_size = 128;
  }
  // What `ar` emits for `req` with `config`'s models and context (base_'s by default).
  std::vector<int32_t> ar_tokens(const GenerationRequest& req) { return ar_tokens(req, base_); }
  std::vector<int32_t> ar_tokens(const GenerationRequest& req, StrategyConfig config) {
    config.name = "ar";
    return make_strategy(config)->generate(req).tokens;
  }

  TempDir dir_;
  ModelPair pair_;
  Worker target_worker_{1};
  StrategyConfig base_;
};

}  // namespace parspec::testing_support
