#pragma once
// Timed forwards of a strategy's sides, as the cost model and the strategies
// that size themselves from measured speeds (PEARL's window, PPD's budget)
// take them: over n tokens on top of a short committed context, logits for
// every row, each forward's cells dropped afterwards. Through the sides, so a
// side on a GPU or behind a pipeline of MPI ranks is timed as it runs.
#include "decode/sides.h"
#include "model/forward_timing.h"
#include "model/moe.h"

namespace parspec {

// Timing on the context a side holds now (a request's prompt) rather than a
// short one of its own: the timed rows are speculative cells after it.
struct OnCurrentContext {};

class TargetTimer {
 public:
  // Fills the committed context; forwards of up to max_n tokens fit after it.
  // `tally`: where a mixture-of-experts target counts the experts it runs.
  TargetTimer(Target& target, int max_n, const ExpertTally* tally = nullptr);
  explicit TargetTimer(Target& target, OnCurrentContext) : target_(target), tally_(nullptr) {}
  // Milliseconds of one forward over n tokens.
  double forward_ms(int n);
  // Distinct experts per layer the last timed forward touched (a mixture-of-experts target).
  double last_experts() const { return last_experts_; }

 private:
  Target& target_;
  const ExpertTally* tally_;
  int run_ = 0;
  double last_experts_ = 0;
};

// The same on a drafter side.
class DrafterTimer {
 public:
  DrafterTimer(Drafter& drafter, int max_n);
  explicit DrafterTimer(Drafter& drafter, OnCurrentContext) : drafter_(drafter) {}
  double forward_ms(int n);

 private:
  Drafter& drafter_;
  int run_ = 0;
};

// Forward curves for the strategies that size their trees as they run: T(n)
// at n = 1, 2, 4, 8, 9, 16, 17, 24, 25, ... up to max_n (both ends of a GPU's
// tiles of 8 rows, interpolated between), once each after a warm-up, and at
// n = 1, which everything is weighed against, the fastest of two before the
// others and one after them (the first forwards after a long prompt's prefill
// run slow). On a short context of the side's own (its cells dropped and its
// meter emptied afterwards), or on the context it holds now (the timed rows
// are speculative cells after it, dropped again; the meter keeps them).
ForwardCurve time_target_curve(Target& target, int max_n);
ForwardCurve time_target_curve_here(Target& target, int max_n);
ForwardCurve time_draft_curve(Drafter& drafter, int max_n);
ForwardCurve time_draft_curve_here(Drafter& drafter, int max_n);
// One forward of a drafter side over one token: the fastest of three after a
// warm-up, on a short context of its own (cells dropped, meter emptied).
double time_draft_forward(Drafter& drafter);

}  // namespace parspec
