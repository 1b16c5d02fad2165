// Losslessness of every strategy against `ar` on the same models:
// greedy output token ids are identical; sampled output has the same
// distribution (two-sample chi-square over thousands of seeded runs), and a
// lossy verifier is caught by the same test.
#include <gtest/gtest.h>

#include <filesystem>
#include <map>
#include <set>
#include <sstream>
#include <variant>

#include "core/error.h"
#include "decode/strategy.h"
#include "model/model.h"
#include "sampling_exactness.h"
#include "strategies/ppd/ppd_prompts.h"
#include "strategy_variants.h"
#include "test_helpers.h"

namespace parspec {
namespace {

using testing_support::describe;
using testing_support::make_model_pair;
using testing_support::ModelPair;
using testing_support::pair_config;
using testing_support::random_ppd_file;
using testing_support::same_distribution;
using testing_support::sample_histograms;
using testing_support::strategy_variants;
using testing_support::TempDir;
using testing_support::untruncated_sampling;

std::vector<std::vector<int32_t>> prompts(int n, int n_vocab) {
  std::vector<std::vector<int32_t>> out;
  for (int i = 0; i < n; ++i) {
    std::vector<int32_t> p = {256};  // BOS of the byte-level vocabulary
    for (int j = 0; j <= i % 7; ++j) p.push_back((i * 31 + j * 17 + 3) % 256);
    out.push_back(p);
  }
  return out;
}

// Adding a strategy is one file plus one row above: a registered strategy
// without a row would escape every exactness test.
TEST(StrategyVariants, CoverEveryRegisteredStrategy) {
  std::set<std::string> covered = {"ar"};  // the reference
  for (const StrategyConfig& c : strategy_variants()) covered.insert(c.name);
  for (const std::string& name : strategy_names())
    EXPECT_TRUE(covered.count(name)) << name << " has no row in strategy_variants()";
}

class GreedyExactness : public ::testing::TestWithParam<std::string> {};

TEST_P(GreedyExactness, EveryStrategyReproducesAutoregressiveDecoding) {
  TempDir dir;
  const std::string arch = GetParam();
  const ModelPair pair =
      make_model_pair(dir, arch, arch == "llama" ? DType::F32 : DType::F16, DType::Q4_0, 300, 5);
  // The test's sequences (up to 32 tokens) outgrow a sliding window.
  ASSERT_LT(pair.target->config().sliding_window, 32);
  Worker worker(1);
  StrategyConfig base;
  base.target = pair.target;
  base.draft = pair.draft;
  base.target_worker = &worker;
  base.ctx_size = 128;
  base.name = "ar";
  auto ar = make_strategy(base);
  int64_t total_accepted = 0, total_drafted = 0;
  for (const auto& prompt : prompts(20, 300)) {
    GenerationRequest req;
    req.prompt = prompt;
    req.n_predict = 24;
    req.sampling.temp = 0;
    const std::vector<int32_t> expected = ar->generate(req).tokens;
    ASSERT_EQ(expected.size(), 24u);
    for (StrategyConfig c : strategy_variants()) {
      c.target = base.target;
      c.draft = base.draft;
      c.target_worker = &worker;
      c.ctx_size = base.ctx_size;
      // EasySpec's one fuzzy group spans all the draft's layers (six for gemma3).
      if (c.options.count("lp_groups"))
        c.options["lp_groups"] = "0-" + std::to_string(pair.draft->config().n_layer - 1);
      auto strategy = make_strategy(c);
      const GenerationResult got = strategy->generate(req);
      ASSERT_EQ(got.tokens, expected) << describe(c);
      EXPECT_EQ(got.stats.n_gen, 24);
      EXPECT_LE(got.stats.accepted, got.stats.drafted);
      EXPECT_GE(got.stats.tau(), 1.0);
      total_accepted += got.stats.accepted;
      total_drafted += got.stats.drafted;
    }
  }
  // The pair is a meaningful test only if drafts are both accepted and rejected.
  EXPECT_GT(total_accepted, 0);
  EXPECT_LT(total_accepted, total_drafted);
}

INSTANTIATE_TEST_SUITE_P(Models, GreedyExactness,
                         ::testing::ValuesIn(testing_support::family_names()),
                         [](const auto& test_case) { return test_case.param; });

// With a drafter as large as the target and unrelated to it, a drafted step
// costs several plain steps and emits about one token: the guard soon takes
// plain steps (drafting again only now and then, to check), and the text is ar's.
// The models are wide enough that a forward takes milliseconds, far above
// the timing noise of a loaded machine.
// A drafter as large as the target and unrelated to it, both wide enough
// that a forward takes milliseconds, far above the timing noise of a loaded
// machine.
ModelPair costly_pair(TempDir& dir) {
  RandomModelSpec spec = testing_support::family_spec("llama");
  spec.n_vocab = 300;
  spec.n_embd = 512;
  spec.n_ff = 1536;
  spec.n_layer = 4;
  spec.weight_type = DType::F32;
  spec.seed = 5;
  ModelPair pair;
  pair.target = Model::load(testing_support::write_model(dir, "target.gguf", spec));
  spec.seed = 6;
  pair.draft = Model::load(testing_support::write_model(dir, "draft.gguf", spec));
  return pair;
}

TEST(SpeculationGuard, TakesPlainStepsWhereDraftingDoesNotPay) {
  TempDir dir;
  const ModelPair pair = costly_pair(dir);
  Worker worker(1), draft_worker(1);
  StrategyConfig c = pair_config(pair, worker, draft_worker, 320);
  c.name = "sd";
  c.draft_max = 4;
  GenerationRequest req;
  req.prompt = {256, 72, 101};
  req.n_predict = 256;  // the guard's first plain steps come after 16 and 32 steps
  req.sampling.temp = 0;
  const GenerationResult unguarded = make_strategy(c)->generate(req);
  c.options["speculation_guard"] = true;
  const GenerationResult guarded = make_strategy(c)->generate(req);
  StrategyConfig ar = c;
  ar.name = "ar";
  EXPECT_EQ(guarded.tokens, make_strategy(ar)->generate(req).tokens);
  EXPECT_EQ(guarded.tokens, unguarded.tokens);
  ASSERT_GT(unguarded.stats.drafted, 0);
  EXPECT_LT(guarded.stats.drafted * 3, unguarded.stats.drafted)
      << "guarded drafted " << guarded.stats.drafted << ", unguarded " << unguarded.stats.drafted;
}

// After a long prompt the guard times plain steps within its first few steps
// (the choice of auto was made on short contexts, and a long one can make
// verification dear): with the same costly drafter it drafts far less over a
// short generation than with no guard, where after a short prompt it would
// not take a plain step before its 16th.
TEST(SpeculationGuard, AfterALongPromptChecksAtOnce) {
  TempDir dir;
  const ModelPair pair = costly_pair(dir);
  Worker worker(1), draft_worker(1);
  StrategyConfig c = pair_config(pair, worker, draft_worker, 640);
  c.name = "sd";
  c.draft_max = 4;
  GenerationRequest req;
  req.prompt = {256};
  while (req.prompt.size() < 520) req.prompt.push_back(32 + (req.prompt.size() * 7) % 90);
  req.n_predict = 32;
  req.sampling.temp = 0;
  const GenerationResult unguarded = make_strategy(c)->generate(req);
  c.options["speculation_guard"] = true;
  const GenerationResult guarded = make_strategy(c)->generate(req);
  EXPECT_EQ(guarded.tokens, unguarded.tokens);
  ASSERT_GT(unguarded.stats.drafted, 0);
  EXPECT_LT(guarded.stats.drafted * 2, unguarded.stats.drafted)
      << "guarded drafted " << guarded.stats.drafted << ", unguarded " << unguarded.stats.drafted;
}

TEST(GreedyExactness, StopsAtStopTokensAndLimits) {
  TempDir dir;
  const ModelPair pair = make_model_pair(dir, "llama", DType::F32, DType::Q8_0, 300, 9);
  Worker worker(1);
  StrategyConfig c;
  c.target = pair.target;
  c.draft = pair.draft;
  c.target_worker = &worker;
  c.ctx_size = 64;
  c.name = "ar";
  GenerationRequest req;
  req.prompt = {256, 65};
  req.n_predict = 10;
  req.sampling.temp = 0;
  const auto full = make_strategy(c)->generate(req).tokens;
  const int32_t stop = full[3];
  req.is_stop = [stop](int32_t t) { return t == stop; };
  c.options["pearl_window"] = 3;
  for (const char* name : {"ar", "sd", "tree", "dyntree", "pearl", "pp", "stpp", "pipedec"}) {
    c.name = name;
    std::vector<int32_t> streamed;
    req.on_token = [&](int32_t t) { streamed.push_back(t); };
    const auto got = make_strategy(c)->generate(req).tokens;
    const auto end = std::find(full.begin(), full.end(), stop) + 1;
    EXPECT_EQ(got, std::vector<int32_t>(full.begin(), end)) << name;
    EXPECT_EQ(streamed, got) << name;
  }
  c.name = "sd";
  req.prompt = std::vector<int32_t>(60, 65);
  EXPECT_THROW(make_strategy(c)->generate(req), Error);  // exceeds the context
}

TEST(SamplingExactness, EveryStrategyMatchesTheTargetDistribution) {
  TempDir dir;
  // A small vocabulary keeps the histograms dense enough for the test.
  const ModelPair pair = make_model_pair(dir, "llama", DType::F32, DType::Q4_0, 260, 3);
  Worker worker(1);
  const SamplingParams params = untruncated_sampling(1.5f);
  constexpr int kRuns = 2500;
  const StrategyConfig base = pair_config(pair, worker, worker, 64);  // ar
  const auto reference =
      testing_support::expect_every_strategy_keeps_the_distribution(base, kRuns, params);
  // Filters (top-k, top-p, min-p) apply to both distributions alike.
  SamplingParams filtered = params;
  filtered.top_k = 20;
  filtered.top_p = 0.9f;
  filtered.min_p = 0.02f;
  const auto filtered_reference = sample_histograms(base, kRuns, filtered);
  StrategyConfig sd = base;
  sd.name = "sd";
  std::string why;
  EXPECT_TRUE(same_distribution(sample_histograms(sd, kRuns, filtered), filtered_reference, &why))
      << why;

  // Negative control: typical acceptance is lossy, and the test must see it.
  // An unrelated drafter makes its bias plain (it accepts the draft's picks).
  TempDir other_dir;
  const ModelPair unrelated = make_model_pair(other_dir, "llama", DType::F32, DType::F32, 260, 4);
  StrategyConfig lossy = base;
  lossy.draft = unrelated.target;
  lossy.name = "tree";
  lossy.tree_branch = 3;
  lossy.tree_depth = 2;
  lossy.lossy_typical = true;
  EXPECT_FALSE(same_distribution(sample_histograms(lossy, kRuns, params), reference, &why))
      << "a lossy verifier passed the exactness test";
  // ... and so is ppd's: its candidates come from the prompt tokens'
  // distributions, which typical acceptance takes as if they were the target's.
  StrategyConfig lossy_ppd = base;
  lossy_ppd.name = "ppd";
  lossy_ppd.options["ppd"] = random_ppd_file(1);
  lossy_ppd.options["ppd_budget"] = 16;
  lossy_ppd.lossy_typical = true;
  EXPECT_FALSE(same_distribution(sample_histograms(lossy_ppd, kRuns, params), reference, &why))
      << "ppd with typical acceptance passed the exactness test";
}

}  // namespace
}  // namespace parspec
