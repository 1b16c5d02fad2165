// PPD on the drafter (strategies/ppd/ppd_drafter.h): `sd --draft-ppd FILE` proposes
// exactly the drafts of plain `sd` (greedy and sampled), so its output is
// plain sd's and ar's; with the zoo drafter's trained prompt tokens it runs
// fewer drafter forwards than plain sd; prompt tokens of another width are
// refused with an error; at the Drafter level it shows a plain drafter's cells
// and bit-identical logits.
#include <gtest/gtest.h>

#include <filesystem>

#include "core/error.h"
#include "core/worker.h"
#include "decode/local_model.h"
#include "decode/strategy.h"
#include "model/model.h"
#include "sample/sampler.h"
#include "strategies/ppd/ppd_drafter.h"
#include "strategies/ppd/ppd_prompts.h"
#include "test_helpers.h"

namespace parspec {
namespace {

using testing_support::make_model_pair;
using testing_support::ModelPair;
using testing_support::TempDir;

struct Runs {
  GenerationResult ar, sd, sd_ppd;
};

Runs run_all(StrategyConfig c, const std::string& side_file, const GenerationRequest& req) {
  Runs r;
  c.name = "ar";
  r.ar = make_strategy(c)->generate(req);
  c.name = "sd";
  r.sd = make_strategy(c)->generate(req);
  c.options["draft_ppd"] = side_file;
  r.sd_ppd = make_strategy(c)->generate(req);
  return r;
}

GenerationRequest request(std::vector<int32_t> prompt, int n, float temp, uint64_t seed) {
  GenerationRequest req;
  req.prompt = std::move(prompt);
  req.n_predict = n;
  req.sampling.temp = temp;
  req.sampling.seed = seed;
  return req;
}

TEST(PpdDrafter, RandomPromptTokensGiveSdsOutputGreedyAndSampled) {
  TempDir dir;
  const ModelPair pair = make_model_pair(dir, "llama", DType::F32, DType::F32, 300, 7);
  write_random_ppd_prompts(dir.file("d.ppd.gguf"), pair.draft->config().n_embd, 3, 2, 9);
  Worker worker(1);
  StrategyConfig c;
  c.target = pair.target;
  c.draft = pair.draft;
  c.target_worker = &worker;
  c.ctx_size = 256;
  for (int gamma : {1, 3, 6}) {
    c.draft_max = gamma;
    const Runs greedy = run_all(c, dir.file("d.ppd.gguf"), request({1, 5, 9, 13}, 40, 0, 1));
    EXPECT_EQ(greedy.sd_ppd.tokens, greedy.ar.tokens) << "γ " << gamma;
    EXPECT_EQ(greedy.sd_ppd.tokens, greedy.sd.tokens) << "γ " << gamma;
    EXPECT_EQ(greedy.sd_ppd.stats.drafted, greedy.sd.stats.drafted) << "γ " << gamma;
    EXPECT_EQ(greedy.sd_ppd.stats.accepted, greedy.sd.stats.accepted) << "γ " << gamma;
    EXPECT_LE(greedy.sd_ppd.stats.draft_forwards, greedy.sd.stats.draft_forwards);
    const Runs sampled = run_all(c, dir.file("d.ppd.gguf"), request({3, 1, 4, 1}, 40, 0.9f, 42));
    EXPECT_EQ(sampled.sd_ppd.tokens, sampled.sd.tokens) << "γ " << gamma;
    EXPECT_EQ(sampled.sd_ppd.stats.accepted, sampled.sd.stats.accepted) << "γ " << gamma;
  }
}

TEST(PpdDrafter, PromptTokensOfAnotherWidthAreRefused) {
  TempDir dir;
  const ModelPair pair = make_model_pair(dir, "llama", DType::F32, DType::F32, 300, 8);
  write_random_ppd_prompts(dir.file("wide.ppd.gguf"), pair.draft->config().n_embd + 32, 3, 1, 1);
  Worker worker(1);
  StrategyConfig c;
  c.name = "sd";
  c.target = pair.target;
  c.draft = pair.draft;
  c.target_worker = &worker;
  c.options["draft_ppd"] = dir.file("wide.ppd.gguf");
  try {
    make_strategy(c);
    FAIL() << "prompt tokens of another width were accepted";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("wide"), std::string::npos) << e.what();
  }
  c.options["draft_ppd"] = dir.file("missing.ppd.gguf");
  EXPECT_THROW(make_strategy(c), Error);
}

TEST(PpdDrafter, ZooDraftersPromptTokensSaveDrafterForwards) {
  const std::string models = std::string(PARSPEC_SOURCE_DIR) + "/models/";
  const std::string side = models + "draft.ppd.gguf";
  ASSERT_TRUE(std::filesystem::exists(side)) << "the bundled models/draft.ppd.gguf is missing";
  Worker worker(1);
  StrategyConfig c;
  c.target = Model::load(models + "target.gguf");
  c.draft = Model::load(models + "draft.gguf");
  c.target_worker = &worker;
  c.ctx_size = 256;
  c.draft_max = 4;
  // Token ids with repeated structure (the tokenizer is not needed for this).
  const std::vector<std::vector<int32_t>> prompts = {{2046, 100, 101, 102, 32, 109, 97, 105, 110},
                                                     {2046, 81, 58, 32, 51, 32, 43, 32, 52}};
  int64_t plain_forwards = 0, ppd_forwards = 0;
  for (const auto& prompt : prompts) {
    const Runs r = run_all(c, side, request(prompt, 48, 0, 1));
    EXPECT_EQ(r.sd_ppd.tokens, r.ar.tokens);
    EXPECT_EQ(r.sd_ppd.tokens, r.sd.tokens);
    plain_forwards += r.sd.stats.draft_forwards;
    ppd_forwards += r.sd_ppd.stats.draft_forwards;
    // Sampled: the same draft distributions, so the same random draws.
    const Runs s = run_all(c, side, request(prompt, 48, 0.8f, 5));
    EXPECT_EQ(s.sd_ppd.tokens, s.sd.tokens);
  }
  EXPECT_LT(ppd_forwards, plain_forwards) << "no guess of the trained prompt tokens was taken";
}

TEST(PpdDrafter, ShowsAPlainDraftersCellsAndLogitsWhileTakingGuesses) {
  // Drafter-level: the same calls on a ModelDrafter and a PpdDrafter of the
  // zoo drafter give bit-identical logits and the same cell counts, and some
  // proposals are answered from guesses.
  const std::string models = std::string(PARSPEC_SOURCE_DIR) + "/models/";
  const auto draft = Model::load(models + "draft.gguf");
  Worker worker(1);
  ModelDrafter plain(draft, worker);
  PpdDrafter ppd(draft, worker, PpdPrompts::load(models + "draft.ppd.gguf"));
  std::vector<int32_t> seq = {2046, 100, 101, 102, 32, 109, 97, 105, 110, 40, 41, 58, 10};
  plain.begin(256);
  ppd.begin(256);
  const int V = plain.n_vocab();
  for (int round = 0; round < 12; ++round) {
    int32_t n_plain = 0, n_ppd = 0;
    std::vector<float> a = plain.catch_up(seq, &n_plain);
    std::vector<float> b = ppd.catch_up(seq, &n_ppd);
    ASSERT_EQ(a, b);
    ASSERT_EQ(n_plain, n_ppd);
    const int32_t base = plain.n_seen() + n_plain - 1;
    for (int i = 0; i < 5; ++i) {  // a chain of 5 greedy drafts, one node per call
      const int32_t token = argmax(a.data(), V);
      Batch next;
      next.add(token, base + 1 + i, n_plain - 1 + i, true);
      a = plain.propose(next);
      b = ppd.propose(next);
      ASSERT_EQ(a, b) << "round " << round << " draft " << i;
      ASSERT_EQ(plain.n_spec(), ppd.n_spec());
      seq.push_back(token);
    }
    // Accept all but the last two drafts, as a target that rejected the fourth would.
    plain.accept_chain(n_plain + 3);
    ppd.accept_chain(n_ppd + 3);
    seq.resize(plain.n_seen());
    seq.push_back(static_cast<int32_t>(7 + round));  // the target's own token
    ASSERT_EQ(plain.n_seen(), ppd.n_seen());
    ASSERT_EQ(ppd.n_spec(), 0);
  }
  EXPECT_GT(ppd.guesses_taken(), 0);
  EXPECT_LT(ppd.take_meter().forwards, plain.take_meter().forwards);
}

}  // namespace
}  // namespace parspec
