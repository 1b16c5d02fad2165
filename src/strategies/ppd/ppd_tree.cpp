#include "strategies/ppd/ppd_tree.h"

#include <algorithm>
#include <fstream>
#include <map>
#include <queue>
#include <sstream>

#include "core/error.h"

namespace parspec {

namespace {

constexpr int kMaxRank = 64;
constexpr int kMaxNodes = 4096;

double rank_accuracy_at(const RankAccuracy& acc, int depth, int rank) {
  if (depth < 1 || depth > static_cast<int>(acc.size())) return 0.0;
  const auto& row = acc[depth - 1];
  return rank < static_cast<int>(row.size()) ? row[rank] : 0.0;
}

// P(the path to each node is accepted) under independent per-depth accuracies.
std::vector<double> path_probabilities(const std::vector<PpdTreeNode>& nodes,
                                       const RankAccuracy& acc) {
  std::vector<double> p(nodes.size(), 1.0);
  for (size_t i = 1; i < nodes.size(); ++i) {
    const auto& ranks = nodes[i].ranks;
    p[i] = p[nodes[i].parent] * rank_accuracy_at(acc, static_cast<int>(ranks.size()), ranks.back());
  }
  return p;
}

// P(the accepted path ends at each node).
std::vector<double> end_probabilities(const std::vector<PpdTreeNode>& nodes,
                                      const std::vector<double>& p) {
  std::vector<double> end = p;
  for (size_t i = 1; i < nodes.size(); ++i) end[nodes[i].parent] -= p[i];
  for (double& e : end) e = std::max(0.0, e);
  return end;
}

// Candidate nodes of a tree of depth <= max_depth, best first (each after its parent).
std::vector<PpdTreeNode> best_first_candidates(const RankAccuracy& acc, int max_depth, int n) {
  std::vector<PpdTreeNode> out = {PpdTreeNode{}};
  std::vector<double> prob = {1.0};
  if (max_depth < 1 || n < 1) return out;
  const int ranks = static_cast<int>(acc.empty() ? 0 : acc[0].size());
  using Item = std::pair<double, std::pair<int, int>>;  // p, (parent index, rank)
  auto worse = [](const Item& a, const Item& b) {
    return a.first < b.first || (a.first == b.first && a.second > b.second);
  };
  std::priority_queue<Item, std::vector<Item>, decltype(worse)> heap(worse);
  auto push_children = [&](int parent) {
    const int depth = static_cast<int>(out[parent].ranks.size()) + 1;
    if (depth > max_depth) return;
    for (int r = 0; r < std::min(ranks, kMaxRank); ++r)
      heap.push({prob[parent] * rank_accuracy_at(acc, depth, r), {parent, r}});
  };
  push_children(0);
  while (static_cast<int>(out.size()) <= n && !heap.empty()) {
    const Item top = heap.top();
    heap.pop();
    PpdTreeNode node;
    node.parent = top.second.first;
    node.ranks = out[node.parent].ranks;
    node.ranks.push_back(top.second.second);
    out.push_back(node);
    prob.push_back(top.first);
    push_children(static_cast<int>(out.size()) - 1);
  }
  return out;
}

// Stage 2 for one candidate tree: prompt tokens removed greedily by the
// smallest loss of expected tokens until the rows fit the budget. Returns the
// lookahead value (accepted candidates now + expected tokens of the next step)
// or a negative number when the budget cannot hold the candidates.
double assign_prompt_tokens(std::vector<PpdTreeNode>& nodes, const RankAccuracy& acc, int ensemble,
                            int budget, const std::vector<double>& value) {
  const int max_prompts = static_cast<int>(value.size()) - 1;
  const std::vector<double> p = path_probabilities(nodes, acc);
  const std::vector<double> end = end_probabilities(nodes, p);
  int rows = static_cast<int>(nodes.size());
  if (rows > budget) return -1.0;
  for (auto& node : nodes) {
    node.prompt_tokens = max_prompts;
    rows += ensemble * max_prompts;
  }
  while (rows > budget) {
    int best = -1;
    double best_loss = 0;
    for (size_t i = 0; i < nodes.size(); ++i) {
      const int m = nodes[i].prompt_tokens;
      if (m == 0) continue;
      const double loss = end[i] * (value[m] - value[m - 1]);
      // Ties: deeper nodes (later in BFS order) lose their prompt tokens first.
      if (best < 0 || loss <= best_loss) {
        best = static_cast<int>(i);
        best_loss = loss;
      }
    }
    if (best < 0) return -1.0;
    --nodes[best].prompt_tokens;
    rows -= ensemble;
  }
  double score = 0;
  for (size_t i = 0; i < nodes.size(); ++i)
    score += (i > 0 ? p[i] : 0.0) + end[i] * value[nodes[i].prompt_tokens];
  return score;
}

std::vector<PpdTreeNode> build_state(const RankAccuracy& acc, int ensemble, int budget, int state,
                                     const std::vector<double>& value) {
  const std::vector<PpdTreeNode> order =
      best_first_candidates(acc, state, std::min(budget - 1, kMaxNodes - 1));
  std::vector<PpdTreeNode> best;
  double best_score = -1;
  for (size_t n = 1; n <= order.size(); ++n) {
    std::vector<PpdTreeNode> nodes(order.begin(), order.begin() + n);
    const double score = assign_prompt_tokens(nodes, acc, ensemble, budget, value);
    if (score >= best_score - 1e-12) {  // ties: more candidates (tokens now, not promises)
      best_score = score;
      best = std::move(nodes);
    }
  }
  // BFS order (depth, then rank path) so that parents precede children; remap parents.
  std::vector<int> idx(best.size());
  for (size_t i = 0; i < idx.size(); ++i) idx[i] = static_cast<int>(i);
  std::stable_sort(idx.begin(), idx.end(), [&](int a, int b) {
    if (best[a].ranks.size() != best[b].ranks.size())
      return best[a].ranks.size() < best[b].ranks.size();
    return best[a].ranks < best[b].ranks;
  });
  std::vector<int> new_index(best.size());
  for (size_t i = 0; i < idx.size(); ++i) new_index[idx[i]] = static_cast<int>(i);
  std::vector<PpdTreeNode> sorted;
  for (int i : idx) {
    PpdTreeNode node = best[i];
    if (node.parent >= 0) node.parent = new_index[node.parent];
    sorted.push_back(node);
  }
  return sorted;
}

}  // namespace

int PpdTrees::input_length(int state) const {
  int rows = 0;
  for (const PpdTreeNode& node : states[state]) rows += 1 + ensemble_tokens * node.prompt_tokens;
  return rows;
}

int PpdTrees::max_input_length() const {
  int rows = 0;
  for (size_t k = 0; k < states.size(); ++k)
    rows = std::max(rows, input_length(static_cast<int>(k)));
  return rows;
}

bool PpdTrees::has_guesses() const {
  for (int k = 0; k < static_cast<int>(states.size()); ++k)
    if (candidates(k) > 0) return true;
  return false;
}

std::string PpdTrees::to_text() const {
  std::ostringstream out;
  out << "# parspec PPD trees: per state k (prompt tokens of the last accepted node) one line per\n"
         "# node: its path of top-rank indices from the root ('-': the root) and its prompt "
         "tokens\n";
  out << "ppd-trees 1\nprompt_tokens " << max_prompt_tokens << "\nensemble_tokens "
      << ensemble_tokens << "\nbudget " << budget << "\n";
  for (size_t k = 0; k < states.size(); ++k) {
    out << "state " << k << "\n";
    for (const PpdTreeNode& node : states[k]) {
      out << "node ";
      if (node.ranks.empty()) out << "-";
      for (size_t d = 0; d < node.ranks.size(); ++d) out << (d ? "." : "") << node.ranks[d];
      out << " " << node.prompt_tokens << "\n";
    }
  }
  return out.str();
}

PpdTrees PpdTrees::parse(const std::string& text, const std::string& name) {
  PpdTrees t;
  std::istringstream in(text);
  std::string line;
  int line_no = 0;
  bool header = false;
  std::map<std::vector<int>, int> index;  // of the current state's nodes
  const auto bad = [&](const auto&... why) { fail(name, ":", line_no, ": ", why...); };
  while (std::getline(in, line)) {
    ++line_no;
    if (const auto hash = line.find('#'); hash != std::string::npos) line.resize(hash);
    std::istringstream fields(line);
    std::string key;
    if (!(fields >> key)) continue;
    if (key == "ppd-trees") {
      int version = 0;
      if (!(fields >> version) || version != 1) bad("unsupported version (expected 'ppd-trees 1')");
      header = true;
      continue;
    }
    if (!header) bad("not a PPD tree file (the first line must be 'ppd-trees 1')");
    int value = 0;
    if (key == "prompt_tokens" || key == "ensemble_tokens" || key == "budget") {
      if (!(fields >> value) || value < 0 || value > kMaxNodes) bad("bad value for ", key);
      if (key == "prompt_tokens") t.max_prompt_tokens = value;
      if (key == "ensemble_tokens") t.ensemble_tokens = value;
      if (key == "budget") t.budget = value;
    } else if (key == "state") {
      if (!(fields >> value) || value != static_cast<int>(t.states.size()))
        bad("states must be numbered 0, 1, ... in order");
      if (value > t.max_prompt_tokens) bad("state ", value, " exceeds prompt_tokens");
      t.states.emplace_back();
      index.clear();
    } else if (key == "node") {
      if (t.states.empty()) bad("a node before the first 'state' line");
      std::string path;
      PpdTreeNode node;
      if (!(fields >> path >> node.prompt_tokens)) bad("expected 'node RANKS PROMPT_TOKENS'");
      if (node.prompt_tokens < 0 || node.prompt_tokens > t.max_prompt_tokens)
        bad("prompt tokens ", node.prompt_tokens, " outside 0..", t.max_prompt_tokens);
      auto& nodes = t.states.back();
      if (path == "-") {
        if (!nodes.empty()) bad("the root must be the first node of a state, and only once");
      } else {
        if (nodes.empty()) bad("the root ('-') must be the first node of a state");
        std::istringstream ranks(path);
        std::string part;
        while (std::getline(ranks, part, '.')) {
          int r = -1;
          try {
            size_t used = 0;
            r = std::stoi(part, &used);
            if (used != part.size()) r = -1;
          } catch (const std::exception&) {
          }
          if (r < 0 || r >= kMaxRank) bad("bad rank '", part, "' (0..", kMaxRank - 1, ")");
          node.ranks.push_back(r);
        }
        const int state = static_cast<int>(t.states.size()) - 1;
        if (static_cast<int>(node.ranks.size()) > state)
          bad("a candidate at depth ", node.ranks.size(), " in state ", state, " (only ", state,
              " depths are predicted)");
        std::vector<int> parent_path(node.ranks.begin(), node.ranks.end() - 1);
        const auto parent = index.find(parent_path);
        if (parent == index.end()) bad("node ", path, " comes before its parent");
        if (index.count(node.ranks)) bad("node ", path, " appears twice");
        node.parent = parent->second;
      }
      if (static_cast<int>(nodes.size()) >= kMaxNodes) bad("more than ", kMaxNodes, " nodes");
      index[node.ranks] = static_cast<int>(nodes.size());
      nodes.push_back(node);
    } else {
      bad("unknown key '", key, "'");
    }
  }
  if (!header) fail(name, ": not a PPD tree file (empty)");
  if (t.ensemble_tokens < 1) fail(name, ": ensemble_tokens must be at least 1");
  if (static_cast<int>(t.states.size()) != t.max_prompt_tokens + 1)
    fail(name, ": ", t.states.size(), " states for prompt_tokens ", t.max_prompt_tokens,
         " (expected one per state 0..", t.max_prompt_tokens, ")");
  for (size_t k = 0; k < t.states.size(); ++k)
    if (t.states[k].empty()) fail(name, ": state ", k, " has no root");
  return t;
}

PpdTrees PpdTrees::load(const std::string& path) {
  std::ifstream in(path);
  check(in.good(), "cannot open the PPD tree file ", path);
  std::stringstream text;
  text << in.rdbuf();
  return parse(text.str(), path);
}

void PpdTrees::save(const std::string& path) const {
  std::ofstream out(path);
  out << to_text();
  out.close();
  check(out.good(), "cannot write the PPD tree file ", path);
}

PpdTreeForecast forecast_ppd_trees(const PpdTrees& trees, const RankAccuracy& accuracy) {
  const int n_states = static_cast<int>(trees.states.size());
  PpdTreeForecast f;
  std::vector<std::vector<double>> next(n_states, std::vector<double>(n_states, 0.0));
  for (int k = 0; k < n_states; ++k) {
    const auto& nodes = trees.states[k];
    const std::vector<double> p = path_probabilities(nodes, accuracy);
    const std::vector<double> end = end_probabilities(nodes, p);
    double tokens = 1;
    for (size_t i = 1; i < nodes.size(); ++i) tokens += p[i];
    f.tokens_per_step.push_back(tokens);
    double total = 0;
    for (size_t i = 0; i < nodes.size(); ++i) total += end[i];
    for (size_t i = 0; i < nodes.size(); ++i)
      next[k][nodes[i].prompt_tokens] += total > 0 ? end[i] / total : 0.0;
  }
  // Power iteration from the state the first step starts in (no prompt logits yet).
  std::vector<double> pi(n_states, 0.0), avg(n_states, 0.0);
  pi[0] = 1.0;
  const int iterations = 2000;
  for (int it = 0; it < iterations; ++it) {
    std::vector<double> nxt(n_states, 0.0);
    for (int k = 0; k < n_states; ++k)
      for (int m = 0; m < n_states; ++m) nxt[m] += pi[k] * next[k][m];
    pi = std::move(nxt);
    // Averaging the last half of the iterates also settles periodic chains.
    if (it >= iterations / 2)
      for (int k = 0; k < n_states; ++k) avg[k] += pi[k] / (iterations - iterations / 2);
  }
  f.stationary = avg;
  f.tokens = 0;
  f.rows = 0;
  for (int k = 0; k < n_states; ++k) {
    f.tokens += avg[k] * f.tokens_per_step[k];
    f.rows += avg[k] * trees.input_length(k);
  }
  return f;
}

PpdTrees build_ppd_trees(const RankAccuracy& accuracy, int ensemble_tokens, int budget) {
  check(!accuracy.empty(), "PPD trees: no rank accuracies (the side file lacks ppd.rank_accuracy)");
  check(ensemble_tokens >= 1, "PPD trees: ensemble tokens must be at least 1");
  check(budget >= 1 && budget <= kMaxNodes, "PPD tree budget must be 1..", kMaxNodes, " (got ",
        budget, ")");
  const int K = static_cast<int>(accuracy.size());
  // f(m): expected tokens of a step in state m; first the top-1 chain's, then the trees'.
  std::vector<double> value(K + 1, 1.0);
  double chain = 1.0;
  for (int m = 1; m <= K; ++m) {
    chain *= rank_accuracy_at(accuracy, m, 0);
    value[m] = value[m - 1] + chain;
  }
  PpdTrees trees, best;
  trees.max_prompt_tokens = K;
  trees.ensemble_tokens = ensemble_tokens;
  trees.budget = budget;
  double best_tokens = -1;
  // The states' values and trees depend on each other: a few rounds, keeping the
  // set whose Markov-chain forecast is best (a round can settle on a poor fixed
  // point, e.g. prompt tokens kept where no candidate ever uses them).
  for (int round = 0; round < 6; ++round) {
    trees.states.clear();
    for (int k = 0; k <= K; ++k)
      trees.states.push_back(build_state(accuracy, ensemble_tokens, budget, k, value));
    const PpdTreeForecast f = forecast_ppd_trees(trees, accuracy);
    if (f.tokens > best_tokens + 1e-12) {
      best_tokens = f.tokens;
      best = trees;
    }
    for (int m = 0; m <= K; ++m) value[m] = std::max(value[m], f.tokens_per_step[m]);
    // Keep f non-decreasing in m (more predicted depths never hurt).
    for (int m = 1; m <= K; ++m) value[m] = std::max(value[m], value[m - 1]);
  }
  return best;
}

std::vector<PpdBudgetChoice> rank_ppd_budgets(const RankAccuracy& accuracy, int ensemble_tokens,
                                              const std::vector<int>& budgets,
                                              const std::vector<double>& target_ms,
                                              double overhead_ms) {
  std::vector<PpdBudgetChoice> out;
  for (int budget : budgets) {
    check(budget >= 1 && budget <= static_cast<int>(target_ms.size()), "PPD budget ", budget,
          ": L(n) was measured for n up to ", target_ms.size());
    PpdBudgetChoice c;
    c.budget = budget;
    c.trees = build_ppd_trees(accuracy, ensemble_tokens, budget);
    c.forecast = forecast_ppd_trees(c.trees, accuracy);
    for (size_t k = 0; k < c.trees.states.size(); ++k)
      c.ms_per_step += c.forecast.stationary[k] *
                       (target_ms[c.trees.input_length(static_cast<int>(k)) - 1] + overhead_ms);
    c.tok_per_s = c.ms_per_step > 0 ? 1000.0 * c.forecast.tokens / c.ms_per_step : 0.0;
    out.push_back(std::move(c));
  }
  std::stable_sort(out.begin(), out.end(), [](const PpdBudgetChoice& a, const PpdBudgetChoice& b) {
    return a.tok_per_s > b.tok_per_s;
  });
  return out;
}

}  // namespace parspec
