#pragma once
// Timing for accounting: a stopwatch and a scope that adds its duration to a
// running total in milliseconds. Both read the steady clock, or the clock a
// simulation installs on the thread (ThreadClock), so that a strategy's own
// accounting is in simulated time when it runs against a simulated machine.
#include <chrono>

namespace parspec {

// A clock that stands in for the steady clock on one thread (a simulated
// machine's virtual clock).
class ThreadClock {
 public:
  virtual ~ThreadClock() = default;
  virtual double now_ms() = 0;
  // Work that the calling code runs one piece after another, but that the
  // simulated machine runs at the same time (a pool's drafters, each on a node
  // of its own): every piece starts when the section starts, and the section
  // ends when its slowest piece does.
  virtual void parallel_begin() {}
  virtual void parallel_next() {}
  virtual void parallel_end() {}
};

// The calling thread's clock; null: the steady clock.
ThreadClock* thread_clock();
// Installs `clock` on the calling thread for the scope's life.
class ScopedThreadClock {
 public:
  explicit ScopedThreadClock(ThreadClock* clock);
  ~ScopedThreadClock();
  ScopedThreadClock(const ScopedThreadClock&) = delete;
  ScopedThreadClock& operator=(const ScopedThreadClock&) = delete;

 private:
  ThreadClock* previous_;
};

// Milliseconds since an arbitrary origin on the calling thread's clock.
inline double clock_now_ms() {
  if (ThreadClock* clock = thread_clock()) return clock->now_ms();
  return std::chrono::duration<double, std::milli>(
             std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

// Pieces of work that run at the same time on a simulated machine (see
// ThreadClock::parallel_begin); nothing without a thread clock. Call next()
// before each piece.
class ParallelSection {
 public:
  ParallelSection() : clock_(thread_clock()) {
    if (clock_) clock_->parallel_begin();
  }
  void next() {
    if (clock_) clock_->parallel_next();
  }
  ~ParallelSection() {
    if (clock_) clock_->parallel_end();
  }
  ParallelSection(const ParallelSection&) = delete;
  ParallelSection& operator=(const ParallelSection&) = delete;

 private:
  ThreadClock* clock_;
};

class Stopwatch {
 public:
  Stopwatch() : start_ms_(clock_now_ms()) {}
  double elapsed_ms() const { return clock_now_ms() - start_ms_; }

 private:
  double start_ms_;
};

// Adds the time from construction to destruction to `total_ms`.
class ScopedTimer {
 public:
  explicit ScopedTimer(double& total_ms) : total_ms_(total_ms) {}
  ~ScopedTimer() { total_ms_ += watch_.elapsed_ms(); }
  ScopedTimer(const ScopedTimer&) = delete;
  ScopedTimer& operator=(const ScopedTimer&) = delete;

 private:
  double& total_ms_;
  Stopwatch watch_;
};

}  // namespace parspec
