// PPD (parallel prompt decoding): the side file, the prompt-embedding hook of
// the forward pass, the tree file and its two-stage construction, side-file
// inflation, and the shipped prompt tokens of the zoo target (behaviour only:
// greedy ppd reproduces ar and accepts guesses). Exactness against ar on
// random models is in test_strategies.cpp.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <filesystem>

#include "cli_helpers.h"
#include "core/error.h"
#include "decode/strategy.h"
#include "model/inflate.h"
#include "model/kv_cache.h"
#include "model/model.h"
#include "strategies/ppd/ppd_prompts.h"
#include "strategies/ppd/ppd_tree.h"
#include "test_helpers.h"

namespace parspec {
namespace {

using testing_support::make_model_pair;
using testing_support::ModelPair;
using testing_support::TempDir;

RankAccuracy example_accuracy() {
  return {{0.6, 0.15, 0.05, 0.02}, {0.4, 0.15, 0.05, 0.02}, {0.3, 0.1, 0.05, 0.02}};
}

TEST(PpdPrompts, LoadsWhatWasWrittenAndRejectsOtherFiles) {
  TempDir dir;
  write_random_ppd_prompts(dir.file("p.ppd.gguf"), 64, 3, 2, 5);
  const PpdPrompts p = PpdPrompts::load(dir.file("p.ppd.gguf"));
  EXPECT_EQ(p.prompt_tokens, 3);
  EXPECT_EQ(p.ensemble_tokens, 2);
  EXPECT_EQ(p.n_embd, 64);
  EXPECT_EQ(p.embeddings.size(), 3u * 2 * 64);
  EXPECT_EQ(p.rank_accuracy.size(), 3u);
  EXPECT_EQ(p.row(2, 1), p.embeddings.data() + (2 * 2 + 1) * 64);
  // A model file is not a side file.
  const ModelPair pair = make_model_pair(dir, "llama", DType::F32, DType::F32, 300, 1);
  EXPECT_THROW(PpdPrompts::load(pair.target->gguf().path()), Error);
  EXPECT_THROW(PpdPrompts::load(dir.file("missing.ppd.gguf")), Error);
  // Prompt tokens of another width do not fit.
  write_random_ppd_prompts(dir.file("wide.ppd.gguf"), 128, 3, 1, 5);
  EXPECT_THROW(PpdPrompts::load(dir.file("wide.ppd.gguf")).check_fits(*pair.target), Error);
  EXPECT_EQ(ppd_side_file_for("models/target.gguf"), "models/target.ppd.gguf");
}

TEST(PpdPrompts, InfoDescribesASideFile) {
  TempDir dir;
  write_random_ppd_prompts(dir.file("p.ppd.gguf"), 64, 3, 2, 5);
  const auto r = testing_support::run_parspec("info " + dir.file("p.ppd.gguf"), true);
  EXPECT_EQ(r.exit_code, 0) << r.output;
  EXPECT_NE(r.output.find("architecture   ppd"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("3 x 2 ensemble tokens, 64 wide"), std::string::npos) << r.output;
}

TEST(PpdPrompts, InputEmbeddingOfATokensOwnRowChangesNothing) {
  // The hook replaces a row's embedding; given the token's own embedding the
  // logits must be bit-identical (batch-invariant kernels).
  TempDir dir;
  const ModelPair pair = make_model_pair(dir, "llama", DType::F32, DType::F32, 300, 2);
  const Model& m = *pair.target;
  Worker worker(1);
  std::vector<float> own(m.config().n_embd);
  m.embed(std::vector<int32_t>{42}, own.data());
  KvCache kv1(m.config(), 16), kv2(m.config(), 16);
  Batch plain, hooked;
  for (int i = 0; i < 3; ++i) {
    plain.add(i == 1 ? 42 : 7 + i, i, i - 1, true);
    hooked.add(i == 1 ? 0 : 7 + i, i, i - 1, true);  // the token no longer matters
  }
  hooked.input_embeddings = {nullptr, own.data(), nullptr};
  EXPECT_EQ(m.forward(worker, plain, kv1), m.forward(worker, hooked, kv2));
  Batch bad = plain;
  bad.input_embeddings = {nullptr};
  EXPECT_THROW(m.forward(worker, bad, kv1), Error);
}

TEST(PpdTrees, BuiltTreesFitTheirBudgetAndRoundTripThroughText) {
  const RankAccuracy acc = example_accuracy();
  double previous = 0;
  for (int budget : {1, 2, 4, 8, 16, 32}) {
    const PpdTrees t = build_ppd_trees(acc, 1, budget);
    ASSERT_EQ(t.states.size(), 4u);
    EXPECT_LE(t.max_input_length(), budget);
    for (size_t k = 0; k < t.states.size(); ++k)
      for (const PpdTreeNode& node : t.states[k]) EXPECT_LE(node.ranks.size(), k);
    const PpdTreeForecast f = forecast_ppd_trees(t, acc);
    double total = 0;
    for (double p : f.stationary) total += p;
    EXPECT_NEAR(total, 1.0, 1e-9);
    EXPECT_GE(f.tokens, previous - 1e-9) << "budget " << budget;  // more rows never hurt here
    previous = f.tokens;
    const PpdTrees again = PpdTrees::parse(t.to_text(), "text");
    EXPECT_EQ(again.to_text(), t.to_text());
  }
  EXPECT_NEAR(forecast_ppd_trees(build_ppd_trees(acc, 1, 1), acc).tokens, 1.0, 1e-12);
  EXPECT_GT(previous, 1.5);
  // Ensemble tokens make prompt tokens dearer: the same budget holds fewer.
  EXPECT_LE(build_ppd_trees(acc, 4, 16).max_input_length(), 16);
}

TEST(PpdTrees, ForecastOfAHandBuiltTreeIsTheMarkovChainsMean) {
  // One prompt token, accuracy 0.5 at rank 0. State 0: the root with one prompt
  // token. State 1: root + candidate "0", both with one prompt token. Every step
  // ends in state 1, which emits 1 + 0.5 tokens.
  const PpdTrees t = PpdTrees::parse(
      "ppd-trees 1\nprompt_tokens 1\nensemble_tokens 1\nstate 0\nnode - 1\nstate 1\nnode - 1\n"
      "node 0 1  # the top guess\n",
      "hand");
  const PpdTreeForecast f = forecast_ppd_trees(t, {{0.5}});
  EXPECT_NEAR(f.stationary[1], 1.0, 1e-9);
  EXPECT_NEAR(f.tokens, 1.5, 1e-9);
  EXPECT_NEAR(f.rows, 4.0, 1e-9);
}

TEST(PpdTrees, MalformedFilesAreRejectedWithTheirLine) {
  const std::string head = "ppd-trees 1\nprompt_tokens 2\nensemble_tokens 1\n";
  const char* const bad[] = {
      "",
      "prompt_tokens 2\n",
      "ppd-trees 2\n",
      "ppd-trees 1\nprompt_tokens 1\nstate 0\nnode - 1\nstate 1\nnode - 1\nnode 0.0 0\n",  // too
                                                                                           // deep
      "ppd-trees 1\nprompt_tokens 1\nstate 0\nnode - 2\nstate 1\nnode - 1\n",  // too many prompts
      "ppd-trees 1\nprompt_tokens 1\nstate 0\nnode - 1\nstate 1\nnode 0 1\n",  // no root first
      "ppd-trees 1\nprompt_tokens 1\nstate 0\nnode - 1\nstate 1\nnode - 1\nnode x 1\n",
      "ppd-trees 1\nprompt_tokens 1\nstate 0\nnode - 1\n",  // state 1 missing
      "ppd-trees 1\nprompt_tokens 1\nstate 1\n",
      "ppd-trees 1\nwhat 3\n",
  };
  for (const char* text : bad) EXPECT_THROW(PpdTrees::parse(text, "bad"), Error) << text;
  try {
    PpdTrees::parse(head + "state 0\nnode - 0\nstate 1\nnode - 0\nnode 1.0 0\n", "f.tree");
    FAIL() << "accepted a node deeper than its state";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("f.tree:8"), std::string::npos) << e.what();
  }
}

TEST(PpdStrategy, NeedsPromptTokensThatFitTheTarget) {
  TempDir dir;
  const ModelPair pair = make_model_pair(dir, "llama", DType::F32, DType::F32, 300, 3);
  Worker worker(1);
  StrategyConfig c;
  c.name = "ppd";
  c.target = pair.target;
  c.target_worker = &worker;
  EXPECT_THROW(make_strategy(c), Error);  // no --ppd and no side file beside the target
  write_random_ppd_prompts(dir.file("wide.ppd.gguf"), 96, 2, 1, 1);
  c.options["ppd"] = dir.file("wide.ppd.gguf");
  EXPECT_THROW(make_strategy(c), Error);
  write_random_ppd_prompts(ppd_side_file_for(pair.target->gguf().path()), 64, 2, 1, 1);
  c.options.clear();
  EXPECT_NO_THROW(make_strategy(c));  // found beside the target
  c.options["ppd_tree"] = dir.file("missing.tree");
  EXPECT_THROW(make_strategy(c), Error);
}

// A random target with random prompt tokens beside it, and `ar`'s
// configuration on it (a strategy's made from it by its name and options).
struct RandomPpdTarget {
  TempDir dir;
  ModelPair pair = make_model_pair(dir, "llama", DType::F32, DType::F32, 300, 4);
  Worker worker{1};
  StrategyConfig config;
  RandomPpdTarget() {
    write_random_ppd_prompts(ppd_side_file_for(pair.target->gguf().path()), 64, 3, 1, 5, 0.05f);
    config.target = pair.target;
    config.target_worker = &worker;
    config.ctx_size = 128;
    config.name = "ar";
  }
};

TEST(PpdStrategy, ATreeWithoutGuessesDecodesAsAr) {
  // `tune --ppd` picks budget 1 (the root alone) where no tree pays: ppd then
  // runs ar itself (same tokens, same cost) and says so.
  RandomPpdTarget t;
  TempDir& dir = t.dir;
  StrategyConfig c = t.config;
  auto ar = make_strategy(c);
  c.name = "ppd";
  c.options["ppd_budget"] = 1;
  auto root_only = make_strategy(c);
  EXPECT_EQ(root_only->name(), "ppd");
  EXPECT_EQ(root_only->runs(), "ar");
  const std::vector<std::string> notes = root_only->notes();
  EXPECT_EQ(std::count_if(notes.begin(), notes.end(),
                          [](const std::string& n) {
                            return n.find("no guesses") != std::string::npos &&
                                   n.find("decodes as ar") != std::string::npos;
                          }),
            1);
  // A tree file of roots alone, as `tune --ppd` writes for budget 1, alike.
  const PpdTrees roots = build_ppd_trees(example_accuracy(), 1, 1);
  EXPECT_FALSE(roots.has_guesses());
  EXPECT_TRUE(build_ppd_trees(example_accuracy(), 1, 6).has_guesses());
  roots.save(dir.file("roots.tree"));
  c.options["ppd_tree"] = dir.file("roots.tree");
  EXPECT_EQ(make_strategy(c)->runs(), "ar");
  c.options.erase("ppd_tree");
  c.options["ppd_budget"] = 6;
  auto with_guesses = make_strategy(c);
  EXPECT_EQ(with_guesses->runs(), "ppd");

  for (const float temp : {0.0f, 0.8f}) {
    GenerationRequest req;
    req.prompt = {256, 72, 101, 108};
    req.n_predict = 24;
    req.sampling.temp = temp;
    req.sampling.seed = 7;
    const GenerationResult expected = ar->generate(req);
    const GenerationResult got = root_only->generate(req);
    EXPECT_EQ(got.tokens, expected.tokens) << "temp " << temp;
    EXPECT_EQ(got.stats.drafted, 0);
    EXPECT_EQ(got.stats.target_forwards, expected.stats.target_forwards);
    if (temp == 0) {
      EXPECT_EQ(with_guesses->generate(req).tokens, expected.tokens);
    }
  }
}

// Without a budget or trees, ppd times this machine's L(n) on its own target
// side and takes the budget the forecast predicts fastest (one row, which is
// ar, where no tree beats it), says which and why, and decodes ar's tokens.
TEST(PpdStrategy, WithoutABudgetItChoosesOneFromThisMachinesForwardTimes) {
  RandomPpdTarget t;
  StrategyConfig c = t.config;
  auto ar = make_strategy(c);
  c.name = "ppd";
  auto ppd = make_strategy(c);
  const std::vector<std::string> notes = ppd->notes();
  ASSERT_FALSE(notes.empty());
  int budget = 0;
  ASSERT_EQ(
      std::sscanf(notes[0].c_str(), "ppd: budget %d chosen from this machine's L(n)", &budget), 1)
      << notes[0];
  EXPECT_GE(budget, 1);
  EXPECT_LE(budget, 16);
  EXPECT_EQ(ppd->runs(), budget == 1 ? "ar" : "ppd") << notes[0];
  GenerationRequest req;
  req.prompt = {256, 72, 101, 108};
  req.n_predict = 24;
  req.sampling.temp = 0;
  EXPECT_EQ(ppd->generate(req).tokens, ar->generate(req).tokens);
}

TEST(PpdStrategy, InflatedPromptTokensPredictWhatTheSourcesDo) {
  // make-model --inflate widens the side file with the model; the inflated
  // pair must compute the same function: same tokens, same accepted guesses.
  TempDir dir;
  const ModelPair pair = make_model_pair(dir, "llama", DType::F32, DType::F32, 300, 6);
  const std::string src = pair.target->gguf().path();
  write_random_ppd_prompts(ppd_side_file_for(src), 64, 3, 1, 9, 0.05f);
  InflateOptions options;
  options.shape.n_embd = 128;
  options.shape.n_layer = 3;
  options.shape.n_ff = 256;
  const std::string wide = dir.file("wide.gguf");
  inflate_model(src, options, wide);
  inflate_ppd_prompts(ppd_side_file_for(src), 128, ppd_side_file_for(wide));
  EXPECT_EQ(PpdPrompts::load(ppd_side_file_for(wide)).n_embd, 128);
  Worker worker(1);
  GenerationRequest req;
  req.prompt = {256, 72, 101, 108};
  req.n_predict = 24;
  req.sampling.temp = 0;
  GenerationResult results[2];
  int i = 0;
  for (const std::string& path : {src, wide}) {
    StrategyConfig c;
    c.name = "ppd";
    c.target = Model::load(path);
    c.target_worker = &worker;
    c.options["ppd_budget"] = 12;
    results[i++] = make_strategy(c)->generate(req);
  }
  EXPECT_EQ(results[0].tokens, results[1].tokens);
  EXPECT_EQ(results[0].stats.drafted, results[1].stats.drafted);
  EXPECT_NEAR(static_cast<double>(results[0].stats.accepted),
              static_cast<double>(results[1].stats.accepted), 1.0);
}

TEST(PpdStrategy, ShippedPromptTokensOfTheZooTargetAreAcceptedAndExact) {
  const std::string target_path = std::string(PARSPEC_SOURCE_DIR) + "/models/target.gguf";
  const std::string side = ppd_side_file_for(target_path);
  ASSERT_TRUE(std::filesystem::exists(side)) << "the bundled models/target.ppd.gguf is missing";
  const PpdPrompts p = PpdPrompts::load(side);
  EXPECT_EQ(p.prompt_tokens, 3);
  ASSERT_EQ(p.rank_accuracy.size(), 3u);
  Worker worker(1);
  StrategyConfig c;
  c.target = Model::load(target_path);
  c.target_worker = &worker;
  c.ctx_size = 256;
  c.name = "ar";
  auto ar = make_strategy(c);
  c.name = "ppd";
  c.options["ppd_budget"] = 10;  // trees with guesses (the default may choose none here)
  auto ppd = make_strategy(c);
  // BOS + "def main():\n    " and "Q: 3 + 4 = ?\nA:" in the zoo tokenizer's ids would
  // need the tokenizer; repeated structure in any text is enough here.
  const std::vector<std::vector<int32_t>> prompts = {{2046, 100, 101, 102, 32, 109, 97, 105, 110},
                                                     {2046, 81, 58, 32, 51, 32, 43, 32, 52}};
  int64_t accepted = 0, drafted = 0;
  for (const auto& prompt : prompts) {
    GenerationRequest req;
    req.prompt = prompt;
    req.n_predict = 48;
    req.sampling.temp = 0;
    const auto expected = ar->generate(req).tokens;
    const GenerationResult got = ppd->generate(req);
    EXPECT_EQ(got.tokens, expected);
    accepted += got.stats.accepted;
    drafted += got.stats.drafted;
  }
  EXPECT_GT(accepted, 0) << "the trained prompt tokens' guesses were never accepted";
  EXPECT_LT(accepted, drafted);
}

}  // namespace
}  // namespace parspec
