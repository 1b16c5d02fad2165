#include "core/worker.h"

#include <immintrin.h>
#include <pthread.h>
#include <sched.h>

#include "core/error.h"

namespace parspec {

namespace {
// Spin this many rounds before sleeping: a decode step issues a job every few
// tens of microseconds, and waking a sleeping thread costs more than that.
constexpr int kSpinRounds = 1 << 12;

std::atomic<uint64_t> next_worker_id{0};
// The worker the calling thread was last pinned for (0: none).
thread_local uint64_t pinned_for_worker = 0;
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

Worker::Worker(int n_threads, std::vector<int> cores)
    : n_threads_(n_threads), cores_(std::move(cores)), id_(next_worker_id.fetch_add(1) + 1) {
  check(n_threads >= 1, "thread count must be at least 1 (got ", n_threads, ")");
  for (int c : cores_) check(c >= 0 && c < CPU_SETSIZE, "invalid core id ", c);
  threads_.reserve(n_threads - 1);
  for (int i = 1; i < n_threads; ++i) threads_.emplace_back([this, i] { thread_main(i); });
}

Worker::~Worker() {
  stop_.store(true, std::memory_order_release);
  generation_.fetch_add(1, std::memory_order_acq_rel);
  generation_.notify_all();
  for (auto& t : threads_) t.join();
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
  uint64_t seen = 0;
  for (;;) {
    uint64_t gen = generation_.load(std::memory_order_acquire);
    for (int spin = 0; gen == seen && spin < kSpinRounds; ++spin) {
      _mm_pause();
      gen = generation_.load(std::memory_order_acquire);
    }
    if (gen == seen) {
      generation_.wait(seen, std::memory_order_acquire);
      continue;
    }
    seen = gen;
    if (stop_.load(std::memory_order_acquire)) return;
    (*job_)(index, n_threads_);
    if (pending_.fetch_sub(1, std::memory_order_acq_rel) == 1) pending_.notify_one();
  }
}

void Worker::run(const std::function<void(int, int)>& job) {
  // Pin whichever thread calls, again whenever it last ran for another worker
  // (a thread may drive several workers in turn, e.g. target and draft).
  if (!cores_.empty() && pinned_for_worker != id_) {
    pin_current_thread(0);
    pinned_for_worker = id_;
  }
  if (n_threads_ == 1) {
    job(0, 1);
    return;
  }
  job_ = &job;
  pending_.store(n_threads_ - 1, std::memory_order_relaxed);
  generation_.fetch_add(1, std::memory_order_acq_rel);
  generation_.notify_all();
  job(0, n_threads_);
  int left = pending_.load(std::memory_order_acquire);
  for (int spin = 0; left != 0 && spin < kSpinRounds; ++spin) {
    _mm_pause();
    left = pending_.load(std::memory_order_acquire);
  }
  while (left != 0) {
    pending_.wait(left, std::memory_order_acquire);
    left = pending_.load(std::memory_order_acquire);
  }
}

void Worker::split(int64_t n, int index, int count, int64_t& begin, int64_t& end) {
  const int64_t base = n / count, extra = n % count;
  begin = index * base + (index < extra ? index : extra);
  end = begin + base + (index < extra ? 1 : 0);
}

void Worker::parallel_for(int64_t n, const std::function<void(int64_t, int64_t)>& body) {
  if (n <= 0) return;
  run([&](int index, int count) {
    int64_t begin, end;
    split(n, index, count, begin, end);
    if (begin < end) body(begin, end);
  });
}

}  // namespace parspec
