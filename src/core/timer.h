#pragma once
// Wall-clock timing for accounting: a stopwatch and a scope that adds its
// duration to a running total in milliseconds.
#include <chrono>

namespace parspec {

class Stopwatch {
 public:
  Stopwatch() : start_(std::chrono::steady_clock::now()) {}
  double elapsed_ms() const {
    return std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start_)
        .count();
  }

 private:
  std::chrono::steady_clock::time_point start_;
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
