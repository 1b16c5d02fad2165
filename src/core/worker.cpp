#include "core/worker.h"

#include <immintrin.h>
#include <linux/futex.h>
#include <pthread.h>
#include <sched.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <fstream>
#include <set>
#include <system_error>
#include <utility>

#include "core/error.h"
#include "core/threads.h"

namespace parspec {

namespace {

// Waiting budgets (measured, see docs/performance.md "Thread pool"): a decode
// step issues jobs a few microseconds apart, and waking a sleeping thread costs
// tens of microseconds on a VM, so an idle thread spins through short gaps;
// past kSpinNs it yields the core to whatever else is runnable (another
// process, or a thread of ours that was descheduled while holding a chunk),
// and past kYieldNs it sleeps so that an idle pool costs nothing.
constexpr int64_t kSpinNs = 30'000;
constexpr int64_t kYieldNs = 300'000;

constexpr int kChunkBits = 28;
constexpr uint64_t kChunkMask = (uint64_t{1} << kChunkBits) - 1;
constexpr int kThreadBits = 12;
constexpr uint32_t kThreadMask = (1u << kThreadBits) - 1;

std::atomic<uint64_t> next_worker_id{0};
// The worker the calling thread was last pinned for (0: none).
thread_local uint64_t pinned_for_worker = 0;

int64_t now_ns() {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(
             std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

void futex_wait(std::atomic<uint32_t>& word, uint32_t expected) {
  syscall(SYS_futex, reinterpret_cast<uint32_t*>(&word), FUTEX_WAIT_PRIVATE, expected, nullptr,
          nullptr, 0);
}

void futex_wake_all(std::atomic<uint32_t>& word) {
  syscall(SYS_futex, reinterpret_cast<uint32_t*>(&word), FUTEX_WAKE_PRIVATE, INT32_MAX, nullptr,
          nullptr, 0);
}

// Spins, then yields, until done() or the budgets run out; true if done().
template <class Done>
bool spin_then_yield(Done done) {
  if (done()) return true;
  const int64_t start = now_ns();
  for (;;) {
    for (int i = 0; i < 16; ++i) {
      _mm_pause();
      if (done()) return true;
    }
    const int64_t waited = now_ns() - start;
    if (waited > kYieldNs) return false;
    if (waited > kSpinNs) sched_yield();
  }
}

}  // namespace

std::vector<int> allowed_cores() {
  cpu_set_t set;
  CPU_ZERO(&set);
  if (sched_getaffinity(0, sizeof(set), &set) != 0) return {0};
  std::vector<int> cores;
  for (int c = 0; c < CPU_SETSIZE; ++c)
    if (CPU_ISSET(c, &set)) cores.push_back(c);
  return cores.empty() ? std::vector<int>{0} : cores;
}

int available_cores() {
  return static_cast<int>(allowed_cores().size());
}

int default_thread_count() {
  const std::vector<int> cores = allowed_cores();
  std::set<std::pair<int, int>> physical;  // (package, core id)
  for (int c : cores) {
    const std::string dir = "/sys/devices/system/cpu/cpu" + std::to_string(c) + "/topology/";
    int package = -1, core = -1;
    std::ifstream(dir + "physical_package_id") >> package;
    std::ifstream(dir + "core_id") >> core;
    if (package < 0 || core < 0) return static_cast<int>(cores.size());  // topology unknown
    physical.insert({package, core});
  }
  return std::max<int>(1, static_cast<int>(physical.size()));
}

Worker::Worker(int n_threads, std::vector<int> cores)
    : n_threads_(n_threads), cores_(std::move(cores)), id_(next_worker_id.fetch_add(1) + 1) {
  check(n_threads >= 1, "thread count must be at least 1 (got ", n_threads, ")");
  check(n_threads <= kMaxThreads, "thread count ", n_threads, " is more than the ", kMaxThreads,
        " a worker may have");
  segments_ = std::make_unique<Segment[]>(static_cast<size_t>(n_threads));
  for (int c : cores_) check(c >= 0 && c < CPU_SETSIZE, "invalid core id ", c);
  threads_.reserve(n_threads - 1);
  for (int i = 1; i < n_threads; ++i) {
    try {
      threads_.push_back(start_thread("worker", [this, i] { thread_main(i); }));
    } catch (const std::system_error& e) {
      stop_threads();
      fail("cannot start thread ", i + 1, " of ", n_threads, " (", e.what(),
           "); use fewer threads (-t)");
    }
  }
}

Worker::~Worker() {
  stop_threads();
}

void Worker::stop_threads() {
  stop_.store(true);
  epoch_.fetch_add(1u << kThreadBits);
  futex_wake_all(epoch_);
  for (auto& t : threads_) t.join();
  threads_.clear();
}

void Worker::pin_current_thread(int index) const {
  if (cores_.empty()) return;
  cpu_set_t set;
  CPU_ZERO(&set);
  CPU_SET(cores_[index % cores_.size()], &set);
  pthread_setaffinity_np(pthread_self(), sizeof(set), &set);
}

void Worker::thread_main(int index) {
  pin_current_thread(index);
  // Not epoch_.load(): a thread may first run after jobs (even the stop) were
  // published, and must not take those as already seen.
  uint32_t seen = 0;
  for (;;) {
    uint32_t now = seen;
    const bool changed = spin_then_yield([&] {
      now = epoch_.load(std::memory_order_acquire);
      return now != seen;
    });
    if (!changed) {
      sleepers_.fetch_add(1);
      now = epoch_.load();
      if (now == seen) futex_wait(epoch_, seen);
      sleepers_.fetch_sub(1);
      continue;  // re-read: a wake-up may be spurious
    }
    seen = now;
    if (stop_.load(std::memory_order_acquire)) return;
    const int threads = static_cast<int>(now & kThreadMask);
    if (index < threads) work_on_chunks(index, threads);
  }
}

void Worker::work_on_chunks(int index, int threads) {
  for (int k = 0; k < threads; ++k) {
    Segment& segment = segments_[(index + k) % threads];
    for (;;) {
      // The returned word is authoritative: a chunk below its segment's end
      // belongs to a job that cannot finish before this thread reports it
      // done, so that job's slot stays as it is meanwhile. (A late thread may
      // read the segments of a newer job, or of an older one, exhausted.)
      const uint64_t word = segment.claim.fetch_add(1, std::memory_order_acq_rel);
      const uint64_t chunk = word & kChunkMask;
      const uint64_t end = (word >> kChunkBits) & kChunkMask;
      if (chunk >= end) break;
      Slot& s = slots_[(word >> (2 * kChunkBits)) & 1];
      const int64_t begin = static_cast<int64_t>(chunk) * s.grain;
      // Read before reporting the chunk done: once this thread's count lets the job finish, the
      // caller may go on and rewrite this slot for the job after next.
      const uint32_t chunks = s.chunks;
      (*s.body)(begin, std::min(s.n, begin + s.grain));
      if (s.done.fetch_add(1) + 1 == chunks && caller_sleeping_.load()) futex_wake_all(s.done);
    }
  }
}

void Worker::wake_threads() {
  if (sleepers_.load() > 0) futex_wake_all(epoch_);
}

void Worker::parallel_chunks(int64_t n, int64_t grain, int threads, const RangeBody& body) {
  if (n <= 0) return;
  // Pin whichever thread calls, again whenever it last ran for another worker
  // (a thread may drive several workers in turn, e.g. target and draft).
  if (!cores_.empty() && pinned_for_worker != id_) {
    pin_current_thread(0);
    pinned_for_worker = id_;
  }
  grain = std::max<int64_t>(grain, 1);
  const int64_t chunks = (n + grain - 1) / grain;
  threads =
      static_cast<int>(std::clamp<int64_t>(std::min<int64_t>(threads, chunks), 1, n_threads_));
  if (threads == 1) {
    body(0, n);
    return;
  }
  check(chunks < static_cast<int64_t>(kChunkMask >> 1), "parallel job of ", chunks,
        " chunks is too large");
  ++jobs_;
  Slot& s = slots_[jobs_ & 1];
  s.body = &body;
  s.n = n;
  s.grain = grain;
  s.chunks = static_cast<uint32_t>(chunks);
  s.done.store(0, std::memory_order_relaxed);
  for (int t = 0; t < threads; ++t) {
    int64_t begin = 0, end = 0;
    split(chunks, t, threads, begin, end);
    segments_[t].claim.store(((jobs_ & 0xff) << (2 * kChunkBits)) |
                                 (static_cast<uint64_t>(end) << kChunkBits) |
                                 static_cast<uint64_t>(begin),
                             std::memory_order_release);
  }
  const uint32_t sequence = (epoch_.load(std::memory_order_relaxed) >> kThreadBits) + 1;
  epoch_.store((sequence << kThreadBits) | static_cast<uint32_t>(threads));
  wake_threads();
  parallel_jobs_.fetch_add(1, std::memory_order_relaxed);

  work_on_chunks(0, threads);
  if (spin_then_yield([&] { return s.done.load(std::memory_order_acquire) == s.chunks; })) return;
  caller_sleeping_.store(true);
  for (uint32_t d = s.done.load(); d != s.chunks; d = s.done.load()) futex_wait(s.done, d);
  caller_sleeping_.store(false);
}

void Worker::parallel_for(int64_t n, const RangeBody& body) {
  if (n <= 0) return;
  // About four chunks per thread: small enough that a late thread's share is
  // taken by the others, large enough that claiming costs nothing.
  const int64_t grain = std::max<int64_t>(1, n / (4 * static_cast<int64_t>(n_threads_)));
  parallel_chunks(n, grain, n_threads_, body);
}

void Worker::run(const std::function<void(int, int)>& job) {
  const int count = n_threads_;
  parallel_chunks(count, 1, count, [&](int64_t begin, int64_t end) {
    for (int64_t i = begin; i < end; ++i) job(static_cast<int>(i), count);
  });
}

int Worker::threads_for(double work_ns) const {
  const double useful = work_ns / kMinNsPerThread;
  if (!(useful >= 2)) return 1;
  return static_cast<int>(std::min<double>(n_threads_, useful));
}

void Worker::split(int64_t n, int index, int count, int64_t& begin, int64_t& end) {
  const int64_t base = n / count, extra = n % count;
  begin = index * base + (index < extra ? index : extra);
  end = begin + base + (index < extra ? 1 : 0);
}

}  // namespace parspec
