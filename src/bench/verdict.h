#pragma once
// The few lines `parspec bench --verdict` ends with, for a reader who does not
// want to study the table: the fastest strategy, its speedup over ar and its
// tau, and why the strategies slower than ar lose on this machine. Everything
// comes from the run's own numbers (the rows over all prompt sets, or the one
// set's rows when a single set ran).
//
// The explanation counts time in ar steps (ar's time per generated token): a
// speculative step yields tau tokens and costs tau / speedup ar steps, so it
// loses when it costs more than it yields. One forward of its own is the
// least a step can cost; what it pays beyond that is drafting, a verification
// forward over several tokens costing more than a one-token forward, or time
// outside both (bookkeeping, waiting between threads). Each slower strategy is
// explained by the largest of the three.
#include <string>

#include "bench/report.h"

namespace parspec {

// What makes a step cost more than one forward, in ar steps.
enum class StepCostCause {
  kVerify,  // the verification forward over several tokens, beyond one forward
  kDraft,   // drafting
  kOther,   // the rest of the step
};

struct StepCost {
  double step = 0;    // the whole step: tau / speedup
  double draft = 0;   // drafting per step
  double verify = 0;  // verification per step
  double other() const { return step - draft - verify; }
  StepCostCause main_cause() const;
};

// `r`'s cost per verification step in ar steps of `ar` (same prompt set).
// Zero costs when either row has no time or no steps.
StepCost step_cost(const BenchResult& r, const BenchResult& ar);

// The verdict, lines ending in '\n'. Names each label as the report's
// config["chosen"] says what it ran ("auto (ran sd:3)"). Without an ar row it
// says so and nothing else; greedy outputs that differ from ar's are reported
// first (the run is then no evidence of speed).
std::string bench_verdict(const BenchReport& report);

}  // namespace parspec
