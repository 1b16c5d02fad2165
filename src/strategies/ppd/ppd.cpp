// `ppd`: parallel prompt decoding ("Hardware-Aware Parallel Prompt Decoding for
// Memory-Efficient Acceleration of LLM Inference"). No drafter: trained prompt
// tokens (strategies/ppd/ppd_prompts.h) appended after the tree's nodes make the
// target predict several tokens ahead in the same forward that verifies the
// previous step's guesses.
//
// One target forward per step over: the root (the last emitted token), the
// candidate nodes of the tree for the current state (the top-ranked tokens of
// the previous step's prompt-token distributions, depth d from prompt token
// d-1), and under every node that carries them, E chains of prompt tokens
// (the ensemble mask: virtual token j of prompt token i sees the node, its
// ancestors and virtual token j of prompt tokens 0..i; one position per
// prompt token). Verification is the shared lossless tree rule: greedy
// descent, or, when sampling, multi-candidate speculative sampling with the
// prompt-token distribution as the draft distribution (children drawn without
// replacement from it). `--lossy-typical` switches to the paper's typical
// acceptance (LOSSY). The prompt-token logits of the node the step ends at
// seed the next step's candidates, and their count selects its tree (the
// dynamic sparse tree, strategies/ppd/ppd_tree.h).
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <filesystem>

#include "core/error.h"
#include "core/timer.h"
#include "decode/driver.h"
#include "decode/local_model.h"
#include "decode/registry.h"
#include "decode/tree_speculation.h"
#include "model/forward_timing.h"
#include "sample/sampler.h"
#include "strategies/ppd/ppd_prompts.h"
#include "strategies/ppd/ppd_tree.h"
#include "tuning/side_timers.h"

namespace parspec {

namespace {

// PPD's online, hardware-aware stage at start-up (`tune --ppd` does it ahead
// of time and also runs the best budgets for real): L(n) of the strategy's own
// target side (tuning/side_timers.h), at n = 1, 2, 3, 4, 6, 8, 12, 16 (median
// of 3 after a warm-up, interpolated between), and the budget whose trees the
// forecast predicts fastest; one row (ar) unless that budget beats it by 5%,
// which the per-step work the forecast leaves out would eat. The meter is
// emptied afterwards.
int hardware_aware_budget(Target& target, const RankAccuracy& accuracy, int ensemble_tokens,
                          std::string* note) {
  constexpr int kMaxBudget = 16, kRuns = 3;
  TargetTimer timer(target, kMaxBudget);
  ForwardCurve curve;
  for (int n : {1, 2, 3, 4, 6, 8, 12, 16})
    curve.points.emplace_back(
        n, sorted_times([&] { return timer.forward_ms(n); }, 1, kRuns)[kRuns / 2]);
  target.take_meter();
  std::vector<double> latency(kMaxBudget);
  for (int n = 1; n <= kMaxBudget; ++n) latency[n - 1] = curve.at(n);
  const std::vector<PpdBudgetChoice> ranked = rank_ppd_budgets(
      accuracy, ensemble_tokens, {1, 2, 3, 4, 5, 6, 8, 10, 12, 14, 16}, latency, 0.0);
  const double one_row = 1000.0 / latency[0];
  const PpdBudgetChoice& best = ranked.front();
  const int chosen = best.budget > 1 && best.tok_per_s >= 1.05 * one_row ? best.budget : 1;
  char line[512];
  std::snprintf(line, sizeof line,
                "ppd: budget %d chosen from this machine's L(n) (L(1) %.3f ms, L(16) %.3f ms): "
                "the best tree forecasts %.0f tok/s (budget %d, %.2f tokens/step) against %.0f at "
                "one row (--ppd-budget N or --ppd-tree FILE fixes it)",
                chosen, latency[0], latency[kMaxBudget - 1], best.tok_per_s, best.budget,
                best.forecast.tokens, one_row);
  *note = line;
  return chosen;
}

StrategyOption ppd_file_option() {
  return option_entry("--ppd", "ppd", "FILE",
                      "PPD prompt tokens (GGUF side file from models/zoo/ppd_train.py; default: "
                      "TARGET.ppd.gguf beside the target model)",
                      std::string());
}
StrategyOption ppd_tree_option() {
  return option_entry("--ppd-tree", "ppd_tree", "FILE",
                      "PPD tree file (from `parspec tune --ppd`); default: trees built from the "
                      "side file's accuracies for --ppd-budget",
                      std::string());
}
StrategyOption ppd_budget_option() {
  return option_entry("--ppd-budget", "ppd_budget", "N",
                      "PPD input rows per step when no tree file is given (0 = the budget this "
                      "machine's L(n), timed at start-up, predicts fastest: one row, which is "
                      "ar, where no tree pays)",
                      0);
}

std::string prompts_path(const StrategyConfig& config) {
  std::string path = option_value<std::string>(config, ppd_file_option());
  if (!path.empty()) return path;
  const std::string beside = ppd_side_file_for(config.target->gguf().path());
  check(std::filesystem::exists(beside),
        "strategy 'ppd' needs trained prompt tokens: give --ppd FILE (none at ", beside, ")");
  return beside;
}

class Ppd final : public DecodeStrategy {
 public:
  explicit Ppd(const StrategyConfig& config)
      : DecodeStrategy(config, make_target_side(config), nullptr),
        prompts_(PpdPrompts::load(prompts_path(config))) {
    prompts_.check_fits(*config.target);
    const std::string tree_path = option_value<std::string>(config, ppd_tree_option());
    if (!tree_path.empty()) {
      trees_ = PpdTrees::load(tree_path);
      check(trees_.max_prompt_tokens <= prompts_.prompt_tokens &&
                trees_.ensemble_tokens == prompts_.ensemble_tokens,
            tree_path, ": the trees are for ", trees_.max_prompt_tokens, " prompt tokens x ",
            trees_.ensemble_tokens, " ensemble tokens, the side file has ", prompts_.prompt_tokens,
            " x ", prompts_.ensemble_tokens);
    } else {
      int budget = option_value<int>(config, ppd_budget_option());
      RankAccuracy accuracy = prompts_.rank_accuracy;
      if (accuracy.empty())  // unmeasured: assume accuracy halving per rank and depth
        for (int d = 0; d < prompts_.prompt_tokens; ++d)
          accuracy.push_back({0.5 / (d + 1), 0.25 / (d + 1), 0.125 / (d + 1)});
      if (budget == 0)
        budget = hardware_aware_budget(*target_, accuracy, prompts_.ensemble_tokens, &budget_note_);
      check(budget >= 1 && budget <= 1024, "--ppd-budget must be 1..1024 (got ", budget, ")");
      trees_ = build_ppd_trees(accuracy, prompts_.ensemble_tokens, budget);
      forecast_ = forecast_ppd_trees(trees_, accuracy);
    }
    for (const auto& state : trees_.states)
      for (const PpdTreeNode& node : state)
        if (!node.ranks.empty())
          max_rank_ = std::max(max_rank_, *std::max_element(node.ranks.begin(), node.ranks.end()));
  }

  std::string name() const override { return "ppd"; }

  // Without a candidate in any state the prompt tokens guess nothing and
  // every step is one row: ar's step with more machinery.
  bool has_guesses() const { return trees_.has_guesses(); }

  std::vector<std::string> notes() const override {
    std::string tree = "ppd: " + std::to_string(prompts_.prompt_tokens) + " prompt tokens x " +
                       std::to_string(prompts_.ensemble_tokens) + " ensemble tokens (" +
                       prompts_.path + "), trees of up to " +
                       std::to_string(trees_.max_input_length()) + " rows per step";
    if (forecast_.tokens > 1)
      tree += ", forecast " + std::to_string(forecast_.tokens).substr(0, 4) + " tokens/step";
    if (budget_note_.empty()) return {tree};
    return {budget_note_, tree};
  }

 protected:
  int spec_budget() const override { return trees_.max_input_length() + 2; }

  void reset() override { next_.clear(); }

  void step(std::vector<int32_t>& emitted) override {
    const int state = std::min<int>(static_cast<int>(next_.size()), trees_.max_prompt_tokens);
    const std::vector<PpdTreeNode>& nodes = trees_.states[state];
    const int32_t root_pos = static_cast<int32_t>(seq_.size()) - 1;

    // Candidate tokens (node 0 is the root). Depth d comes from next_[d-1].
    const int n = static_cast<int>(nodes.size());
    std::vector<int32_t> tokens(n, cur()), depth(n, 0);
    std::vector<uint8_t> used(n, 1);
    choose_candidates(nodes, tokens, used);
    for (int i = 1; i < n; ++i) depth[i] = static_cast<int>(nodes[i].ranks.size());

    // The batch: root and candidates, then every node's prompt-token chains.
    Batch batch;
    const int32_t first = target_->n_spec();
    std::vector<int32_t> row_of(n, -1);
    for (int i = 0; i < n; ++i) {
      if (!used[i]) continue;
      row_of[i] = static_cast<int32_t>(batch.size());
      batch.add(tokens[i], root_pos + depth[i], i == 0 ? -1 : first + row_of[nodes[i].parent],
                true);
      batch.input_embeddings.push_back(nullptr);
    }
    // prompt_rows[i][p * E + j]: the row of virtual token j of prompt token p under node i.
    const int E = prompts_.ensemble_tokens;
    std::vector<std::vector<int32_t>> prompt_rows(n);
    // Prompt tokens predict tokens beyond the next step's root: useless past the request's end.
    const int useful_prompts = std::max(0, remaining() - 1);
    for (int i = 0; i < n; ++i) {
      if (!used[i]) continue;
      const int m = std::min({nodes[i].prompt_tokens, prompts_.prompt_tokens, useful_prompts});
      prompt_rows[i] =
          prompts_.append_rows(batch, tokens[i], root_pos + depth[i], first + row_of[i], first, m);
    }
    const std::vector<float> logits = target_->forward(batch);
    const int V = n_vocab();
    auto row_logits = [&](int32_t row) { return &logits[static_cast<size_t>(row) * V]; };

    // Verification over the candidates (the verifier's node i is tree node i+1).
    std::vector<int32_t> view_tokens, view_parents, tree_node;
    std::vector<int32_t> view_index(n, -1);
    for (int i = 1; i < n; ++i) {
      if (!used[i]) continue;
      view_index[i] = static_cast<int32_t>(view_tokens.size());
      view_tokens.push_back(tokens[i]);
      view_parents.push_back(nodes[i].parent == 0 ? -1 : view_index[nodes[i].parent]);
      tree_node.push_back(i);
    }
    std::vector<Distribution> target_rows(n);
    for (int i = 0; i < n; ++i) {
      if (!used[i]) continue;
      const float* row = row_logits(row_of[i]);
      target_rows[i] = greedy() ? Distribution(row, row + V) : distribution(row);
    }
    auto node_of = [&](int32_t view_node) { return view_node < 0 ? 0 : tree_node[view_node]; };
    const RowFn target_fn = [&](int32_t v) {
      return std::span<const float>(target_rows[node_of(v)]);
    };
    const RowFn draft_fn = [&](int32_t v) {
      const int d = depth[node_of(v)];  // its children are at depth d+1, drawn from next_[d]
      return d < static_cast<int>(next_.size()) ? std::span<const float>(next_[d])
                                                : std::span<const float>();
    };
    const TreeView view{view_tokens, view_parents};
    TreeVerdict verdict;
    {
      ScopedTimer timer(stats_->t_verify_ms);
      if (greedy())
        verdict = verify_tree_greedy(view, target_fn);
      else if (config_.lossy_typical)
        verdict = verify_tree_typical(view, target_fn, rng_);
      else
        verdict = verify_tree_multi_candidate(view, target_fn, draft_fn, rng_);
    }

    // Accounting: every candidate was a proposal; the depth reached is the accepted path
    // plus one when the path's end had candidates below it that were all rejected.
    const int accepted = static_cast<int>(verdict.path.size());
    const int end = verdict.path.empty() ? 0 : tree_node[verdict.path.back()];
    bool end_had_children = false;
    for (int i = 1; i < n; ++i) end_had_children |= used[i] && nodes[i].parent == end;
    stats_->observe_step(static_cast<int64_t>(view_tokens.size()), accepted,
                         accepted + (end_had_children ? 1 : 0));

    for (int32_t v : verdict.path) emitted.push_back(tokens[tree_node[v]]);
    emitted.push_back(verdict.next_token);
    std::vector<int32_t> path = {first + row_of[0]};
    for (int32_t v : verdict.path) path.push_back(first + row_of[tree_node[v]]);
    target_->commit(path, {});

    // The next step's candidates: the end node's prompt tokens, logits averaged over E.
    next_.clear();
    const int m = static_cast<int>(prompt_rows[end].size()) / E;
    for (int p = 0; p < m; ++p) {
      std::vector<float> mean =
          prompts_.mean_logits(prompt_rows[end], p, static_cast<size_t>(V), row_logits);
      next_.push_back(greedy() ? std::move(mean) : distribution(mean.data()));
    }
  }

 private:
  // Greedy: node with rank r at depth d is the r-th most likely token of
  // next_[d-1]. Sampling: the children of a node are drawn without replacement
  // from next_[d-1] (what multi-candidate verification requires), in rank order.
  // Candidates beyond the request's end are not used.
  void choose_candidates(const std::vector<PpdTreeNode>& nodes, std::vector<int32_t>& tokens,
                         std::vector<uint8_t>& used) {
    const int n = static_cast<int>(nodes.size());
    std::vector<std::vector<int32_t>> ranked(next_.size());
    if (greedy())
      for (size_t d = 0; d < next_.size(); ++d) ranked[d] = top_c(next_[d], max_rank_ + 1);
    std::vector<std::vector<int>> children(n);
    for (int i = 1; i < n; ++i) children[nodes[i].parent].push_back(i);
    for (int parent = 0; parent < n; ++parent) {
      if (children[parent].empty()) continue;
      std::vector<int>& kids = children[parent];
      std::stable_sort(kids.begin(), kids.end(),
                       [&](int a, int b) { return nodes[a].ranks.back() < nodes[b].ranks.back(); });
      const int d = static_cast<int>(nodes[parent].ranks.size());  // children at depth d+1
      std::vector<float> remaining_mass;
      if (!greedy() && used[parent]) remaining_mass = next_[d];
      for (int child : kids) {
        bool ok = used[parent] && d + 1 < remaining() && d < static_cast<int>(next_.size());
        if (ok && greedy()) {
          const int r = nodes[child].ranks.back();
          ok = r < static_cast<int>(ranked[d].size());
          if (ok) tokens[child] = ranked[d][r];
        } else if (ok) {
          double mass = 0;
          for (float v : remaining_mass) mass += v;
          ok = mass > 0;
          if (ok) {
            tokens[child] = sample_from(std::span<const float>(remaining_mass), rng_);
            remaining_mass[tokens[child]] = 0.0f;
          }
        }
        used[child] = ok ? 1 : 0;
      }
    }
  }

  PpdPrompts prompts_;
  PpdTrees trees_;
  PpdTreeForecast forecast_;
  std::string budget_note_;  // how the budget was chosen, when it was
  int max_rank_ = 0;
  // Distributions of the next step's candidates per depth (logits when greedy).
  std::vector<Distribution> next_;
};

// ppd whose trees have no guesses (`parspec tune --ppd` chooses budget 1 where
// no tree pays, as on a target that lives in cache): it decodes with ar's own
// strategy, so at ar's cost, and says so once in its notes.
class PpdWithoutGuesses final : public Strategy {
 public:
  PpdWithoutGuesses(const StrategyConfig& config, std::vector<std::string> notes)
      : notes_(std::move(notes)) {
    StrategyConfig ar = config;
    ar.name = "ar";
    inner_ = make_strategy(ar);
    notes_.push_back(
        "ppd: the tree has no guesses (the root alone, one row per step): decodes as ar");
  }
  std::string name() const override { return "ppd"; }
  std::string runs() const override { return "ar"; }
  GenerationResult generate(const GenerationRequest& request) override {
    return inner_->generate(request);
  }
  std::vector<std::string> notes() const override { return notes_; }

 private:
  std::unique_ptr<Strategy> inner_;
  std::vector<std::string> notes_;
};

std::unique_ptr<Strategy> make_ppd(const StrategyConfig& config) {
  auto ppd = std::make_unique<Ppd>(config);
  if (ppd->has_guesses()) return ppd;
  return std::make_unique<PpdWithoutGuesses>(config, ppd->notes());
}

}  // namespace

StrategyConfig ppd_config_at_budget(const StrategyConfig& base, const std::string& ppd_path,
                                    int budget) {
  StrategyConfig c = base;
  c.name = "ppd";
  ppd_file_option().set(c, ppd_path);
  ppd_budget_option().set(c, budget);
  return c;
}

StrategyInfo ppd_strategy() {
  return {.name = "ppd",
          .summary = "parallel prompt decoding: trained prompt tokens, no drafter (--ppd FILE)",
          .needs_draft = false,
          .options = {ppd_file_option(), ppd_tree_option(), ppd_budget_option(),
                      lossy_typical_option()},
          .variant_key = "ppd_budget",
          .make = make_ppd};
}

}  // namespace parspec
