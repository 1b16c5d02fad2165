// The verdict of `parspec bench --verdict`, on hand-made results (no models).
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include "bench/verdict.h"
#include "cli_helpers.h"
#include "test_helpers.h"

namespace parspec {
namespace {

// A result row; times are totals over the row's runs.
BenchResult row(const std::string& strategy, int64_t n_gen, double t_gen_ms, int64_t steps,
                double t_draft_ms = 0, double t_verify_ms = 0,
                const std::string& set = std::string(kAllSets)) {
  BenchResult r;
  r.strategy = strategy;
  r.prompt_set = set;
  r.runs = 1;
  r.total.n_gen = n_gen;
  r.total.t_gen_ms = t_gen_ms;
  r.total.verify_steps = steps;
  r.total.t_draft_ms = t_draft_ms;
  r.total.t_verify_ms = t_verify_ms;
  return r;
}

// ar at 100 tok/s (10 ms per token) and one strategy of each kind of loss.
BenchReport sample_report() {
  BenchReport report;
  report.exactness_checked = true;
  report.results = {
      row("ar", 100, 1000, 100, 0, 1000),
      // tau 2.5, 2x: a step costs 1.25 ar steps.
      row("sd", 100, 500, 40, 100, 400),
      // tau 4, 0.4x: 10 ar steps per step, 8 of them verifying.
      row("tree", 100, 2500, 25, 250, 2000),
      // tau 2.5, 0.5x: 5 ar steps per step, 3 drafting, 1.5 verifying.
      row("specinfer", 100, 2000, 40, 1200, 600),
      // tau 2, 2/3x: 3 ar steps per step, 0.5 drafting, 1.2 verifying, 1.3 neither.
      row("pearl", 100, 1500, 50, 250, 600),
  };
  for (BenchResult& r : report.results) r.speedup = r.tok_per_s() / 100.0;
  return report;
}

TEST(BenchVerdict, StepCostIsInArStepsAndAddsUpToTauOverSpeedup) {
  const BenchReport report = sample_report();
  const StepCost tree = step_cost(report.results[2], report.results[0]);
  EXPECT_DOUBLE_EQ(tree.step, 10.0);
  EXPECT_DOUBLE_EQ(tree.step, report.results[2].tau() / report.results[2].speedup);
  EXPECT_DOUBLE_EQ(tree.draft, 1.0);
  EXPECT_DOUBLE_EQ(tree.verify, 8.0);
  EXPECT_DOUBLE_EQ(tree.other(), 1.0);
  EXPECT_EQ(tree.main_cause(), StepCostCause::kVerify);
  EXPECT_EQ(step_cost(report.results[3], report.results[0]).main_cause(), StepCostCause::kDraft);
  EXPECT_EQ(step_cost(report.results[4], report.results[0]).main_cause(), StepCostCause::kOther);
  // A row without steps has no cost to explain.
  EXPECT_EQ(step_cost(row("x", 0, 0, 0), report.results[0]).step, 0.0);
}

TEST(BenchVerdict, NamesTheFastestAndExplainsEachLoserByItsLargestCost) {
  const std::string text = bench_verdict(sample_report());
  EXPECT_NE(text.find("verdict: sd is the fastest here: 2.00x ar (200.00 against 100.00 tok/s), "
                      "tau 2.50 tokens per verification step; every greedy output equals ar's\n"),
            std::string::npos)
      << text;
  // Every strategy's speedup as tau over its step cost, fastest first.
  EXPECT_NE(text.find("speedup = tau / the cost of a step in ar steps (10.00 ms each): sd 2.00x = "
                      "2.50 / 1.25, pearl 0.67x = 2.00 / 3.00, specinfer 0.50x = 2.50 / 5.00, "
                      "tree 0.40x = 4.00 / 10.00\n"),
            std::string::npos)
      << text;
  const size_t verify = text.find("one forward over several tokens costs several");
  const size_t draft = text.find("drafting costs more than its tokens save");
  const size_t other = text.find("time outside drafting and verifying");
  ASSERT_NE(verify, std::string::npos) << text;
  ASSERT_NE(draft, std::string::npos) << text;
  ASSERT_NE(other, std::string::npos) << text;
  EXPECT_LT(verify, draft);
  EXPECT_LT(draft, other);
  EXPECT_NE(text.find("tree 10.0 ar steps a step (8.0 verifying) for tau 4.00"), std::string::npos)
      << text;
  EXPECT_NE(text.find("specinfer 5.0 ar steps a step (3.0 drafting) for tau 2.50"),
            std::string::npos)
      << text;
  EXPECT_NE(text.find("pearl 3.0 ar steps a step (1.3 elsewhere) for tau 2.00"), std::string::npos)
      << text;
  // sd beat ar: it is not among the losers.
  EXPECT_EQ(text.substr(text.find("why the slower ones")).find("sd "), std::string::npos) << text;
}

TEST(BenchVerdict, SaysWhatAutoRan) {
  BenchReport report = sample_report();
  report.results[1].strategy = "auto";
  report.config["chosen"] = {{"ar", "ar"}, {"auto", "sd:3"}, {"tree", "tree"}};
  const std::string text = bench_verdict(report);
  EXPECT_NE(text.find("verdict: auto (ran sd:3) is the fastest here"), std::string::npos) << text;
  EXPECT_NE(text.find("tree 10.0 ar steps"), std::string::npos) << text;
}

TEST(BenchVerdict, ArFastestAndNoLosers) {
  BenchReport report;
  report.results = {row("ar", 100, 1000, 100), row("sd", 100, 1000, 40)};
  for (BenchResult& r : report.results) r.speedup = r.tok_per_s() / 100.0;
  report.results[1].total.t_gen_ms = 1250;  // 0.8x
  report.results[1].speedup = 0.8;
  const std::string slower = bench_verdict(report);
  EXPECT_EQ(
      slower.rfind("verdict: ar is the fastest here (100.00 tok/s): no strategy beat it\n", 0), 0u)
      << slower;
  EXPECT_NE(slower.find("- time outside drafting and verifying"), std::string::npos) << slower;

  report.results[1].total.t_gen_ms = 800;
  report.results[1].speedup = 1.25;
  const std::string faster = bench_verdict(report);
  EXPECT_EQ(faster.find("why the slower ones lose"), std::string::npos) << faster;
  EXPECT_NE(faster.find("no strategy was slower than ar here\n"), std::string::npos) << faster;
  EXPECT_EQ(faster.find("note:"), std::string::npos) << faster;

  // A verification of 3 tokens in 8 ms against ar's 10 ms per token.
  report.results[1].total.drafted = 80;
  report.results[1].total.t_verify_ms = 320;
  const std::string slow_ar = bench_verdict(report);
  EXPECT_NE(slow_ar.find("note: sd verified about 3.0 tokens per forward in 0.80 ar steps"),
            std::string::npos)
      << slow_ar;
  // Sampled runs are not compared with ar: the verdict claims nothing about outputs.
  EXPECT_EQ(faster.find("equals ar's"), std::string::npos) << faster;
}

TEST(BenchVerdict, UsesTheRowsOverAllSetsOrTheOnlySet) {
  BenchReport report = sample_report();
  // A per-set row where tree wins must not change the verdict over all sets.
  BenchResult code_ar = row("ar", 10, 100, 10, 0, 100, "code");
  BenchResult code_tree = row("tree", 10, 10, 2, 0, 10, "code");
  code_ar.speedup = 1;
  code_tree.speedup = 10;
  report.results.insert(report.results.begin(), {code_ar, code_tree});
  EXPECT_NE(bench_verdict(report).find("verdict: sd is the fastest"), std::string::npos);

  BenchReport one_set;
  one_set.results = {code_ar, code_tree};
  EXPECT_NE(bench_verdict(one_set).find("verdict: tree is the fastest here: 10.00x ar"),
            std::string::npos)
      << bench_verdict(one_set);
}

TEST(BenchVerdict, ReportsOutputsThatDifferFromArInsteadOfSpeed) {
  BenchReport report = sample_report();
  report.mismatches.push_back({"tree", "code", 0, 0, 5});
  report.mismatches.push_back({"tree", "math", 1, 0, 9});
  const std::string text = bench_verdict(report);
  EXPECT_EQ(text.rfind("verdict: FAILED: 2 greedy runs of tree differ from ar's output", 0), 0u)
      << text;
  EXPECT_EQ(text.find("fastest"), std::string::npos) << text;
}

TEST(BenchVerdict, WithoutArThereIsNothingToCompare) {
  BenchReport report;
  report.results = {row("sd", 100, 500, 40)};
  EXPECT_EQ(bench_verdict(report), "verdict: no ar row to compare with\n");
}

TEST(BenchVerdict, CommandEndsWithTheVerdictAndKeepsJsonOnStdoutClean) {
  testing_support::TempDir dir;
  const std::string model = testing_support::write_model(dir, "m.gguf", RandomModelSpec{});
  const std::string run = "bench -m " + model + " -md " + model +
                          " --strategies ar,sd -n 6 -t 1 --warmup 2 --prompts code "
                          "--max-prompts 1 --verdict";
  const auto table = testing_support::run_parspec(run);
  ASSERT_EQ(table.exit_code, 0) << table.output;
  EXPECT_NE(table.output.find("\nverdict: "), std::string::npos) << table.output;
  EXPECT_NE(table.output.find("every greedy output equals ar's"), std::string::npos)
      << table.output;

  // With the JSON on stdout the verdict goes to stderr.
  const auto json = testing_support::run_parspec(run + " --json -");
  ASSERT_EQ(json.exit_code, 0) << json.output;
  EXPECT_EQ(json.output.find("verdict: "), std::string::npos) << json.output;
  EXPECT_FALSE(nlohmann::json::parse(json.output)["results"].empty());
}

}  // namespace
}  // namespace parspec
