// `parspec tune` on the command line: errors and exit codes, a run on a small
// random pair that writes the cache, and a second run that reads it.
#include <gtest/gtest.h>

#include <filesystem>

#include "cli_helpers.h"
#include "strategies/ppd/ppd_prompts.h"
#include "strategies/ppd/ppd_tree.h"
#include "test_helpers.h"

namespace parspec {
namespace {

using testing_support::run_parspec;
using testing_support::TempDir;
using testing_support::write_model;

TEST(TuneCli, HelpAndBadInput) {
  const auto help = run_parspec("tune --help");
  EXPECT_EQ(help.exit_code, 0);
  EXPECT_NE(help.output.find("--cache-dir"), std::string::npos);
  // Tuned where the models will run: generate's GPU flags.
  for (const char* flag : {"-ngl, --gpu-layers", "-ngld,", "-dev, --device"})
    EXPECT_NE(help.output.find(flag), std::string::npos) << flag;

  const auto no_model = run_parspec("tune", true);
  EXPECT_EQ(no_model.exit_code, 1);
  EXPECT_NE(no_model.output.find("no target model given"), std::string::npos) << no_model.output;

  TempDir dir;
  const std::string target = write_model(dir, "t.gguf", RandomModelSpec());
  const auto no_draft = run_parspec("tune -m " + target, true);
  EXPECT_EQ(no_draft.exit_code, 1);
  EXPECT_NE(no_draft.output.find("no draft model given"), std::string::npos) << no_draft.output;

  const auto missing = run_parspec("tune -m " + target + " -md " + dir.file("none.gguf"), true);
  EXPECT_EQ(missing.exit_code, 1);
  EXPECT_NE(missing.output.find("none.gguf"), std::string::npos) << missing.output;

  const auto bad_flag = run_parspec("tune -m " + target + " -md " + target + " --gamma 3", true);
  EXPECT_EQ(bad_flag.exit_code, 1);
  const auto bad_threads = run_parspec("tune -m " + target + " -md " + target + " -t 0", true);
  EXPECT_EQ(bad_threads.exit_code, 1);
  EXPECT_NE(bad_threads.output.find("-t must be at least 1"), std::string::npos);

  RandomModelSpec other;
  other.n_vocab = 300;
  const std::string small_vocab = write_model(dir, "v.gguf", other);
  const auto vocab = run_parspec("tune -m " + target + " -md " + small_vocab, true);
  EXPECT_EQ(vocab.exit_code, 1);
  EXPECT_NE(vocab.output.find("vocabulary"), std::string::npos) << vocab.output;
}

TEST(TuneCli, MeasuresThenReadsTheCache) {
  TempDir dir;
  RandomModelSpec spec;
  const std::string target = write_model(dir, "t.gguf", spec);
  spec.weight_type = DType::Q8_0;
  const std::string draft = write_model(dir, "d.gguf", spec);
  const std::string cache = dir.file("cache");
  const std::string args =
      "tune -m " + target + " -md " + draft + " -t 1 --cache-dir " + cache + " --measure 1 -n 8";
  const auto first = run_parspec(args);
  ASSERT_EQ(first.exit_code, 0) << first.output;
  EXPECT_NE(first.output.find("measured now"), std::string::npos) << first.output;
  EXPECT_NE(first.output.find("choice: "), std::string::npos);
  EXPECT_NE(first.output.find("sd:8"), std::string::npos);  // every candidate is listed
  EXPECT_NE(first.output.find("tree:d1c2"), std::string::npos) << first.output;
  EXPECT_NE(first.output.find("dyntree:d2c2w2"), std::string::npos) << first.output;
  EXPECT_NE(first.output.find("\ntuned: sd:"), std::string::npos) << first.output;
  EXPECT_TRUE(std::filesystem::exists(cache + "/tune.json"));

  // The CPU named explicitly is the same machine: the same entry of the cache.
  const auto on_cpu = run_parspec(args + " --measure 0 --device cpu -ngl 0");
  ASSERT_EQ(on_cpu.exit_code, 0) << on_cpu.output;
  EXPECT_NE(on_cpu.output.find("from the cache"), std::string::npos) << on_cpu.output;

  const auto second = run_parspec(args + " --measure 0");
  ASSERT_EQ(second.exit_code, 0) << second.output;
  EXPECT_NE(second.output.find("from the cache"), std::string::npos) << second.output;
  // The same measurements give the same choice.
  const auto choice = [](const std::string& out) { return out.substr(out.find("choice: ")); };
  EXPECT_EQ(choice(first.output), choice(second.output));
}

TEST(TuneCli, PpdChoosesATreeSizeAndWritesItsTrees) {
  TempDir dir;
  RandomModelSpec spec;
  const std::string target = write_model(dir, "t.gguf", spec);
  const std::string prompts = dir.file("t.ppd.gguf");
  write_random_ppd_prompts(prompts, spec.n_embd, 3, 1, 4);
  const std::string tree = dir.file("chosen.tree");
  const auto run = run_parspec("tune -m " + target + " --ppd " + prompts + " --ppd-tree-out " +
                               tree + " -t 1 --measure 1 -n 8 --ppd-max-budget 12");
  ASSERT_EQ(run.exit_code, 0) << run.output;
  EXPECT_NE(run.output.find("target forward L(n), ms: 1:"), std::string::npos) << run.output;
  EXPECT_NE(run.output.find("choice: budget "), std::string::npos) << run.output;
  const PpdTrees trees = PpdTrees::load(tree);
  EXPECT_EQ(trees.max_prompt_tokens, 3);
  EXPECT_LE(trees.max_input_length(), 12);
  EXPECT_LE(trees.max_input_length(), trees.budget);

  const auto with_draft =
      run_parspec("tune -m " + target + " -md " + target + " --ppd " + prompts, true);
  EXPECT_EQ(with_draft.exit_code, 1);
  EXPECT_NE(with_draft.output.find("needs no draft model"), std::string::npos) << with_draft.output;
}

}  // namespace
}  // namespace parspec
