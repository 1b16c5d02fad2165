#pragma once
// The one place where the project starts threads. Everything that needs a
// thread asks here: start_thread for a thread with a life of its own (a
// Worker's pool threads, a server's generation slots, a signal waiter), a
// TaskRunner for work handed to another thread again and again (a drafter
// beside the target, a batcher's draft pass), so that steady-state decoding
// and serving start no thread at all. threads_started() counts them, which
// tests read to show that a loop of calls starts none.
#include <sched.h>

#include <condition_variable>
#include <cstdint>
#include <deque>
#include <exception>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <thread>

namespace parspec {

// Starts a thread running `body`, named `name` (the first 15 characters, as
// `top -H` and debuggers show it). Throws std::system_error, as std::thread
// does, when the system cannot start one.
std::thread start_thread(const std::string& name, std::function<void()> body);

// Threads started through start_thread since the process began.
uint64_t threads_started();

// A persistent thread that runs the tasks handed to it, one at a time, in
// the order given. The thread starts with the runner and ends with it.
class TaskRunner {
 public:
  explicit TaskRunner(const std::string& name);
  // Waits for the tasks handed over, then stops the thread.
  ~TaskRunner();
  TaskRunner(const TaskRunner&) = delete;
  TaskRunner& operator=(const TaskRunner&) = delete;

  // Hands `task` to the runner's thread and returns at once.
  void post(std::function<void()> task);
  // Waits until every task handed over has ended; rethrows the first error
  // one of them threw since the last wait().
  void wait();

 private:
  friend struct GiveBackRunner;
  void thread_main();
  // Gives the thread back the cores it could run on when it started.
  void restore_affinity();

  std::mutex mutex_;
  std::condition_variable changed_;
  std::deque<std::function<void()>> queue_;  // handed over, not yet started
  bool running_ = false;
  bool stop_ = false;
  std::exception_ptr error_;
  cpu_set_t start_affinity_{};
  std::thread thread_;
};

// A TaskRunner (named "runner") taken from the process's idle runners (one
// is started when none is idle) and given back, once its tasks ended and its
// thread's affinity is restored, when the handle is dropped. Objects made per
// request or per strategy (a strategy's drafter thread) borrow one, so only
// the first of them starts a thread.
struct GiveBackRunner {
  void operator()(TaskRunner* runner) const;
};
using BorrowedRunner = std::unique_ptr<TaskRunner, GiveBackRunner>;
BorrowedRunner borrow_runner();

}  // namespace parspec
