// What the Worker's synchronisation costs on this machine (docs/performance.md,
// "Thread pool"). Build and run:
//   cmake --build build --target worker_latency && build/worker_latency
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <thread>
#include <vector>

#include "core/worker.h"

using Clock = std::chrono::steady_clock;

namespace {

double ns_since(Clock::time_point t0) {
  return std::chrono::duration<double, std::nano>(Clock::now() - t0).count();
}

void busy_for(std::chrono::nanoseconds d) {
  const auto t0 = Clock::now();
  while (Clock::now() - t0 < d) {
  }
}

void report(const char* what, std::vector<double>& v) {
  std::sort(v.begin(), v.end());
  std::printf("%-62s median %8.0f ns   p90 %8.0f ns\n", what, v[v.size() / 2],
              v[v.size() * 9 / 10]);
}

}  // namespace

int main() {
  parspec::Worker worker(2);
  const parspec::Worker::RangeBody nothing = [](int64_t, int64_t) {};
  std::vector<double> hot, split, cold;
  // Back to back: the other thread is spinning when each job is published.
  for (int i = 0; i < 20000; ++i) {
    const auto t0 = Clock::now();
    worker.parallel_chunks(2, 1, 2, nothing);
    hot.push_back(ns_since(t0));
  }
  // Two 20 us chunks: the overhead over 20 us is what splitting costs when it works.
  for (int i = 0; i < 2000; ++i) {
    const auto t0 = Clock::now();
    worker.parallel_chunks(2, 1, 2,
                           [](int64_t, int64_t) { busy_for(std::chrono::microseconds(20)); });
    split.push_back(ns_since(t0) - 20000);
  }
  // After 2 ms idle the other thread sleeps on its futex: two 50 us chunks,
  // overhead over 50 us (100 us when the sleeper never joins).
  for (int i = 0; i < 300; ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(2));
    const auto t0 = Clock::now();
    worker.parallel_chunks(2, 1, 2,
                           [](int64_t, int64_t) { busy_for(std::chrono::microseconds(50)); });
    cold.push_back(ns_since(t0) - 50000);
  }
  report("empty job, threads spinning (publish + wait)", hot);
  report("2 x 20 us chunks, threads spinning: time over 20 us", split);
  report("2 x 50 us chunks, other thread asleep: time over 50 us", cold);
  return 0;
}
