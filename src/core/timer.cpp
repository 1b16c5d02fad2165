#include "core/timer.h"

namespace parspec {

namespace {
thread_local ThreadClock* installed_clock = nullptr;
}  // namespace

ThreadClock* thread_clock() {
  return installed_clock;
}

ScopedThreadClock::ScopedThreadClock(ThreadClock* clock) : previous_(installed_clock) {
  installed_clock = clock;
}

ScopedThreadClock::~ScopedThreadClock() {
  installed_clock = previous_;
}

}  // namespace parspec
