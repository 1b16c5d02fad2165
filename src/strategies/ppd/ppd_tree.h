#pragma once
// PPD's dynamic sparse trees and their two-stage, hardware-aware construction
// ("Hardware-Aware Parallel Prompt Decoding for Memory-Efficient Acceleration
// of LLM Inference", section 4 and appendix A).
//
// A step's tree depends on its state k: how many prompt tokens the node
// accepted last carried, i.e. how many depths of candidates the previous step
// predicted. Node = path of top-rank indices from the root (rank r at depth d:
// the r-th most likely token of prompt token d-1's distribution) plus the
// number of prompt tokens appended to it (the next state if the step ends
// there). The input of a step in state k has 1 + |candidates| + E * Σ prompt
// tokens rows (E ensemble tokens per prompt token).
//
// Construction for an input-length budget N, from measured per-depth rank
// accuracies acc[d][r]: (1) candidates best-first by Π acc along the path
// (Medusa/Sequoia); (2) every node starts with the maximum prompt tokens, and
// prompt tokens are removed where the loss of expected accepted tokens,
// P(step ends at the node) * (f(m) - f(m-1)), is smallest until N holds. f(m)
// is the expected tokens of a step in state m; the stationary distribution of
// the Markov chain over states gives the expected tokens per step overall.
// Online: with L(n), the measured target latency for n rows, choose N to
// maximize tokens per step / time per step.
#include <string>
#include <vector>

#include "decode/strategy.h"

namespace parspec {

struct PpdTreeNode {
  std::vector<int> ranks;  // empty: the root
  int parent = -1;         // index in the state's node list (-1 for the root)
  int prompt_tokens = 0;   // prompt tokens appended after the node
};

struct PpdTrees {
  int max_prompt_tokens = 0;  // K: states 0..K
  int ensemble_tokens = 1;    // E
  int budget = 0;             // the input-length budget it was built for (0: unknown)
  // states[k]: root first, parents before children (BFS order).
  std::vector<std::vector<PpdTreeNode>> states;

  int candidates(int state) const { return static_cast<int>(states[state].size()) - 1; }
  // Rows of a step's forward in `state`.
  int input_length(int state) const;
  int max_input_length() const;
  // Whether some state's tree has a candidate (budget 1 builds the root alone:
  // no guesses, and ppd then decodes as ar).
  bool has_guesses() const;
  // The text form (a header, then per state "state K" and one "node RANKS PROMPTS"
  // line per node, RANKS "-" for the root, else dot-separated).
  std::string to_text() const;
  // Throws Error naming the line for a malformed file or a tree that does not
  // fit prompt tokens k (a candidate deeper than its state, more prompt tokens
  // than k, a node whose parent is missing).
  static PpdTrees parse(const std::string& text, const std::string& name);
  static PpdTrees load(const std::string& path);
  void save(const std::string& path) const;
};

struct PpdTreeForecast {
  std::vector<double> stationary;       // P(state k) in the long run
  std::vector<double> tokens_per_step;  // per state: 1 + expected accepted candidates
  double tokens = 1;                    // expected tokens per step overall
  double rows = 1;                      // expected forward rows per step
};

// rank_accuracy[d][r]: depth d+1's rank-r accuracy (the side file's table).
using RankAccuracy = std::vector<std::vector<double>>;

// The Markov-chain forecast of `trees` under `accuracy`.
PpdTreeForecast forecast_ppd_trees(const PpdTrees& trees, const RankAccuracy& accuracy);

// Two-stage construction for input length at most `budget` (>= 1) per step.
PpdTrees build_ppd_trees(const RankAccuracy& accuracy, int ensemble_tokens, int budget);

struct PpdBudgetChoice {
  int budget = 0;
  PpdTrees trees;
  PpdTreeForecast forecast;
  double ms_per_step = 0;
  double tok_per_s = 0;
};

// For each budget in `budgets` (each <= target_ms.size()): trees, forecast and
// predicted speed with L(n) = target_ms[n-1] + overhead_ms; fastest first.
std::vector<PpdBudgetChoice> rank_ppd_budgets(const RankAccuracy& accuracy, int ensemble_tokens,
                                              const std::vector<int>& budgets,
                                              const std::vector<double>& target_ms,
                                              double overhead_ms);

// `base` as a ppd config with the prompt tokens of `ppd_path` (--ppd) and
// their trees built for `budget` (--ppd-budget): what `tune --ppd` runs.
StrategyConfig ppd_config_at_budget(const StrategyConfig& base, const std::string& ppd_path,
                                    int budget);

}  // namespace parspec
