#pragma once
// Timing of forward passes, for the benchmarks and for strategies that size
// themselves from measured speeds (PEARL's window, PPD's budget).
#include <functional>
#include <utility>
#include <vector>

#include "core/worker.h"
#include "model/executor.h"
#include "model/kv_cache.h"
#include "model/model.h"

namespace parspec {

// What a timing measures: wall-clock time, or the CPU time of the whole process
// (all threads; what a one-thread run costs even when a shared machine
// deschedules it, but spinning threads count too).
enum class TimeBase { kWall, kProcessCpu };

// Milliseconds since an arbitrary origin, on `base`'s clock.
double now_ms(TimeBase base);

// The median of measurements (of an even count, the upper of the two middle
// values); v must not be empty.
double median(std::vector<double> v);

// What `timed` returns (ms) over `runs` calls after `warmup` uncounted ones, sorted.
std::vector<double> sorted_times(const std::function<double()>& timed, int warmup, int runs);

// Median wall time (ms) of one forward over a chain of n_tokens on top of the
// committed context of `kv`, after `warmup` unmeasured runs; each run's cells
// are discarded afterwards. `all_logits`: output rows for every token (what a
// verification computes) or only the last.
double median_forward_ms(const Model& model, Worker& worker, KvCache& kv, int n_tokens, int warmup,
                         int runs, bool all_logits, TimeBase base = TimeBase::kWall);
// The same through an executor (a GPU's): the time until the logits are back.
double median_forward_ms(const Model& model, ForwardExecutor& executor, KvCache& kv, int n_tokens,
                         int warmup, int runs, bool all_logits, TimeBase base = TimeBase::kWall);

// Forward times over chains of n tokens, measured at a few n.
struct ForwardCurve {
  std::vector<std::pair<int, double>> points;  // (n, ms), n increasing, the first n = 1
  // T(n) interpolated linearly between the measured points, continued along
  // the last segment past them.
  double at(int n) const;
};

}  // namespace parspec
