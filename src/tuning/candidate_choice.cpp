// The cost model's choice: the candidates the families offer, ranked by
// prediction, the choice among them, and the real-run check's decision.
#include <algorithm>
#include <cmath>
#include <cstdio>

#include "core/error.h"
#include "tuning/cost_family.h"
#include "tuning/cost_model.h"

namespace parspec {

std::vector<Candidate> tuned_candidates(const CostMeasurements& m, int max_gamma) {
  std::vector<Candidate> out;
  for (const StrategyInfo& info : strategy_registry()) {
    if (info.cost == nullptr) continue;
    for (const Candidate& c : info.cost->candidates(m, max_gamma)) out.push_back(c);
  }
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
  choice.ar = predict(m, reference_candidate());
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
  if (best.candidate.strategy != reference_strategy_name() &&
      best.tok_per_s > choice.ar.tok_per_s * (1 + margin)) {
    choice.chosen = best.candidate;
    choice.predicted = best;
    std::snprintf(reason, sizeof reason,
                  "%s is predicted fastest: %.1f tok/s, %.2fx ar's %.1f (%.2f tokens per step of "
                  "%.2f ms)",
                  best.candidate.label().c_str(), best.tok_per_s,
                  best.tok_per_s / choice.ar.tok_per_s, choice.ar.tok_per_s, best.tokens_per_step,
                  best.ms_per_step);
  } else {
    choice.chosen = reference_candidate();
    choice.predicted = choice.ar;
    if (best.candidate.strategy == reference_strategy_name())
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
  cost_family(c.strategy).configure(config, c);
  return config;
}

int complexity_rank(const Candidate& c) {
  const int rows = c.depth > 0 ? tree_nodes(tree_level_sizes(c)) : c.param;
  return cost_family(c.strategy).complexity * 1000 + rows;
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

}  // namespace parspec
