// The cost model's predictions on hand-made measurements, the tuning cache
// (round trip, invalidation when a model file changes), and `auto` falling
// back to ar when drafting cannot pay.
#include <fcntl.h>
#include <gtest/gtest.h>
#include <sys/stat.h>

#include <cstdlib>
#include <fstream>
#include <optional>

#include "core/error.h"
#include "decode/cost_model.h"
#include "decode/strategies.h"
#include "decode/tuning.h"
#include "test_helpers.h"

namespace parspec {
namespace {

using testing_support::TempDir;
using testing_support::write_model;

// L(n) = 10 + (n - 1) ms, draft 2 ms a token, P(first k accepted) = 0.8, 0.6, 0.4, 0.2.
CostMeasurements hand_made(bool parallel) {
  CostMeasurements m;
  m.target_ms = {10, 11, 12, 13, 14};
  m.draft_ms = 2;
  m.accept_prefix = {0.8, 0.6, 0.4, 0.2};
  m.parallel = parallel;
  return m;
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
  base.adaptive = true;
  const StrategyConfig sd = config_for_candidate(base, {"sd", 3});
  EXPECT_EQ(sd.name, "sd");
  EXPECT_EQ(sd.draft_max, 3);
  EXPECT_FALSE(sd.adaptive);
  const StrategyConfig pearl = config_for_candidate(base, {"pearl", 5});
  EXPECT_EQ(pearl.name, "pearl");
  EXPECT_EQ(pearl.pearl_window, 5);
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
  EXPECT_EQ(chosen_strategy(*strategy), "ar");
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
  EXPECT_EQ(chosen_strategy(*make_strategy(c)), "ar");
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
  EXPECT_EQ(chosen_strategy(*make_strategy(c)), "ar");
}

}  // namespace
}  // namespace parspec
