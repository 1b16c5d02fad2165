// `mpirun -np N parspec ...` end to end: the strategies on pipelines of 2, 3
// and 4 ranks reproduce single-process `ar` on the zoo pair; a flag error is
// reported once; a rank that dies or stops ends the job (rank_failure.sh); a
// two-"host" run over TCP between network namespaces (netns_two_hosts.sh).
// Tests/dist/pipeline_check.cpp covers a random pair and sampling.
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "cli_helpers.h"

namespace parspec {
namespace {

using testing_support::run_command;

const std::string kSource = PARSPEC_SOURCE_DIR;
const std::string kTarget = kSource + "/models/target.gguf";
const std::string kDraft = kSource + "/models/draft.gguf";
const std::string kMpirun =
    "OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 mpirun --oversubscribe ";

std::vector<int32_t> tokens_of(const std::string& json_text) {
  const auto start = json_text.find('{');
  if (start == std::string::npos) return {};
  return nlohmann::json::parse(json_text.substr(start))["tokens"].get<std::vector<int32_t>>();
}

std::string generate_args(const std::string& strategy) {
  return " generate -m " + kTarget + " -md " + kDraft + " --strategy " + strategy +
         " -p 'Once upon a time there was' -n 32 --temp 0 --json -t 1";
}

TEST(DistributedCli, ZooStrategiesOnTwoThreeFourRanksMatchSingleProcessAr) {
  const auto ar = run_command(std::string(PARSPEC_BINARY) + generate_args("ar") + " 2>/dev/null");
  ASSERT_EQ(ar.exit_code, 0);
  const std::vector<int32_t> expected = tokens_of(ar.output);
  ASSERT_EQ(expected.size(), 32u);
  for (int ranks : {2, 3, 4}) {
    for (const std::string strategy : {"pp", "stpp", "pipedec", "pearl --pearl-window 3"}) {
      const auto got = run_command(kMpirun + "-np " + std::to_string(ranks) + " " + PARSPEC_BINARY +
                                   generate_args(strategy) + " 2>&1");
      EXPECT_EQ(got.exit_code, 0) << strategy << " on " << ranks << " ranks:\n" << got.output;
      EXPECT_EQ(tokens_of(got.output), expected) << strategy << " on " << ranks << " ranks";
      EXPECT_NE(got.output.find("distributed: pipeline of " + std::to_string(ranks - 1) + " stage"),
                std::string::npos)
          << got.output;
    }
  }
}

// pearl with its default flags: the window is measured through the pipeline
// (a target forward as the head sees it); pearl:N gives it, as in bench. The
// tokens are ar's either way.
TEST(DistributedCli, PearlMeasuresItsWindowThroughThePipeline) {
  const auto ar = run_command(std::string(PARSPEC_BINARY) + generate_args("ar") + " 2>/dev/null");
  ASSERT_EQ(ar.exit_code, 0);
  for (int ranks : {2, 3}) {
    const auto got = run_command(kMpirun + "-np " + std::to_string(ranks) + " " + PARSPEC_BINARY +
                                 generate_args("pearl") + " 2>&1");
    ASSERT_EQ(got.exit_code, 0) << ranks << " ranks:\n" << got.output;
    EXPECT_EQ(tokens_of(got.output), tokens_of(ar.output)) << ranks << " ranks";
    EXPECT_NE(got.output.find("ms through the pipeline"), std::string::npos) << got.output;
  }
  const auto fixed =
      run_command(kMpirun + "-np 2 " + PARSPEC_BINARY + generate_args("pearl:3") + " 2>&1");
  ASSERT_EQ(fixed.exit_code, 0) << fixed.output;
  EXPECT_EQ(tokens_of(fixed.output), tokens_of(ar.output));
  EXPECT_EQ(fixed.output.find("through the pipeline"), std::string::npos) << fixed.output;
  EXPECT_NE(fixed.output.find("\"draft_window\": 3"), std::string::npos) << fixed.output;
}

// PPD's prompt tokens enter as embeddings, which travel to the first stage:
// the same tokens as ar and, with them, the same drafts accepted as in one
// process (ignored embeddings would draft other tokens).
TEST(DistributedCli, PpdOnTwoAndThreeRanksMatchesSingleProcessPpd) {
  const auto ar = run_command(std::string(PARSPEC_BINARY) + generate_args("ar") + " 2>/dev/null");
  const auto single = run_command(std::string(PARSPEC_BINARY) +
                                  generate_args("ppd --ppd-budget 10") + " 2>/dev/null");
  ASSERT_EQ(ar.exit_code, 0);
  ASSERT_EQ(single.exit_code, 0) << single.output;
  const auto accepted = [](const std::string& out) {
    return nlohmann::json::parse(out.substr(out.find('{')))["accepted"].get<int64_t>();
  };
  ASSERT_GT(accepted(single.output), 0) << "the zoo PPD prompts accept nothing: not a test";
  for (int ranks : {2, 3}) {
    const auto got = run_command(kMpirun + "-np " + std::to_string(ranks) + " " + PARSPEC_BINARY +
                                 generate_args("ppd --ppd-budget 10") + " 2>/dev/null");
    ASSERT_EQ(got.exit_code, 0) << "ppd on " << ranks << " ranks:\n" << got.output;
    EXPECT_EQ(tokens_of(got.output), tokens_of(ar.output)) << "ppd on " << ranks << " ranks";
    EXPECT_EQ(accepted(got.output), accepted(single.output)) << "ppd on " << ranks << " ranks";
    EXPECT_NE(got.output.find("\"distributed\""), std::string::npos) << got.output;
  }
}

// --head-layers: the head runs the embedding and the first layers itself, so
// the target is split over every rank (PipeDec with the drafter and the
// target's first layers on rank 0).
TEST(DistributedCli, HeadLayersOnTwoAndThreeRanksMatchSingleProcessAr) {
  const auto ar = run_command(std::string(PARSPEC_BINARY) + generate_args("ar") + " 2>/dev/null");
  ASSERT_EQ(ar.exit_code, 0);
  for (int ranks : {2, 3}) {
    for (const std::string strategy :
         {"pp", "stpp", "pipedec", "pearl --pearl-window 3", "ppd --ppd-budget 10"}) {
      const auto got = run_command(kMpirun + "-np " + std::to_string(ranks) + " " + PARSPEC_BINARY +
                                   generate_args(strategy) + " --head-layers 2 2>&1");
      EXPECT_EQ(got.exit_code, 0) << strategy << " on " << ranks << " ranks:\n" << got.output;
      EXPECT_EQ(tokens_of(got.output), tokens_of(ar.output)) << strategy << " on " << ranks;
      EXPECT_NE(got.output.find("drafter + embedding + layers 0-1)"), std::string::npos)
          << got.output;
    }
  }
  const auto too_many = run_command(kMpirun + "-np 2 " + PARSPEC_BINARY + generate_args("pp") +
                                    " --head-layers 6 2>&1");
  EXPECT_NE(too_many.exit_code, 0);
  EXPECT_NE(too_many.output.find("--head-layers 6: the model has 6 layers"), std::string::npos)
      << too_many.output;
}

// EasySpec under mpirun: the target stays on rank 0 and rank 1 runs slot 1 of
// the deep drafter's fuzzy layer groups; the tokens are ar's.
TEST(DistributedCli, EasySpecDrafterSlotsOnTwoRanksMatchSingleProcessAr) {
  const std::string deep = " -md " + kSource + "/models/draft-deep.gguf";
  const auto ar = run_command(std::string(PARSPEC_BINARY) + generate_args("ar") + " 2>/dev/null");
  ASSERT_EQ(ar.exit_code, 0);
  for (const std::string flags :
       {"--lp-size 2 --calibrate every", "--lp-groups 0/1-3/4-6/7 --calibrate never",
        "--lp-size 3 --calibrate mismatch --lp-tree --link-latency-us 50"}) {
    const auto got = run_command(kMpirun + "-np 2 " + PARSPEC_BINARY + generate_args("easyspec") +
                                 deep + " " + flags + " 2>&1");
    EXPECT_EQ(got.exit_code, 0) << flags << ":\n" << got.output;
    EXPECT_EQ(tokens_of(got.output), tokens_of(ar.output)) << flags;
    EXPECT_NE(got.output.find("distributed: easyspec drafter slots on 2 ranks"), std::string::npos)
        << got.output;
    EXPECT_NE(got.output.find("(MPI ranks 0-1 for a group's attention blocks)"), std::string::npos)
        << got.output;
  }
}

// A bench with easyspec under mpirun: the ranks are easyspec's slots, and ar
// and sd (whose greedy outputs bench checks against ar's) verify on rank 0 too.
TEST(DistributedCli, BenchWithEasySpecKeepsEveryTargetOnRankZero) {
  const auto got =
      run_command(kMpirun + "-np 2 " + PARSPEC_BINARY + " bench -m " + kTarget + " -md " + kSource +
                  "/models/draft-deep.gguf --strategies sd,easyspec --prompts prose "
                  "--max-prompts 2 -n 16 -t 1 2>&1");
  ASSERT_EQ(got.exit_code, 0) << got.output;
  EXPECT_NE(got.output.find("distributed: easyspec drafter slots on 2 ranks"), std::string::npos)
      << got.output;
  EXPECT_EQ(got.output.find("distributed: pipeline"), std::string::npos) << got.output;
}

int count(const std::string& text, const std::string& what) {
  int n = 0;
  for (size_t at = text.find(what); at != std::string::npos; at = text.find(what, at + 1)) ++n;
  return n;
}

TEST(DistributedCli, ErrorsAreReportedOnceAndEndEveryRank) {
  const auto bad_flag = run_command(kMpirun + "-np 3 " + PARSPEC_BINARY + generate_args("pp") +
                                    " --no-such-flag 2>&1");
  EXPECT_NE(bad_flag.exit_code, 0);
  EXPECT_EQ(count(bad_flag.output, "--no-such-flag"), 1) << bad_flag.output;
  const auto bad_split = run_command(kMpirun + "-np 3 " + PARSPEC_BINARY + generate_args("pp") +
                                     " --layer-split 1,2 2>&1");
  EXPECT_NE(bad_split.exit_code, 0);
  EXPECT_EQ(count(bad_split.output, "error: --layer-split '1,2' covers 3 layers"), 1)
      << bad_split.output;
  const auto auto_under_mpi =
      run_command(kMpirun + "-np 2 " + PARSPEC_BINARY + generate_args("auto") + " 2>&1");
  EXPECT_NE(auto_under_mpi.exit_code, 0);
  EXPECT_EQ(count(auto_under_mpi.output, "strategy 'auto' tunes on a target in this process"), 1);
  const auto stages = run_command(kMpirun + "-np 2 " + PARSPEC_BINARY + generate_args("easyspec") +
                                  " --stages 1 2>&1");
  EXPECT_NE(stages.exit_code, 0);
  EXPECT_EQ(count(stages.output, "with easyspec an mpirun job keeps the target on rank 0"), 1)
      << stages.output;
  // Without mpirun the distributed flags are an error, not ignored.
  const auto single =
      run_command(std::string(PARSPEC_BINARY) + generate_args("pp") + " --link-latency-us 10 2>&1");
  EXPECT_NE(single.exit_code, 0);
  EXPECT_NE(single.output.find("are for runs launched by mpirun"), std::string::npos);
}

TEST(DistributedCli, AnExplicitLayerSplitAndEmulatedLinkStillMatchAr) {
  const auto ar = run_command(std::string(PARSPEC_BINARY) + generate_args("ar") + " 2>/dev/null");
  const auto got = run_command(kMpirun + "-np 3 " + PARSPEC_BINARY + generate_args("pipedec") +
                               " --layer-split 1,5 --link-latency-us 100 --link-gbps 10 2>&1");
  ASSERT_EQ(got.exit_code, 0) << got.output;
  EXPECT_EQ(tokens_of(got.output), tokens_of(ar.output));
  EXPECT_NE(got.output.find("layers 0-0 + embedding"), std::string::npos) << got.output;
  EXPECT_NE(got.output.find("EMULATED link: 100 us latency"), std::string::npos) << got.output;
}

void expect_rank_failure_handled(const std::string& mode, const std::string& draft = kDraft,
                                 const std::string& strategy = "") {
  const auto r = run_command("bash " + kSource + "/tests/mpi/rank_failure.sh " + PARSPEC_BINARY +
                             " " + kTarget + " " + draft + " " + mode + " " + strategy + " 2>&1");
  EXPECT_EQ(r.exit_code, 0) << r.output;
  EXPECT_NE(r.output.find("PASS"), std::string::npos) << r.output;
}

TEST(DistributedCli, AKilledRankEndsTheJobWithinTenSeconds) {
  expect_rank_failure_handled("kill");
}

TEST(DistributedCli, AStoppedRankEndsTheJobWithinTenSeconds) {
  expect_rank_failure_handled("stop");
}

// Rank 1 as one of easyspec's drafter slots: the head waits for its attention
// outputs, so a dead or stopped slot ends the job as a dead stage does.
TEST(DistributedCli, AKilledOrStoppedDrafterSlotEndsTheJobWithinTenSeconds) {
  const std::string deep = kSource + "/models/draft-deep.gguf";
  expect_rank_failure_handled("kill", deep, "--strategy easyspec --lp-size 2");
  expect_rank_failure_handled("stop", deep, "--strategy easyspec --lp-size 2");
}

TEST(DistributedCli, TwoNetworkNamespacesOverTcp) {
  const auto r = run_command("bash " + kSource + "/tests/mpi/netns_two_hosts.sh " + PARSPEC_BINARY +
                             " " + kTarget + " " + kDraft + " 2>&1");
  if (r.exit_code == 77) GTEST_SKIP() << r.output;
  ASSERT_EQ(r.exit_code, 0) << r.output;
  const auto ar = run_command(std::string(PARSPEC_BINARY) + " generate -m " + kTarget +
                              " -p 'Once upon a time' -n 24 --temp 0 --json 2>/dev/null");
  EXPECT_EQ(tokens_of(r.output), tokens_of(ar.output)) << r.output;
}

}  // namespace
}  // namespace parspec
