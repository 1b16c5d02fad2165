#pragma once
// A Worker is a pool of threads, optionally pinned to a set of cores, that runs
// one parallel job at a time. Two workers can run at the same time in one
// process (a drafter and a target on different cores).
#include <atomic>
#include <cstdint>
#include <functional>
#include <thread>
#include <vector>

namespace parspec {

class Worker {
 public:
  // n_threads >= 1. The calling thread of run() acts as thread 0, so a worker
  // starts n_threads - 1 threads of its own. When `cores` is not empty, thread i
  // is pinned to cores[i % cores.size()] (the thread calling run() is pinned as thread 0).
  explicit Worker(int n_threads, std::vector<int> cores = {});
  ~Worker();
  Worker(const Worker&) = delete;
  Worker& operator=(const Worker&) = delete;

  int n_threads() const { return n_threads_; }

  // Runs job(thread_index, n_threads) on every thread and returns when all are
  // done. Not reentrant: one job at a time per worker.
  void run(const std::function<void(int, int)>& job);

  // Splits [0, n) into n_threads contiguous ranges (the split depends only on n
  // and n_threads) and runs body(begin, end) for each non-empty range.
  void parallel_for(int64_t n, const std::function<void(int64_t, int64_t)>& body);

  // The cores its threads are pinned to (empty: not pinned).
  const std::vector<int>& cores() const { return cores_; }

  // Range of [0, n) that thread `index` of `count` owns in parallel_for.
  static void split(int64_t n, int index, int count, int64_t& begin, int64_t& end);

 private:
  void thread_main(int index);
  void pin_current_thread(int index) const;

  int n_threads_;
  std::vector<int> cores_;
  std::vector<std::thread> threads_;
  const std::function<void(int, int)>* job_ = nullptr;
  std::atomic<uint64_t> generation_{0};
  std::atomic<int> pending_{0};
  std::atomic<bool> stop_{false};
  const uint64_t id_;  // unique per worker (an address may be reused), see run()
};

// Ids of the cores this process may run on (its affinity mask), in increasing order.
std::vector<int> allowed_cores();

// Number of cores this process may run on.
int available_cores();

}  // namespace parspec
