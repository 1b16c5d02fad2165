#include "core/threads.h"

#include <pthread.h>
#include <sched.h>

#include <atomic>
#include <utility>
#include <vector>

namespace parspec {

namespace {

std::atomic<uint64_t> started{0};

// Runners given back and not yet borrowed again. Their threads sleep until
// a borrower hands them a task.
struct IdleRunners {
  std::mutex mutex;
  std::vector<std::unique_ptr<TaskRunner>> runners;
};

IdleRunners& idle_runners() {
  // Never destroyed: a runner given back while static objects are destroyed
  // (a strategy held by one) still finds the list.
  static IdleRunners* idle = new IdleRunners;
  return *idle;
}

}  // namespace

std::thread start_thread(const std::string& name, std::function<void()> body) {
  std::thread thread(std::move(body));
  started.fetch_add(1, std::memory_order_relaxed);
  // Linux limits a thread name to 15 characters; a failure only loses the name.
  pthread_setname_np(thread.native_handle(), name.substr(0, 15).c_str());
  return thread;
}

uint64_t threads_started() {
  return started.load(std::memory_order_relaxed);
}

TaskRunner::TaskRunner(const std::string& name) {
  thread_ = start_thread(name, [this] { thread_main(); });
}

TaskRunner::~TaskRunner() {
  {
    std::unique_lock lock(mutex_);
    changed_.wait(lock, [&] { return queue_.empty() && !running_; });
    stop_ = true;
  }
  changed_.notify_all();
  thread_.join();
}

void TaskRunner::post(std::function<void()> task) {
  {
    std::lock_guard lock(mutex_);
    queue_.push_back(std::move(task));
  }
  changed_.notify_all();
}

void TaskRunner::wait() {
  std::unique_lock lock(mutex_);
  changed_.wait(lock, [&] { return queue_.empty() && !running_; });
  if (error_) std::rethrow_exception(std::exchange(error_, nullptr));
}

void TaskRunner::thread_main() {
  sched_getaffinity(0, sizeof(start_affinity_), &start_affinity_);
  std::unique_lock lock(mutex_);
  for (;;) {
    changed_.wait(lock, [&] { return stop_ || !queue_.empty(); });
    if (queue_.empty()) return;  // stopping, nothing left
    std::function<void()> task = std::move(queue_.front());
    queue_.pop_front();
    running_ = true;
    lock.unlock();
    std::exception_ptr error;
    try {
      task();
    } catch (...) {
      error = std::current_exception();
    }
    task = nullptr;  // what the task holds goes before its end is announced
    lock.lock();
    if (error && !error_) error_ = error;
    running_ = false;
    changed_.notify_all();
  }
}

void TaskRunner::restore_affinity() {
  post([this] { sched_setaffinity(0, sizeof(start_affinity_), &start_affinity_); });
}

void GiveBackRunner::operator()(TaskRunner* runner) const {
  std::unique_ptr<TaskRunner> owned(runner);
  try {
    owned->wait();
  } catch (...) {
    // The borrower did not wait for its tasks; their error has no one to go to.
  }
  // A worker driven from the runner may have pinned its thread to a core.
  owned->restore_affinity();
  owned->wait();
  IdleRunners& idle = idle_runners();
  std::lock_guard lock(idle.mutex);
  idle.runners.push_back(std::move(owned));
}

BorrowedRunner borrow_runner() {
  {
    IdleRunners& idle = idle_runners();
    std::lock_guard lock(idle.mutex);
    if (!idle.runners.empty()) {
      BorrowedRunner runner(idle.runners.back().release());
      idle.runners.pop_back();
      return runner;
    }
  }
  return BorrowedRunner(new TaskRunner("runner"));
}

}  // namespace parspec
