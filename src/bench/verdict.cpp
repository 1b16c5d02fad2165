#include "bench/verdict.h"

#include <algorithm>
#include <map>
#include <set>
#include <vector>

#include "bench/text_format.h"
#include "decode/registry.h"

namespace parspec {

namespace {

// The rows over every prompt set, or those of the only set that ran.
std::vector<const BenchResult*> widest_rows(const BenchReport& report) {
  std::vector<const BenchResult*> rows;
  for (const BenchResult& r : report.results)
    if (r.prompt_set == kAllSets) rows.push_back(&r);
  if (rows.empty())
    for (const BenchResult& r : report.results) rows.push_back(&r);
  return rows;
}

// "auto (ran sd:3)" where the report says a label ran something else.
std::string display_name(const BenchReport& report, const std::string& label) {
  const auto chosen = report.config.find("chosen");
  if (chosen == report.config.end() || !chosen->is_object()) return label;
  const auto ran = chosen->find(label);
  if (ran == chosen->end() || !ran->is_string() || ran->get<std::string>() == label) return label;
  return label + " (ran " + ran->get<std::string>() + ")";
}

std::string mismatch_line(const BenchReport& report) {
  std::set<std::string> strategies;
  for (const Mismatch& m : report.mismatches) strategies.insert(m.strategy);
  std::string names;
  for (const std::string& s : strategies) names += (names.empty() ? "" : ", ") + s;
  return printf_text(
      "verdict: FAILED: %zu greedy run%s of %s differ%s from ar's output, so a strategy is not "
      "lossless here and the speeds prove nothing\n",
      report.mismatches.size(), report.mismatches.size() == 1 ? "" : "s", names.c_str(),
      report.mismatches.size() == 1 ? "s" : "");
}

const char* cause_lead(StepCostCause cause) {
  switch (cause) {
    case StepCostCause::kVerify:
      return "one forward over several tokens costs several one-token forwards on this machine";
    case StepCostCause::kDraft:
      return "drafting costs more than its tokens save";
    case StepCostCause::kOther:
      return "time outside drafting and verifying (bookkeeping, waiting between threads)";
  }
  return "";
}

const char* cause_part(StepCostCause cause) {
  switch (cause) {
    case StepCostCause::kVerify:
      return "verifying";
    case StepCostCause::kDraft:
      return "drafting";
    case StepCostCause::kOther:
      return "elsewhere";
  }
  return "";
}

double cause_cost(const StepCost& cost, StepCostCause cause) {
  switch (cause) {
    case StepCostCause::kVerify:
      return cost.verify;
    case StepCostCause::kDraft:
      return cost.draft;
    case StepCostCause::kOther:
      return cost.other();
  }
  return 0;
}

}  // namespace

StepCostCause StepCost::main_cause() const {
  // One forward is what any step costs at least, ar's included: only the
  // verification's excess over it counts against verifying.
  const double verify_excess = verify - 1.0;
  if (verify_excess >= draft && verify_excess >= other()) return StepCostCause::kVerify;
  return draft >= other() ? StepCostCause::kDraft : StepCostCause::kOther;
}

StepCost step_cost(const BenchResult& r, const BenchResult& ar) {
  StepCost cost;
  if (r.total.verify_steps <= 0 || r.total.t_gen_ms <= 0 || ar.total.n_gen <= 0 ||
      ar.total.t_gen_ms <= 0)
    return cost;
  const double ar_step_ms = ar.total.t_gen_ms / static_cast<double>(ar.total.n_gen);
  cost.step = r.total.t_gen_ms / static_cast<double>(r.total.verify_steps) / ar_step_ms;
  cost.draft = r.t_draft_ms() / ar_step_ms;
  cost.verify = r.t_verify_ms() / ar_step_ms;
  return cost;
}

std::string bench_verdict(const BenchReport& report) {
  if (!report.mismatches.empty()) return mismatch_line(report);
  const std::vector<const BenchResult*> rows = widest_rows(report);
  const auto ar_it = std::find_if(rows.begin(), rows.end(), [](const BenchResult* r) {
    return r->strategy == reference_strategy_name();
  });
  if (ar_it == rows.end()) return "verdict: no ar row to compare with\n";
  const BenchResult& ar = **ar_it;
  const BenchResult* fastest = *std::max_element(
      rows.begin(), rows.end(),
      [](const BenchResult* a, const BenchResult* b) { return a->tok_per_s() < b->tok_per_s(); });

  std::string text;
  if (fastest == &ar) {
    text = printf_text("verdict: ar is the fastest here (%.2f tok/s): no strategy beat it",
                       ar.tok_per_s());
  } else {
    text = printf_text(
        "verdict: %s is the fastest here: %.2fx ar (%.2f against %.2f tok/s), tau %.2f tokens per "
        "verification step",
        display_name(report, fastest->strategy).c_str(), fastest->speedup, fastest->tok_per_s(),
        ar.tok_per_s(), fastest->tau());
  }
  text += report.exactness_checked ? "; every greedy output equals ar's\n" : "\n";

  // Every strategy's speedup as tau over its step cost, fastest first: whether
  // it trails by yielding fewer tokens per step or by costlier steps.
  struct Row {
    const BenchResult* r;
    StepCost cost;
  };
  std::vector<Row> by_speed;
  for (const BenchResult* r : rows)
    if (r != &ar) by_speed.push_back({r, step_cost(*r, ar)});
  std::stable_sort(by_speed.begin(), by_speed.end(),
                   [](const Row& a, const Row& b) { return a.r->tok_per_s() > b.r->tok_per_s(); });
  std::string terms;
  for (const auto& [r, cost] : by_speed) {
    if (cost.step <= 0) continue;
    terms +=
        printf_text("%s%s %.2fx = %.2f / %.2f", terms.empty() ? "" : ", ",
                    display_name(report, r->strategy).c_str(), r->speedup, r->tau(), cost.step);
  }
  if (!terms.empty())
    text += printf_text("speedup = tau / the cost of a step in ar steps (%.2f ms each): %s\n",
                        ar.total.t_gen_ms / static_cast<double>(ar.total.n_gen), terms.c_str());

  // A verification over several tokens faster than ar's one-token step means
  // the one-token forward is the slow one here, which flatters every speedup.
  const Row* cheapest_verify = nullptr;
  for (const Row& row : by_speed)
    if (row.cost.verify > 0 && row.cost.verify < 1.0 &&
        (!cheapest_verify || row.cost.verify < cheapest_verify->cost.verify))
      cheapest_verify = &row;
  if (cheapest_verify) {
    const BenchResult& r = *cheapest_verify->r;
    // The rows of a verification: the drafted tokens and the one they follow.
    const double verified =
        1.0 + static_cast<double>(r.total.drafted) / static_cast<double>(r.total.verify_steps);
    text += printf_text(
        "note: %s verified about %.1f tokens per forward in %.2f ar steps: a forward over several "
        "tokens ran faster than ar's one-token forward on this machine, which flatters every "
        "speedup\n",
        display_name(report, r.strategy).c_str(), verified, cheapest_verify->cost.verify);
  }

  std::map<StepCostCause, std::vector<std::string>> losers;
  for (const auto& [r, cost] : by_speed) {
    if (r->speedup >= 1.0 || cost.step <= 0) continue;
    const StepCostCause cause = cost.main_cause();
    losers[cause].push_back(printf_text("%s %.1f ar steps a step (%.1f %s) for tau %.2f",
                                        display_name(report, r->strategy).c_str(), cost.step,
                                        cause_cost(cost, cause), cause_part(cause), r->tau()));
  }
  if (losers.empty()) {
    if (!terms.empty()) text += "no strategy was slower than ar here\n";
    return text;
  }
  text +=
      "why the slower ones lose to ar here: beyond the one forward every step needs, they pay "
      "for\n";
  for (const auto& [cause, items] : losers) {
    text += "  - " + std::string(cause_lead(cause)) + ": ";
    for (size_t i = 0; i < items.size(); ++i) text += (i ? "; " : "") + items[i];
    text += "\n";
  }
  return text;
}

}  // namespace parspec
