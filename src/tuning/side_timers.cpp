#include "tuning/side_timers.h"

#include <algorithm>
#include <vector>

#include "core/error.h"
#include "core/timer.h"

namespace parspec {

namespace {

// Tokens of the short committed context forwards are timed on.
constexpr int kTimingContext = 32;

std::vector<int32_t> timing_prefix(int n_vocab) {
  std::vector<int32_t> prefix(kTimingContext);
  for (int i = 0; i < kTimingContext; ++i) prefix[i] = (i * 31 + 7) % n_vocab;
  return prefix;
}

// Tokens of a timed forward over n: varied by run so no two runs are alike.
std::vector<int32_t> timing_tokens(int n, int run, int n_vocab) {
  std::vector<int32_t> tokens(n);
  for (int i = 0; i < n; ++i) tokens[i] = (i * 7919 + run * 104729 + 13) % n_vocab;
  return tokens;
}

}  // namespace

TargetTimer::TargetTimer(Target& target, int max_n, const ExpertTally* tally)
    : target_(target), tally_(tally) {
  target_.begin(kTimingContext + max_n + 1);
  target_.forward(chain_batch(0, timing_prefix(target_.n_vocab()), false));
  target_.commit_chain(kTimingContext);
}

double TargetTimer::forward_ms(int n) {
  const std::vector<int32_t> tokens = timing_tokens(n, run_++, target_.n_vocab());
  const int64_t passes = tally_ ? tally_->layer_passes.load() : 0;
  const int64_t touched = tally_ ? tally_->experts_touched.load() : 0;
  const Stopwatch watch;
  target_.forward(chain_batch(target_.n_committed(), tokens, true));
  const double ms = watch.elapsed_ms();
  target_.commit({}, {});
  if (tally_ && tally_->layer_passes > passes)
    last_experts_ =
        double(tally_->experts_touched - touched) / double(tally_->layer_passes - passes);
  return ms;
}

DrafterTimer::DrafterTimer(Drafter& drafter, int max_n) : drafter_(drafter) {
  drafter_.begin(kTimingContext + max_n + 1);
  int32_t n_cells = 0;
  drafter_.catch_up(timing_prefix(drafter_.n_vocab()), &n_cells);
  drafter_.accept_chain(n_cells);
}

double DrafterTimer::forward_ms(int n) {
  const std::vector<int32_t> tokens = timing_tokens(n, run_++, drafter_.n_vocab());
  const Stopwatch watch;
  drafter_.propose(chain_batch(drafter_.n_seen(), tokens, true));
  const double ms = watch.elapsed_ms();
  drafter_.accept({}, {});
  return ms;
}

namespace {

std::vector<int> curve_sizes(int max_n) {
  std::vector<int> sizes = {1, 2, 4};
  for (int n = 8; n < max_n + 8; n += 8) {
    sizes.push_back(n);
    sizes.push_back(n + 1);
  }
  while (!sizes.empty() && sizes.back() > max_n) sizes.pop_back();
  if (sizes.back() != max_n) sizes.push_back(max_n);
  return sizes;
}

template <class Timer>
ForwardCurve time_curve(Timer& timer, int max_n) {
  check(max_n >= 1, "a forward curve needs max_n >= 1");
  ForwardCurve curve;
  timer.forward_ms(1);  // warm-up
  for (int n : curve_sizes(max_n)) {
    double ms = timer.forward_ms(n);
    if (n == 1) ms = std::min(ms, timer.forward_ms(1));
    curve.points.emplace_back(n, ms);
  }
  curve.points.front().second = std::min(curve.points.front().second, timer.forward_ms(1));
  return curve;
}

// time_curve on a short context of the side's own, its meter emptied after.
template <class Timer, class Side>
ForwardCurve time_fresh_curve(Side& side, int max_n) {
  ForwardCurve curve;
  {
    Timer timer(side, max_n);
    curve = time_curve(timer, max_n);
  }
  side.take_meter();
  return curve;
}

}  // namespace

ForwardCurve time_target_curve(Target& target, int max_n) {
  return time_fresh_curve<TargetTimer>(target, max_n);
}

ForwardCurve time_target_curve_here(Target& target, int max_n) {
  TargetTimer timer(target, OnCurrentContext{});
  return time_curve(timer, max_n);
}

ForwardCurve time_draft_curve(Drafter& drafter, int max_n) {
  return time_fresh_curve<DrafterTimer>(drafter, max_n);
}

ForwardCurve time_draft_curve_here(Drafter& drafter, int max_n) {
  DrafterTimer timer(drafter, OnCurrentContext{});
  return time_curve(timer, max_n);
}

double time_draft_forward(Drafter& drafter) {
  double fastest = 0;
  {
    DrafterTimer timer(drafter, 1);
    fastest = sorted_times([&] { return timer.forward_ms(1); }, 1, 3).front();
  }
  drafter.take_meter();
  return fastest;
}

}  // namespace parspec
