#pragma once
// A Worker is a pool of threads, optionally pinned to a set of cores, that runs
// one parallel job at a time. Two workers can run at the same time in one
// process (a drafter and a target on different cores).
//
// Scheduling is dynamic: a job is a range of items cut into chunks, the
// chunks into one contiguous segment per taking-part thread (the caller
// included); each thread claims its own segment's chunks in order, then the
// others', until none is left. A thread that the OS deschedules simply claims
// fewer chunks; the caller returns as soon as every chunk is done, not
// when every thread has checked in. Which thread runs a chunk never changes
// what the chunk computes, so kernels that reduce each output on one thread in
// a fixed order stay batch invariant.
//
// Waiting (idle threads for a job, the caller for the last chunk): spin with
// `pause` for kSpinNs, then sched_yield for kYieldNs, then sleep on a futex.
// The budgets and what they cost are in docs/performance.md ("Thread pool").
#include <atomic>
#include <cstdint>
#include <functional>
#include <memory>
#include <thread>
#include <vector>

namespace parspec {

class Worker {
 public:
  using RangeBody = std::function<void(int64_t, int64_t)>;

  // Most threads one worker may have: a guard against typos such as -t 100000.
  static constexpr int kMaxThreads = 1024;

  // 1 <= n_threads <= kMaxThreads. The calling thread of a job takes part in
  // it as thread 0, so a worker starts n_threads - 1 threads of its own. When
  // `cores` is not empty, thread i is pinned to cores[i % cores.size()] (the
  // thread calling a job is pinned as thread 0). Throws parspec::Error when the
  // threads cannot be created (the ones already started are joined first).
  explicit Worker(int n_threads, std::vector<int> cores = {});
  ~Worker();
  Worker(const Worker&) = delete;
  Worker& operator=(const Worker&) = delete;

  int n_threads() const { return n_threads_; }

  // Runs body(begin, end) over [0, n) in chunks of `grain` items (the last one
  // may be shorter), claimed dynamically by up to `threads` threads (clamped to
  // [1, n_threads()]). With one thread (or one chunk) it is a single call
  // body(0, n) on the caller, without any synchronisation. Returns when every
  // chunk is done. Not reentrant: one job at a time per worker.
  void parallel_chunks(int64_t n, int64_t grain, int threads, const RangeBody& body);

  // parallel_chunks over all threads with chunks sized for load balance.
  void parallel_for(int64_t n, const RangeBody& body);

  // Runs job(index, count) once for every index in [0, n_threads()), each on
  // one thread (not necessarily thread `index`: a descheduled thread's share
  // is taken by others).
  void run(const std::function<void(int, int)>& job);

  // How many threads a job that takes `work_ns` nanoseconds on one thread
  // should use: splitting costs about kDispatchNs, so a job only spreads to
  // as many threads as keep at least kMinNsPerThread of work each.
  int threads_for(double work_ns) const;
  static constexpr double kMinNsPerThread = 12000;

  // Jobs that went to more than one thread since construction: each costs one
  // wake-up and one wait for the last chunk (the only synchronisation).
  uint64_t parallel_jobs() const { return parallel_jobs_.load(std::memory_order_relaxed); }

  // The cores its threads are pinned to (empty: not pinned).
  const std::vector<int>& cores() const { return cores_; }

  // Range of [0, n) that part `index` of `count` equal contiguous parts covers.
  static void split(int64_t n, int index, int count, int64_t& begin, int64_t& end);

 private:
  struct Slot {
    const RangeBody* body = nullptr;
    int64_t n = 0, grain = 1;
    uint32_t chunks = 0;
    std::atomic<uint32_t> done{0};  // chunks finished (a futex word)
  };
  // The chunks of a job are cut into one contiguous segment per thread taking
  // part; a thread claims its own segment's chunks in order, then helps with
  // the others'. Each thread so streams one contiguous range of weights (the
  // kernels prefetch the rows after their current tile, which is then its own
  // next tile), and a descheduled thread's chunks are still taken by others.
  struct alignas(64) Segment {
    std::atomic<uint64_t> claim{0};  // [job parity: 8 | end chunk: 28 | next chunk: 28]
  };

  void thread_main(int index);
  void pin_current_thread(int index) const;
  // Claims and runs chunks of the current job until none is left: first of
  // segment `index`, then of the others among the `threads` taking part.
  void work_on_chunks(int index, int threads);
  void wake_threads();
  void stop_threads();

  int n_threads_;
  std::vector<int> cores_;
  std::vector<std::thread> threads_;
  // Two job slots alternate, so a late thread reading the previous job's slot
  // never sees it rewritten while a chunk of that job can still be claimed.
  Slot slots_[2];
  uint64_t jobs_ = 0;                    // jobs published (the caller's count)
  std::unique_ptr<Segment[]> segments_;  // one per thread
  std::atomic<uint32_t> epoch_{0};       // [job sequence: 20 | threads taking part: 12], futex word
  std::atomic<int> sleepers_{0};         // threads asleep (or about to sleep) on epoch_
  std::atomic<bool> caller_sleeping_{false};
  std::atomic<bool> stop_{false};
  std::atomic<uint64_t> parallel_jobs_{0};
  const uint64_t id_;  // unique per worker (an address may be reused), see pinning
};

// Ids of the cores this process may run on (its affinity mask), in increasing order.
std::vector<int> allowed_cores();

// Number of cores this process may run on.
int available_cores();

// The default thread count: the physical cores among those this process may
// run on (SMT siblings count once: two threads on one core only compete for
// its load/store units and the memory bandwidth the kernels are bound by).
int default_thread_count();

}  // namespace parspec
