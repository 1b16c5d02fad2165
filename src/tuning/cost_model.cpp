#include "tuning/cost_model.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <numeric>
#include <span>

#include "core/error.h"
#include "core/timer.h"
#include "decode/registry.h"
#include "model/forward_timing.h"
#include "model/kv_cache.h"
#include "tokenizer/tokenizer.h"

namespace parspec {

namespace {

// Context cells beyond prompt and generation a candidate may need for its
// speculative cells (a tree's nodes and the levels dyntree keeps).
constexpr int kSpecRoom = 4 * kMaxTreeNodes + 2 * kMaxTunedGamma + 16;

bool is_tree(const std::string& strategy) {
  return strategy == "tree" || strategy == "dyntree";
}

// N: the nodes of a tree with these level sizes.
int tree_nodes(const std::vector<int>& level_sizes) {
  return std::accumulate(level_sizes.begin(), level_sizes.end(), 0);
}

GenerationRequest greedy_request(std::span<const int32_t> prompt, int n_predict) {
  GenerationRequest request;
  request.prompt.assign(prompt.begin(), prompt.end());
  request.n_predict = n_predict;
  request.sampling.temp = 0;
  return request;
}

}  // namespace

std::string Candidate::label() const {
  if (is_tree(strategy)) {
    std::string out = strategy + ":d" + std::to_string(depth) + "c" + std::to_string(branch);
    return strategy == "dyntree" ? out + "w" + std::to_string(width) : out;
  }
  return param > 0 ? strategy + ":" + std::to_string(param) : strategy;
}

double expected_accepted(const CostMeasurements& m, int gamma) {
  check(gamma >= 0 && gamma <= static_cast<int>(m.accept_prefix.size()), "cost model: γ = ", gamma,
        " is beyond the ", m.accept_prefix.size(), " measured draft positions");
  double e = 0;
  for (int k = 0; k < gamma; ++k) e += m.accept_prefix[k];
  return e;
}

std::vector<int> tree_level_sizes(const Candidate& c) {
  check(c.depth >= 1 && c.branch >= 1 && (c.strategy == "tree" || c.width >= 1), "cost model: '",
        c.label(), "' is not a tree shape");
  std::vector<int> sizes;
  int64_t n = 1;
  for (int d = 0; d < c.depth; ++d) {
    n = std::min<int64_t>(n * c.branch, 1 << 20);
    if (c.strategy == "dyntree") n = std::min<int64_t>(n, c.width);
    sizes.push_back(static_cast<int>(n));
  }
  return sizes;
}

double expected_tree_accepted(const CostMeasurements& m, const Candidate& c) {
  const std::vector<int> sizes = tree_level_sizes(c);
  check(c.branch <= static_cast<int>(m.tree_accept.size()) &&
            c.depth <= static_cast<int>(m.tree_accept[c.branch - 1].size()),
        "cost model: tree acceptance was not measured for ", c.label());
  const auto& accept = m.tree_accept[c.branch - 1];
  // Level by level: every node of the level above with its c children, the
  // level's n_d most likely kept (all of them for a full tree).
  std::vector<double> level = {1.0};  // P(node on the target's path), the root
  double expected = 0;
  for (int d = 0; d < c.depth; ++d) {
    std::vector<double> next;
    for (double p : level)
      for (int r = 0; r < c.branch; ++r) next.push_back(p * accept[d][r]);
    std::sort(next.begin(), next.end(), std::greater<>());
    next.resize(std::min<size_t>(next.size(), sizes[d]));
    for (double p : next) expected += p;
    level = std::move(next);
  }
  return expected;
}

namespace {

// T(n): a target step over n tokens.
double target_latency(const CostMeasurements& m, int n) {
  check(n >= 1 && n <= static_cast<int>(m.target_ms.size()), "cost model: L(", n,
        ") was not measured (", m.target_ms.size(), " batch sizes)");
  return m.target_ms[n - 1] + m.target_overhead_ms + (n - 1) * m.verify_row_ms;
}

// D(n): a draft forward over n tokens.
double draft_latency(const CostMeasurements& m, int n) {
  const double ms = n == 1 && m.draft_batch_ms.empty() ? m.draft_ms : -1;
  check(ms >= 0 || (n >= 1 && n <= static_cast<int>(m.draft_batch_ms.size())),
        "cost model: the draft's forward over ", n, " tokens was not measured");
  return (ms >= 0 ? ms : m.draft_batch_ms[n - 1]) + m.draft_overhead_ms;
}

}  // namespace

Prediction predict(const CostMeasurements& m, const Candidate& c) {
  Prediction p;
  p.candidate = c;
  if (c.strategy == "ar") {
    p.tokens_per_step = 1;
    p.ms_per_step = target_latency(m, 1);
  } else if (c.strategy == "sd" || c.strategy == "pearl") {
    const int gamma = c.param;
    check(gamma >= 1, "cost model: ", c.strategy, " needs γ >= 1");
    const double drafted_ms = gamma * (m.draft_ms + m.draft_overhead_ms);
    const double verify_ms = target_latency(m, gamma + 1);
    const double accepted = expected_accepted(m, gamma);
    if (c.strategy == "sd") {
      p.tokens_per_step = 1 + accepted;
      p.ms_per_step = drafted_ms + verify_ms;
    } else {
      p.tokens_per_step = accepted + 1 - m.accept_prefix[gamma - 1];
      p.ms_per_step = m.parallel ? std::max(drafted_ms, verify_ms) : drafted_ms + verify_ms;
      p.ms_per_step /= m.pearl_efficiency > 0 ? m.pearl_efficiency : 1;
    }
  } else if (is_tree(c.strategy)) {
    const std::vector<int> sizes = tree_level_sizes(c);
    const int nodes = tree_nodes(sizes);
    p.tokens_per_step = 1 + expected_tree_accepted(m, c);
    p.ms_per_step =
        draft_latency(m, 1) + target_latency(m, nodes + 1) + nodes * m.tree_node_overhead_ms;
    for (int d = 0; d + 1 < c.depth; ++d) p.ms_per_step += draft_latency(m, sizes[d]);
  } else {
    fail("cost model: no prediction for strategy '", c.strategy, "'");
  }
  p.tok_per_s = p.ms_per_step > 0 ? 1000.0 * p.tokens_per_step / p.ms_per_step : 0;
  return p;
}

std::vector<Candidate> tuned_candidates(const CostMeasurements& m, int max_gamma) {
  std::vector<Candidate> out = {{"ar", 0}};
  const int reach = std::min({max_gamma, static_cast<int>(m.accept_prefix.size()),
                              static_cast<int>(m.target_ms.size()) - 1});
  for (const char* name : {"sd", "pearl"})
    for (int g = 1; g <= reach; ++g) out.push_back({name, g});
  // Tree shapes whose every forward was measured: the node budget is what L(n) reaches.
  const int max_nodes = std::min(kMaxTreeNodes, static_cast<int>(m.target_ms.size()) - 1);
  const auto fits = [&](const Candidate& c) {
    if (c.branch > static_cast<int>(m.tree_accept.size()) ||
        c.depth > static_cast<int>(m.tree_accept[c.branch - 1].size()))
      return false;
    const std::vector<int> sizes = tree_level_sizes(c);
    for (int d = 0; d + 1 < c.depth; ++d)
      if (sizes[d] > std::max<int>(1, m.draft_batch_ms.size())) return false;
    return tree_nodes(sizes) <= max_nodes;
  };
  for (int c = 2; c <= kMaxTreeBranch; ++c)
    for (int d = 1; d <= kMaxTreeDepth && fits(Candidate::tree(d, c)); ++d)
      out.push_back(Candidate::tree(d, c));
  // dyntree: shapes narrower than the full tree of their depth and c.
  for (int c = 2; c <= 3; ++c)
    for (int w = 2; w <= kMaxTreeBranch; ++w)
      for (int d = 2; d <= kMaxTreeDepth && fits(Candidate::dyntree(d, c, w)); ++d)
        if (tree_level_sizes(Candidate::dyntree(d, c, w)) !=
            tree_level_sizes(Candidate::tree(d, c)))
          out.push_back(Candidate::dyntree(d, c, w));
  return out;
}

std::vector<Prediction> rank_candidates(const CostMeasurements& m, int max_gamma) {
  std::vector<Prediction> out;
  for (const Candidate& c : tuned_candidates(m, max_gamma)) out.push_back(predict(m, c));
  std::stable_sort(out.begin(), out.end(), [](const Prediction& a, const Prediction& b) {
    return a.tok_per_s > b.tok_per_s;
  });
  return out;
}

TuneChoice choose_strategy(const CostMeasurements& m, double margin) {
  std::vector<Prediction> ranked = rank_candidates(m);
  std::erase_if(ranked, [&](const Prediction& p) {
    return std::find(m.rejected.begin(), m.rejected.end(), p.candidate.label()) != m.rejected.end();
  });
  TuneChoice choice;
  choice.ar = predict(m, {"ar", 0});
  char reason[640];
  const auto checked = std::find_if(ranked.begin(), ranked.end(), [&](const Prediction& p) {
    return p.candidate.label() == m.measured_best;
  });
  if (!m.measured_best.empty() && checked != ranked.end()) {
    choice.chosen = checked->candidate;
    choice.predicted = *checked;
    // The check's figures: the chosen one's and, when it was not the fastest, the fastest's.
    const CostMeasurements::Checked* mine = nullptr;
    const CostMeasurements::Checked* fastest = nullptr;
    for (const auto& c : m.checked) {
      if (c.label == m.measured_best) mine = &c;
      if (fastest == nullptr || c.tok_per_s > fastest->tok_per_s) fastest = &c;
    }
    std::string measured = "measured fastest";
    if (mine != nullptr && fastest != nullptr && fastest != mine) {
      char tie[200];
      std::snprintf(tie, sizeof tie,
                    "as fast as the fastest, %s, within the check's noise (%.1f%% ± %.1f%% "
                    "slower per prompt) and simpler",
                    fastest->label.c_str(), 100 * mine->slower, 100 * mine->slower_se);
      measured = tie;
    }
    char figures[120] = "";
    if (mine != nullptr && m.checked_ar_tok_per_s > 0)
      std::snprintf(figures, sizeof figures, ": %.1f tok/s against ar's %.1f", mine->tok_per_s,
                    m.checked_ar_tok_per_s);
    std::snprintf(reason, sizeof reason,
                  "%s %s on the calibration prompts of the configurations predicted within %.0f%% "
                  "of the best, and faster than ar%s (predicted %.1f tok/s, %.2fx ar's %.1f; %.2f "
                  "tokens per step of %.2f ms)",
                  m.measured_best.c_str(), measured.c_str(), kRivalMargin * 100, figures,
                  checked->tok_per_s, checked->tok_per_s / choice.ar.tok_per_s, choice.ar.tok_per_s,
                  checked->tokens_per_step, checked->ms_per_step);
    choice.reason = reason;
    return choice;
  }
  const Prediction& best = ranked.front();
  if (best.candidate.strategy != "ar" && best.tok_per_s > choice.ar.tok_per_s * (1 + margin)) {
    choice.chosen = best.candidate;
    choice.predicted = best;
    std::snprintf(reason, sizeof reason,
                  "%s is predicted fastest: %.1f tok/s, %.2fx ar's %.1f (%.2f tokens per step of "
                  "%.2f ms)",
                  best.candidate.label().c_str(), best.tok_per_s,
                  best.tok_per_s / choice.ar.tok_per_s, choice.ar.tok_per_s, best.tokens_per_step,
                  best.ms_per_step);
  } else {
    choice.chosen = {"ar", 0};
    choice.predicted = choice.ar;
    if (best.candidate.strategy == "ar")
      std::snprintf(reason, sizeof reason,
                    "no speculative configuration is predicted faster than ar (%.1f tok/s)",
                    choice.ar.tok_per_s);
    else
      std::snprintf(reason, sizeof reason,
                    "the best speculative configuration, %s at %.1f tok/s, is not more than "
                    "%.0f%% faster than ar's predicted %.1f tok/s",
                    best.candidate.label().c_str(), best.tok_per_s, margin * 100,
                    choice.ar.tok_per_s);
  }
  choice.reason = reason;
  return choice;
}

StrategyConfig config_for_candidate(const StrategyConfig& base, const Candidate& c) {
  StrategyConfig config = base;
  config.name = c.strategy;
  if (c.strategy == "sd") {
    config.draft_max = c.param;
    config.draft_min = 1;
    config.adaptive = false;
    config.draft_p_min = 0;
  } else if (c.strategy == "pearl") {
    config.pearl_window = c.param;
    config.pre_verify = config.post_verify = true;
  } else if (is_tree(c.strategy)) {
    apply_strategy_spec(parse_strategy_spec(c.label()), config);
    config.tree_verify_depth = 0;
    config.lossy_typical = false;
  } else {
    check(c.strategy == "ar", "cost model: cannot run candidate '", c.label(), "'");
  }
  return config;
}

std::vector<std::vector<int32_t>> calibration_prompts(const Model& target) {
  // The last two prompts of each bundled set (bench/prompts/*.jsonl):
  // benchmarks that take the first prompts of each set do not tune on what
  // they measure. Two per set: acceptance varies by prompt more than timing
  // does, so the check (decide_check) needs about ten prompts to resolve
  // differences of 5–10%, and the acceptance rates gain a sample twice as large.
  static const char* const kTexts[] = {
      "def gcd(a, b):\n    \"\"\"Return the greatest common divisor of a and b.\"\"\"\n    while "
      "b:\n",
      "Q: Olivia reads 25 pages on Saturday and twice as many on Sunday. How many pages does she "
      "read over the weekend?\nA:",
      "Whenever you pass the program on to someone else, that person also receives",
      "[Unit]\nDescription=Load the default model into the page cache\nDefaultDependencies=no\n"
      "Conflicts=shutdown.target\nBefore=sysinit.target shutdown.target\n\n[Service]\n"
      "Type=oneshot\nRemainAfterExit=yes\n",
      "Where does Debian keep the documentation of installed packages?",
      "    for i, line in enumerate(lines):\n        if not line.strip():\n            continue\n",
      "Q: A tank holds 250 litres of water. 95 litres are used in the morning and 60 litres in the "
      "evening. How much water is left?\nA:",
      "The examples directory contains several small programs that show how to",
      "# /etc/default/parspec\n# Options passed to the inference server by its service unit.\n\n",
      "What is an exception and how do I catch one?",
  };
  std::vector<std::vector<int32_t>> prompts;
  try {
    const auto tokenizer = Tokenizer::from_gguf(target.gguf());
    for (const char* text : kTexts) {
      std::vector<int32_t> tokens = tokenizer->encode(text, true, false);
      if (!tokens.empty()) prompts.push_back(std::move(tokens));
    }
  } catch (const Error&) {
    prompts.clear();  // no usable tokenizer (e.g. a random test model)
  }
  if (prompts.empty()) {
    const int n_vocab = target.config().n_vocab;
    for (int p = 0; p < 10; ++p) {
      std::vector<int32_t> tokens;
      for (int i = 0; i < 12; ++i) tokens.push_back((p * 131 + i * 17 + 3) % n_vocab);
      prompts.push_back(std::move(tokens));
    }
  }
  return prompts;
}

double CandidateRuns::tok_per_s(size_t k) const {
  const double n = std::accumulate(tokens[k].begin(), tokens[k].end(), 0.0);
  const double t = std::accumulate(ms[k].begin(), ms[k].end(), 0.0);
  return t > 0 ? n * 1000.0 / t : 0;
}

std::vector<double> measure_candidates(const StrategyConfig& base,
                                       const std::vector<Candidate>& candidates,
                                       const std::vector<std::vector<int32_t>>& prompts,
                                       int n_predict) {
  const CandidateRuns runs = run_candidates(base, candidates, prompts, n_predict);
  std::vector<double> out;
  for (size_t k = 0; k < candidates.size(); ++k) out.push_back(runs.tok_per_s(k));
  return out;
}

int complexity_rank(const Candidate& c) {
  static const char* const kOrder[] = {"ar", "sd", "tree", "dyntree", "pearl"};
  const int family =
      static_cast<int>(std::find(std::begin(kOrder), std::end(kOrder), c.strategy) - kOrder);
  const int rows = is_tree(c.strategy) ? tree_nodes(tree_level_sizes(c)) : c.param;
  return family * 1000 + rows;
}

CheckOutcome decide_check(const std::vector<Candidate>& contenders, const CandidateRuns& runs) {
  check(runs.ms.size() == contenders.size() + 1 && !runs.ms.back().empty(),
        "decide_check: the runs must be the contenders' and ar's");
  CheckOutcome out;
  out.ar_tok_per_s = runs.tok_per_s(contenders.size());
  std::vector<size_t> kept;
  for (size_t k = 0; k < contenders.size(); ++k) {
    if (runs.tok_per_s(k) <= out.ar_tok_per_s)
      out.rejected.push_back(contenders[k].label());
    else
      kept.push_back(k);
  }
  size_t fastest = contenders.size();
  for (size_t k : kept)
    if (fastest == contenders.size() || runs.tok_per_s(k) > runs.tok_per_s(fastest)) fastest = k;
  const size_t n_prompts = runs.ms.back().size();
  const auto per_token = [&](size_t k, size_t p) {
    return runs.ms[k][p] / std::max(1.0, runs.tokens[k][p]);
  };
  int best_rank = 0;
  for (size_t k = 0; k < contenders.size(); ++k) {
    CostMeasurements::Checked c{contenders[k].label(), runs.tok_per_s(k), 0, 0};
    if (fastest < contenders.size() && n_prompts > 0) {
      double sum = 0, sum2 = 0;
      for (size_t p = 0; p < n_prompts; ++p) {
        const double d = std::log(per_token(k, p) / per_token(fastest, p));
        sum += d;
        sum2 += d * d;
      }
      c.slower = sum / n_prompts;
      const double var =
          n_prompts > 1 ? std::max(0.0, (sum2 - sum * c.slower) / (n_prompts - 1)) : 0;
      c.slower_se = std::sqrt(var / n_prompts);
    }
    out.checked.push_back(c);
    const bool tie =
        std::find(kept.begin(), kept.end(), k) != kept.end() &&
        (k == fastest || c.slower < std::max(kTieFloor, kTieStandardErrors * c.slower_se));
    if (tie && (out.chosen.empty() || complexity_rank(contenders[k]) < best_rank)) {
      out.chosen = contenders[k].label();
      best_rank = complexity_rank(contenders[k]);
    }
  }
  return out;
}

CandidateRuns run_candidates(const StrategyConfig& base, const std::vector<Candidate>& candidates,
                             const std::vector<std::vector<int32_t>>& prompts, int n_predict) {
  StrategyConfig config = base;
  int longest = 0;
  for (const auto& p : prompts) longest = std::max(longest, static_cast<int>(p.size()));
  config.ctx_size = longest + n_predict + kSpecRoom;
  std::vector<std::unique_ptr<Strategy>> strategies;
  for (const Candidate& c : candidates)
    strategies.push_back(make_strategy(config_for_candidate(config, c)));
  CandidateRuns runs;
  runs.ms.assign(candidates.size(), std::vector<double>(prompts.size(), 0));
  runs.tokens = runs.ms;
  for (size_t p = 0; p < prompts.size(); ++p) {
    for (size_t i = 0; i < strategies.size(); ++i) {
      const size_t k = (i + p) % strategies.size();  // rotated: no one always runs first
      const GenerationRequest request = greedy_request(prompts[p], n_predict);
      const GenerationStats st = strategies[k]->generate(request).stats;
      runs.tokens[k][p] = st.n_gen;
      runs.ms[k][p] = st.t_gen_ms;
    }
  }
  return runs;
}

namespace {

// A cache holding a short committed context with room for `extra` more cells.
KvCache context_cache(const Model& model, Worker& worker, int extra) {
  constexpr int kContext = 32;
  const int n_vocab = model.config().n_vocab;
  KvCache kv(model.config(), kContext + extra + 1);
  std::vector<int32_t> prefix(kContext), path(kContext);
  for (int i = 0; i < kContext; ++i) {
    prefix[i] = (i * 31 + 7) % n_vocab;
    path[i] = i;
  }
  model.forward(worker, Batch::chain(kv, prefix, false), kv);
  kv.commit(path);
  return kv;
}

// The least-squares non-decreasing fit of v (pool adjacent violators).
std::vector<double> non_decreasing(const std::vector<double>& v) {
  std::vector<double> sums, out;
  std::vector<int> counts;
  for (double x : v) {
    sums.push_back(x);
    counts.push_back(1);
    while (sums.size() > 1 &&
           sums[sums.size() - 2] / counts[counts.size() - 2] > sums.back() / counts.back()) {
      sums[sums.size() - 2] += sums.back();
      counts[counts.size() - 2] += counts.back();
      sums.pop_back();
      counts.pop_back();
    }
  }
  for (size_t b = 0; b < sums.size(); ++b)
    for (int i = 0; i < counts[b]; ++i) out.push_back(sums[b] / counts[b]);
  return out;
}

// v linearly interpolated at 1-based position x (v[0] is at 1), clamped to its ends.
double interpolated(const std::vector<double>& v, double x) {
  const double i = std::clamp(x - 1, 0.0, static_cast<double>(v.size() - 1));
  const size_t lo = static_cast<size_t>(i);
  const size_t hi = std::min(lo + 1, v.size() - 1);
  return v[lo] + (i - lo) * (v[hi] - v[lo]);
}

}  // namespace

std::vector<int> draft_ranks(const Model& draft, Worker& worker, const std::vector<int32_t>& tokens,
                             int cap) {
  check(!tokens.empty() && cap >= 1, "draft_ranks: no tokens or a bad cap");
  const int n_vocab = draft.config().n_vocab;
  KvCache kv(draft.config(), static_cast<int>(tokens.size()) + 1);
  const std::vector<float> logits = draft.forward(worker, Batch::chain(kv, tokens, true), kv);
  std::vector<int> ranks(tokens.size(), 0);
  for (size_t j = 1; j < tokens.size(); ++j) {
    // The order of top_c: higher first, the lower id on ties.
    const float* row = &logits[(j - 1) * n_vocab];
    const int32_t t = tokens[j];
    int rank = 0;
    for (int32_t i = 0; i < n_vocab && rank < cap; ++i)
      rank += row[i] > row[t] || (row[i] == row[t] && i < t);
    ranks[j] = rank;
  }
  return ranks;
}

std::vector<std::vector<std::vector<double>>> tree_acceptance(
    const std::vector<std::vector<int>>& ranks, const std::vector<int>& first, int max_depth) {
  check(ranks.size() == first.size() && max_depth >= 1, "tree_acceptance: bad arguments");
  std::vector<std::vector<std::vector<double>>> out;
  for (int c = 1; c <= kMaxTreeBranch; ++c) {
    // Steps of a c-ary tree max_depth deep along each sequence: at depth d the
    // target's token is counted if the depths above it were all accepted.
    std::vector<int64_t> reached(max_depth, 0);
    std::vector<std::vector<int64_t>> at_rank(max_depth, std::vector<int64_t>(c, 0));
    for (size_t s = 0; s < ranks.size(); ++s) {
      const int n = static_cast<int>(ranks[s].size());
      // The first generated token comes from the prompt's forward; steps follow it.
      for (int i = std::max(first[s] + 1, 1); i < n;) {
        int accepted = 0;
        for (int d = 0; d < max_depth && i + d < n; ++d) {
          ++reached[d];
          const int r = ranks[s][i + d];
          if (r >= c) break;
          ++at_rank[d][r];
          accepted = d + 1;
        }
        i += accepted + 1;  // the accepted path and the target's own token
      }
    }
    std::vector<std::vector<double>> table;
    for (int d = 0; d < max_depth; ++d) {
      std::vector<double> row(c, 0.0);
      if (reached[d] == 0 && d > 0) {
        row = table.back();
      } else {
        for (int r = 0; r < c && reached[d] > 0; ++r)
          row[r] = static_cast<double>(at_rank[d][r]) / reached[d];
      }
      table.push_back(std::move(row));
    }
    out.push_back(std::move(table));
  }
  return out;
}

std::vector<double> measure_target_latencies(const Model& target, Worker& worker, int max_n,
                                             int runs) {
  check(max_n >= 1 && runs >= 1, "measure_target_latencies: max_n and runs must be positive");
  KvCache kv = context_cache(target, worker, max_n);
  std::vector<std::vector<double>> times(max_n);
  const auto pass = [&](bool keep) {
    for (int n = 1; n <= max_n; ++n) {
      const double ms = median_forward_ms(target, worker, kv, n, 0, 1, true);
      if (keep) times[n - 1].push_back(ms);
    }
  };
  // A warm-up pass says how many passes fit in about two seconds (at least `runs`).
  const Stopwatch first;
  pass(false);
  const int passes =
      std::clamp(static_cast<int>(2000 / std::max(first.elapsed_ms(), 1e-3)), runs, 51);
  for (int r = 0; r < passes; ++r) pass(true);
  std::vector<double> out;
  for (const auto& t : times) out.push_back(median(t));
  return out;
}

CostMeasurements measure_costs(const StrategyConfig& config,
                               const std::vector<std::vector<int32_t>>& prompts,
                               const CalibrationOptions& options) {
  check(config.target && config.draft && config.target_worker,
        "tuning needs a target, a draft model and a worker");
  check(options.max_gamma >= 1 && options.n_predict >= 1 && options.timing_runs >= 1,
        "tuning: bad calibration options");
  check(!prompts.empty(), "tuning: no calibration prompts");
  const Stopwatch total;
  const auto say = [&](const std::string& s) {
    if (options.progress) options.progress(s);
  };
  const Model& target = *config.target;
  const Model& draft = *config.draft;
  Worker& target_worker = *config.target_worker;
  Worker& draft_worker = config.draft_worker ? *config.draft_worker : target_worker;

  CostMeasurements m;
  const int n_threads_both =
      target_worker.n_threads() +
      (&draft_worker == &target_worker ? target_worker.n_threads() : draft_worker.n_threads());
  m.parallel = n_threads_both <= static_cast<int>(allowed_cores().size());

  // Forward latencies, batch sizes interleaved run by run so that a change in
  // the machine's load affects them all alike.
  const int max_n = std::max(options.max_gamma, options.trees ? kMaxTreeNodes : 0) + 1;
  // Tree levels the drafter scores in one forward: at most kMaxTreeNodes / 2
  // (a drafted level has a level below it).
  const int max_draft_n = options.trees ? kMaxTreeNodes / 2 : 1;
  say("tune: timing target forwards over 1.." + std::to_string(max_n) +
      " tokens and draft forwards over 1.." + std::to_string(max_draft_n) +
      ", and running ar, sd:" + std::to_string(options.max_gamma) +
      (options.trees ? " and dyntree:d3c2w3" : "") + " on " + std::to_string(prompts.size()) +
      " calibration prompts");
  KvCache target_kv = context_cache(target, target_worker, max_n);
  KvCache draft_kv = context_cache(draft, draft_worker, max_draft_n);
  std::vector<std::vector<double>> target_times(max_n), draft_times(max_draft_n);
  // One pass times every batch size once, and the draft twice. A warm-up pass
  // says how many passes fit in about half a second (small models are timed
  // often: their forwards are short and noisy); the passes are spread between
  // the calibration generations below, so that the forwards and the real runs
  // see the same load of the machine.
  const auto timing_pass = [&](int r, bool keep) {
    for (int n = 1; n <= max_n; ++n) {
      const double ms = median_forward_ms(target, target_worker, target_kv, n, 0, 1, true);
      if (keep) target_times[n - 1].push_back(ms);
    }
    for (int n = 1; n <= max_draft_n; ++n)
      for (int k = 0; k < (n == 1 ? 2 : 1); ++k) {
        const double ms = median_forward_ms(draft, draft_worker, draft_kv, n, 0, 1, true);
        if (keep) draft_times[n - 1].push_back(ms);
      }
  };
  const Stopwatch first_pass;
  timing_pass(0, false);
  const double pass_ms = first_pass.elapsed_ms();
  const int runs =
      std::clamp(static_cast<int>(500 / std::max(pass_ms, 1e-3)), options.timing_runs, 51);
  const int passes_per_prompt =
      std::max(1, (runs + static_cast<int>(prompts.size()) - 1) / static_cast<int>(prompts.size()));
  int pass = 1;

  // Acceptance of greedy chain drafting at the longest γ, and what real
  // generations (ar and that sd, prompt by prompt) cost beyond their forwards.
  const int gamma = options.max_gamma;
  StrategyConfig sd = config_for_candidate(config, {"sd", gamma});
  int longest = 0;
  for (const auto& p : prompts) longest = std::max(longest, static_cast<int>(p.size()));
  sd.ctx_size = longest + options.n_predict + kSpecRoom;
  const std::unique_ptr<Strategy> sd_strategy = make_strategy(sd);
  const std::unique_ptr<Strategy> ar_strategy = make_strategy(config_for_candidate(sd, {"ar", 0}));
  // A tree shape whose cost per step, beyond the formula's, prices a node.
  const Candidate tree_shape = Candidate::dyntree(3, 2, 3);
  std::unique_ptr<Strategy> tree_strategy;
  if (options.trees) tree_strategy = make_strategy(config_for_candidate(sd, tree_shape));
  std::vector<int64_t> proposed(gamma, 0), accepted(gamma, 0);
  GenerationStats ar_total, sd_total, tree_total;
  // The target's greedy continuations (prompt + tokens), for tree acceptance.
  std::vector<std::vector<int32_t>> continuations;
  std::vector<int> generated_from;
  for (const auto& prompt : prompts) {
    for (int k = 0; k < passes_per_prompt; ++k) timing_pass(pass++, true);
    const GenerationRequest request = greedy_request(prompt, options.n_predict);
    GenerationResult ar_result = ar_strategy->generate(request);
    const GenerationStats& ar = ar_result.stats;
    generated_from.push_back(static_cast<int>(prompt.size()));
    continuations.push_back(prompt);
    continuations.back().insert(continuations.back().end(), ar_result.tokens.begin(),
                                ar_result.tokens.end());
    ar_total.n_gen += ar.n_gen;
    ar_total.t_gen_ms += ar.t_gen_ms;
    const GenerationStats st = sd_strategy->generate(request).stats;
    m.calibration_tokens += st.n_gen;
    sd_total.t_gen_ms += st.t_gen_ms;
    sd_total.verify_steps += st.verify_steps;
    sd_total.draft_forwards += st.draft_forwards;
    sd_total.drafted += st.drafted;
    sd_total.target_forwards += st.target_forwards;
    sd_total.t_verify_ms += st.t_verify_ms;
    const PositionAcceptance& pa = st.per_position;
    for (size_t k = 0; k < pa.proposed.size() && k < proposed.size(); ++k) {
      proposed[k] += pa.proposed[k];
      accepted[k] += pa.accepted[k];
    }
    if (tree_strategy) {
      const GenerationStats tree = tree_strategy->generate(request).stats;
      tree_total.t_gen_ms += tree.t_gen_ms;
      tree_total.verify_steps += tree.verify_steps;
    }
  }
  // Medians, made non-decreasing in n (a forward over more tokens costs no
  // less; a dip is the machine's noise).
  for (const auto& times : target_times) m.target_ms.push_back(median(times));
  for (const auto& times : draft_times) m.draft_batch_ms.push_back(median(times));
  m.target_ms = non_decreasing(m.target_ms);
  m.draft_batch_ms = non_decreasing(m.draft_batch_ms);
  m.draft_ms = m.draft_batch_ms[0];
  // ar: one target step per token. sd: per step one verification over
  // (drafts + 1) tokens (taken at γ, which nearly all steps draft) and its
  // draft forwards; what remains after the target's overhead is the drafts'.
  // The target's overhead may be negative: a forward timed alone (after the
  // drafter's, other batch sizes') can be slower than one of a run of ar steps.
  if (ar_total.n_gen > 0)
    m.target_overhead_ms =
        std::max(-0.5 * m.target_ms[0], ar_total.t_gen_ms / ar_total.n_gen - m.target_ms[0]);
  if (sd_total.verify_steps > 0 && sd_total.draft_forwards > 0) {
    const double steps = static_cast<double>(sd_total.verify_steps);
    // The verifications' real forwards (the target's meter) against L at
    // their mean row count: the excess over ar's, per row beyond the first.
    const double rows = 1 + sd_total.drafted / steps;
    if (sd_total.target_forwards > 0 && rows > 1.5) {
      const double real_ms = sd_total.t_verify_ms / sd_total.target_forwards;
      const double excess = real_ms - interpolated(m.target_ms, rows) - m.target_overhead_ms;
      m.verify_row_ms =
          std::clamp(excess / (rows - 1), -0.5 * m.target_ms[0] / (rows - 1), m.target_ms[0]);
    }
    const double drafts_per_step = sd_total.draft_forwards / steps;
    const double explained = drafts_per_step * m.draft_ms + interpolated(m.target_ms, rows) +
                             m.target_overhead_ms + (rows - 1) * m.verify_row_ms;
    m.draft_overhead_ms = std::max(0.0, (sd_total.t_gen_ms / steps - explained) / drafts_per_step);
  }
  for (size_t k = 0; k < proposed.size(); ++k) {
    const double rate = proposed[k] > 0 ? static_cast<double>(accepted[k]) / proposed[k] : 0;
    m.accept_prefix.push_back(std::min(k == 0 ? 1.0 : m.accept_prefix.back(), rate));
  }

  if (options.trees) {
    // Per-depth, per-rank acceptance from the drafter's ranks of the target's
    // tokens; the tree shape's real runs price what a node costs beyond the
    // forwards (per step, so that acceptance does not enter).
    std::vector<std::vector<int>> ranks;
    for (const auto& tokens : continuations)
      ranks.push_back(draft_ranks(draft, draft_worker, tokens, kMaxTreeBranch));
    m.tree_accept = tree_acceptance(ranks, generated_from, kMaxTreeDepth);
    const Prediction formula = predict(m, tree_shape);
    if (tree_total.verify_steps > 0)
      m.tree_node_overhead_ms =
          std::max(0.0, (tree_total.t_gen_ms / tree_total.verify_steps - formula.ms_per_step) /
                            tree_nodes(tree_level_sizes(tree_shape)));
  }

  // PEARL at one window, against the formula with the measurements above.
  const int window = std::min(options.pearl_window, gamma);
  if (window >= 1) {
    say("tune: measuring pearl at window " + std::to_string(window));
    const std::unique_ptr<Strategy> pearl =
        make_strategy(config_for_candidate(sd, {"pearl", window}));
    int64_t n_gen = 0;
    double t_gen_ms = 0;
    for (const auto& prompt : prompts) {
      const GenerationRequest request = greedy_request(prompt, options.n_predict);
      const GenerationStats st = pearl->generate(request).stats;
      n_gen += st.n_gen;
      t_gen_ms += st.t_gen_ms;
    }
    const double formula = predict(m, {"pearl", window}).tok_per_s;
    if (n_gen > 0 && t_gen_ms > 0 && formula > 0)
      m.pearl_efficiency = std::clamp(n_gen * 1000.0 / t_gen_ms / formula, 0.05, 1.0);
  }
  m.calibration_s = total.elapsed_ms() / 1000.0;
  return m;
}

}  // namespace parspec
