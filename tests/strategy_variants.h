#pragma once
// One configuration or more of every registered strategy, for the tests that
// hold each strategy to `ar`'s output (on the CPU and on a GPU).
#include <filesystem>
#include <sstream>
#include <string>
#include <variant>
#include <vector>

#include "decode/strategy.h"
#include "strategies/ppd/ppd_prompts.h"
#include "test_helpers.h"

namespace parspec::testing_support {

// Random PPD prompt tokens for the test models' width (64), written once per
// process: exactness must not depend on how good trained prompt tokens are.
inline std::string random_ppd_file(int ensemble_tokens) {
  static TempDir dir;
  const std::string path = dir.file("random-" + std::to_string(ensemble_tokens) + ".ppd.gguf");
  if (!std::filesystem::exists(path)) write_random_ppd_prompts(path, 64, 3, ensemble_tokens, 11);
  return path;
}

inline std::vector<StrategyConfig> strategy_variants() {
  std::vector<StrategyConfig> v;
  StrategyConfig c;
  c.name = "sd";
  c.draft_max = 1;
  v.push_back(c);
  c.draft_max = 4;
  v.push_back(c);
  c.options["adaptive_draft"] = true;
  c.draft_max = 8;
  v.push_back(c);
  c = StrategyConfig();
  c.name = "sd";
  c.draft_p_min = 0.5f;
  v.push_back(c);
  // Plain target steps wherever the timing says drafting does not pay.
  c = StrategyConfig();
  c.name = "sd";
  c.draft_max = 3;
  c.options["speculation_guard"] = true;
  v.push_back(c);
  c = StrategyConfig();
  c.name = "tree";
  c.tree_depth = 3;
  c.tree_branch = 2;
  v.push_back(c);
  c = StrategyConfig();
  c.name = "dyntree";
  c.tree_depth = 4;
  c.tree_width = 6;
  c.tree_branch = 3;
  v.push_back(c);
  c.options["tree_verify_depth"] = 2;  // deeper levels survive to the next step
  v.push_back(c);
  // Shapes chosen as they run (from timings, so from the machine's load).
  c = StrategyConfig();
  c.name = "tree";
  v.push_back(c);
  c.name = "dyntree";
  v.push_back(c);
  // PEARL: both halves and each ablation at fixed windows, and the window
  // chosen as it runs (from timings, so from the machine's load: what it
  // emits must not depend on the windows it took).
  c = StrategyConfig();
  c.name = "pearl";
  c.options["pearl_window"] = 3;
  v.push_back(c);
  c.options["pearl_window"] = 4;
  c.options["no_pre_verify"] = true;
  v.push_back(c);
  c.options["pearl_window"] = 2;
  c.options["no_pre_verify"] = false;
  c.options["no_post_verify"] = true;
  v.push_back(c);
  c.options["pearl_window"] = 0;
  c.options["no_post_verify"] = false;
  v.push_back(c);
  // EasySpec: the test drafts have two layers, grouped into one fuzzy group;
  // chain and tree, each calibration policy.
  c = StrategyConfig();
  c.name = "easyspec";
  c.draft_max = 4;
  c.options["lp_groups"] = std::string("0-1");
  v.push_back(c);
  c.options["calibrate"] = std::string("mismatch");
  v.push_back(c);
  c.options["lp_tree"] = true;
  c.options["calibrate"] = std::string("never");
  c.tree_depth = 3;
  c.tree_width = 4;
  v.push_back(c);
  // auto: whatever the cost model picks for the pair on this machine.
  c = StrategyConfig();
  c.name = "auto";
  v.push_back(c);
  // PPD: trees built for two budgets, one with two ensemble tokens per prompt token.
  c = StrategyConfig();
  c.name = "ppd";
  c.options["ppd"] = random_ppd_file(1);
  c.options["ppd_budget"] = 12;
  v.push_back(c);
  c.options["ppd"] = random_ppd_file(2);
  c.options["ppd_budget"] = 24;
  v.push_back(c);
  // PipeDec and its baselines (in one process: on a LocalTarget, whose
  // submit() runs at once; tests/dist runs them on MPI pipelines).
  for (const StrategyConfig& pipeline : pipeline_strategy_variants()) v.push_back(pipeline);
  c = v.back();  // pipedec, then as a chain
  c.tree_depth = 1;
  c.tree_width = 1;
  c.tree_branch = 1;
  v.push_back(c);
  // The pool strategies with the one draft model as their pool (tests/strategies/test_cosine.cpp
  // runs them on pools of several drafters).
  c = StrategyConfig();
  c.name = "specinfer";
  c.draft_max = 3;
  v.push_back(c);
  c.name = "cosine";
  v.push_back(c);
  return v;
}

inline std::string describe(const StrategyConfig& c) {
  std::string options;
  for (const auto& [key, value] : c.options)
    std::visit(
        [&](const auto& v) {
          std::ostringstream text;
          text << ", " << key << " " << v;
          options += text.str();
        },
        value);
  return c.name + options + " (draft_max " + std::to_string(c.draft_max) + ", p_min " +
         std::to_string(c.draft_p_min) + ", depth " + std::to_string(c.tree_depth) + ", branch " +
         std::to_string(c.tree_branch) + ", width " + std::to_string(c.tree_width) + ")";
}

}  // namespace parspec::testing_support
