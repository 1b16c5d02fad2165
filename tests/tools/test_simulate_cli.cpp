// parspec simulate as a user runs it: the JSON of generate with the cluster's
// time, the tokens of generate, profiles saved and reused, and clear errors.
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>
#include <set>

#include "cli_helpers.h"
#include "test_helpers.h"

namespace parspec {
namespace {

using testing_support::CommandResult;
using testing_support::run_parspec;
using testing_support::TempDir;

class SimulateCli : public ::testing::Test {
 protected:
  void SetUp() override {
    RandomModelSpec spec;
    spec.n_vocab = 260;
    spec.n_layer = 4;
    spec.seed = 3;
    target_ = testing_support::write_model(dir_, "target.gguf", spec);
    spec.weight_type = DType::Q8_0;
    spec.n_layer = 2;
    draft_ = testing_support::write_model(dir_, "draft.gguf", spec);
  }
  std::string common() const {
    return " -m " + target_ + " -md " + draft_ + " -p 'The quick brown fox' -n 12 --temp 0 -t 1";
  }
  TempDir dir_;
  std::string target_, draft_;
};

TEST_F(SimulateCli, PrintsGeneratesFieldsWithTheClustersTimeAndTheSameTokens) {
  const CommandResult ar = run_parspec("generate" + common() + " --strategy ar --json");
  ASSERT_EQ(ar.exit_code, 0) << ar.output;
  const auto expected = nlohmann::json::parse(ar.output)["tokens"];
  const std::string prefix = dir_.file("profile");
  for (const char* strategy : {"pp", "stpp", "pipedec", "sd", "dyntree"}) {
    const CommandResult r =
        run_parspec("simulate --ranks 3 --link-latency-us 50" + common() + " --strategy " +
                    strategy + " --json --save-profiles " + prefix);
    ASSERT_EQ(r.exit_code, 0) << strategy << ": " << r.output;
    const auto j = nlohmann::json::parse(r.output);
    EXPECT_EQ(j["tokens"], expected) << strategy;
    EXPECT_NEAR(j["ms_per_token"].get<double>(),
                j["t_gen_ms"].get<double>() / j["n_gen"].get<double>(), 1e-9);
    const auto& sim = j["simulated"];
    EXPECT_EQ(sim["ranks"], 3);
    ASSERT_EQ(sim["stages"].size(), 2u);
    EXPECT_EQ(sim["stages"][0]["layers"], nlohmann::json({0, 2}));
    EXPECT_EQ(sim["stages"][1]["layers"], nlohmann::json({2, 4}));
    EXPECT_GT(sim["stages"][1]["busy_ms"].get<double>(), 0);
    // pp: every token after the prefill's crosses 3 links of 50 us (pipedec overlaps them).
    if (std::string(strategy) == "pp") {
      EXPECT_GT(j["t_gen_ms"].get<double>(), 11 * 0.15);
    }
  }
  // The saved profiles price a later run without measuring.
  const CommandResult reused =
      run_parspec("simulate --ranks 2" + common() + " --strategy pipedec --json --cost-profile " +
                  prefix + "-target.json --draft-cost-profile " + prefix + "-draft.json");
  ASSERT_EQ(reused.exit_code, 0) << reused.output;
  EXPECT_EQ(nlohmann::json::parse(reused.output)["tokens"], expected);
  // A 70B-class shape on a roofline: its 80 layers split over the stages.
  const CommandResult shaped =
      run_parspec("simulate --ranks 15" + common() +
                  " --strategy pp --json --shape llama-3.1-70b --cost-profile roofline:936:71 "
                  "--draft-shape llama-3.2-1b --draft-cost-profile roofline:864:90");
  ASSERT_EQ(shaped.exit_code, 0) << shaped.output;
  const auto js = nlohmann::json::parse(shaped.output);
  EXPECT_EQ(js["tokens"], expected);
  EXPECT_EQ(js["simulated"]["stages"].size(), 14u);
  // Each token after the prefill's: 80 layers of 1.711 GB and the 2.1 GB output matrix read at
  // 936 GB/s, 148.5 ms.
  EXPECT_NEAR(js["t_gen_ms"].get<double>() / 11, 148.5, 0.5);
}

// --plan: every candidate on the same cluster, fastest first, each producing pp's tokens (the
// command checks that itself and fails otherwise).
TEST_F(SimulateCli, PlanListsTheCandidatesFastestFirst) {
  const CommandResult r = run_parspec(
      "simulate --plan --ranks 3 --json -m " + target_ + " -md " + draft_ +
      " -p 'The quick brown fox' -n 8 --temp 0 -t 1 --shape llama-3.1-70b --cost-profile "
      "roofline:936:71 --draft-shape llama-3.2-1b --draft-cost-profile roofline:864:181 "
      "--link-latency-us 25 --link-gbps 10");
  ASSERT_EQ(r.exit_code, 0) << r.output;
  const auto plan = nlohmann::json::parse(r.output)["plan"];
  ASSERT_GE(plan.size(), 10u);
  std::set<std::string> names;
  double previous = 0;
  for (const auto& row : plan) {
    const std::string name = row["strategy"];
    names.insert(name.substr(0, name.find(':')));
    EXPECT_GE(row["ms_per_token"].get<double>(), previous);
    previous = row["ms_per_token"].get<double>();
    if (name == "pp") {
      EXPECT_DOUBLE_EQ(row["speedup_over_pp"].get<double>(), 1.0);
    }
  }
  EXPECT_EQ(names, (std::set<std::string>{"pp", "sd", "stpp", "pipedec"}));
}

TEST_F(SimulateCli, RefusesWhatItCannotSimulateWithAReason) {
  const struct {
    std::string args, message;
  } cases[] = {
      {"simulate" + common(), "--ranks"},
      {"simulate --ranks 1" + common(), "--ranks"},
      {"simulate --ranks 3 --stages 3" + common(), "--stages 3"},
      {"simulate --ranks 2 --strategy pearl" + common(), "pearl"},
      {"simulate --ranks 2 --strategy easyspec" + common(), "easyspec"},
      {"simulate --ranks 2 --cost-profile " + dir_.file("none.json") + common(), "none.json"},
      {"simulate --ranks 2 --cost-profile roofline:0:1" + common(), "roofline"},
      {"simulate --ranks 2 --shape llama-9b" + common(), "llama-9b"},
      {"simulate --ranks 3 --layer-split 1,1" + common(), "--layer-split"},
  };
  for (const auto& c : cases) {
    const CommandResult r = run_parspec(c.args, /*merge_stderr=*/true);
    EXPECT_EQ(r.exit_code, 1) << c.args << ": " << r.output;
    EXPECT_NE(r.output.find(c.message), std::string::npos) << c.args << ": " << r.output;
  }
}

}  // namespace
}  // namespace parspec
