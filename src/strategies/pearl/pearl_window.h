#pragma once
// PEARL's window from measured costs. The paper's rule, γ = T(1) / D (a
// target forward over a draft forward), presumes that a forward over γ + 1
// tokens costs one forward and that the drafter runs beside the target for
// free. Where a forward grows with its tokens (every CPU, and a GPU past a
// few rows) or the two sides share the hardware (one GPU, shared cores), that
// window drafts far more than the target accepts and pays for each draft in
// the verification. Here the window is the one the cost model of `tune`
// predicts fastest from the measured forward curve T(n), the draft forward D,
// what running both at once costs, and the acceptance seen so far.
#include "model/forward_timing.h"

namespace parspec {

struct WindowCosts {
  ForwardCurve target;  // T(n)
  double draft_ms = 0;  // D: one draft forward
  // What running both sides at once adds to the longer one, as a share of the
  // shorter: 0 when they overlap completely, 1 when they take turns, more when
  // they slow each other down beyond that (threads of both on the same cores).
  double overlap_cost = 0;
  int max_window = 1;  // the paper's rule: no window beyond it is considered
};

// Tokens a round emits at per-draft acceptance alpha (the cost model's
// PEARL round: E(γ) + 1 − α^γ, E(γ) = α + α² + ... + α^γ).
double tokens_per_round(int window, double alpha);
// The round's time: max(γD, T(γ+1)) + overlap_cost · min(γD, T(γ+1)).
double round_ms(const WindowCosts& costs, int window);
// The window in 1..max_window with the most tokens per millisecond at
// acceptance alpha; the smallest of equals.
int fastest_window(const WindowCosts& costs, double alpha);

}  // namespace parspec
