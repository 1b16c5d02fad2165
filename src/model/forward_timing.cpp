#include "model/forward_timing.h"

#include <algorithm>
#include <chrono>
#include <ctime>
#include <utility>
#include <vector>

#include "core/error.h"

namespace parspec {

double now_ms(TimeBase base) {
  if (base == TimeBase::kProcessCpu) {
    timespec ts{};
    clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
    return static_cast<double>(ts.tv_sec) * 1e3 + static_cast<double>(ts.tv_nsec) * 1e-6;
  }
  return std::chrono::duration<double, std::milli>(
             std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

double median_forward_ms(const Model& model, Worker& worker, KvCache& kv, int n_tokens, int warmup,
                         int runs, bool all_logits, TimeBase base) {
  CpuExecutor executor(worker);
  return median_forward_ms(model, executor, kv, n_tokens, warmup, runs, all_logits, base);
}

double median_forward_ms(const Model& model, ForwardExecutor& executor, KvCache& kv, int n_tokens,
                         int warmup, int runs, bool all_logits, TimeBase base) {
  const int n_vocab = model.config().n_vocab;
  std::vector<double> times;
  for (int r = 0; r < warmup + runs; ++r) {
    std::vector<int32_t> tokens(n_tokens);
    for (int i = 0; i < n_tokens; ++i) tokens[i] = (i * 7919 + r * 104729 + 13) % n_vocab;
    const Batch batch = Batch::chain(kv, tokens, all_logits);
    const double t0 = now_ms(base);
    executor.forward(model, batch, kv);
    const double ms = now_ms(base) - t0;
    kv.discard_spec();
    if (r >= warmup) times.push_back(ms);
  }
  return median(std::move(times));
}

std::vector<double> sorted_times(const std::function<double()>& timed, int warmup, int runs) {
  for (int i = 0; i < warmup; ++i) timed();
  std::vector<double> times;
  for (int i = 0; i < runs; ++i) times.push_back(timed());
  std::sort(times.begin(), times.end());
  return times;
}

double ForwardCurve::at(int n) const {
  check(!points.empty(), "ForwardCurve: no forward times measured");
  if (points.size() == 1 || n <= points.front().first) return points.front().second;
  size_t i = 1;
  while (i + 1 < points.size() && points[i].first < n) ++i;
  const auto [n0, t0] = points[i - 1];
  const auto [n1, t1] = points[i];
  return t0 + (t1 - t0) * static_cast<double>(n - n0) / static_cast<double>(n1 - n0);
}

}  // namespace parspec
