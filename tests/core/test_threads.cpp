// The one place that starts threads: start_thread counts every thread,
// a TaskRunner runs what it is handed on one persistent thread, and borrowed
// runners are reused instead of started again.
#include <gtest/gtest.h>

#include <atomic>
#include <stdexcept>
#include <thread>
#include <vector>

#include "core/error.h"
#include "core/threads.h"
#include "core/worker.h"

namespace parspec {
namespace {

TEST(StartThread, RunsTheBodyAndCountsTheThread) {
  const uint64_t before = threads_started();
  std::thread::id seen;
  std::thread t = start_thread("test", [&] { seen = std::this_thread::get_id(); });
  const std::thread::id id = t.get_id();
  t.join();
  EXPECT_EQ(seen, id);
  EXPECT_EQ(threads_started(), before + 1);
}

TEST(StartThread, AWorkerStartsItsPoolThreadsThroughIt) {
  const uint64_t before = threads_started();
  {
    Worker w(3);
    EXPECT_EQ(threads_started(), before + 2);  // the caller is thread 0
    std::atomic<int> items{0};
    for (int i = 0; i < 50; ++i)
      w.parallel_chunks(64, 1, 3, [&](int64_t b, int64_t e) { items += static_cast<int>(e - b); });
    EXPECT_EQ(items.load(), 50 * 64);
  }
  EXPECT_EQ(threads_started(), before + 2);
}

TEST(TaskRunner, RunsTasksInOrderOnOneThreadStartedOnce) {
  const uint64_t before = threads_started();
  TaskRunner runner("test runner");
  EXPECT_EQ(threads_started(), before + 1);
  std::vector<int> order;
  std::vector<std::thread::id> ids;
  for (int round = 0; round < 100; ++round) {
    runner.post([&, round] {
      order.push_back(round);
      ids.push_back(std::this_thread::get_id());
    });
    if (round % 10 == 9) runner.wait();
  }
  runner.wait();
  ASSERT_EQ(order.size(), 100u);
  for (int i = 0; i < 100; ++i) EXPECT_EQ(order[i], i);
  for (const std::thread::id& id : ids) {
    EXPECT_EQ(id, ids[0]);
    EXPECT_NE(id, std::this_thread::get_id());
  }
  EXPECT_EQ(threads_started(), before + 1);
}

TEST(TaskRunner, WaitRethrowsATasksErrorOnceAndKeepsRunning) {
  TaskRunner runner("test runner");
  runner.post([] { throw std::runtime_error("first"); });
  runner.post([] { throw std::runtime_error("second"); });
  try {
    runner.wait();
    FAIL() << "no error";
  } catch (const std::runtime_error& e) {
    EXPECT_STREQ(e.what(), "first");
  }
  EXPECT_NO_THROW(runner.wait());
  bool ran = false;
  runner.post([&] { ran = true; });
  runner.wait();
  EXPECT_TRUE(ran);
}

TEST(TaskRunner, DestructionWaitsForTheTasksHandedOver) {
  std::atomic<int> done{0};
  {
    TaskRunner runner("test runner");
    for (int i = 0; i < 5; ++i)
      runner.post([&] {
        std::this_thread::sleep_for(std::chrono::milliseconds(2));
        ++done;
      });
  }
  EXPECT_EQ(done.load(), 5);
}

TEST(BorrowedRunner, AGivenBackRunnerIsReusedWithoutANewThread) {
  std::thread::id first;
  {
    BorrowedRunner r = borrow_runner();
    r->post([&] { first = std::this_thread::get_id(); });
    r->wait();
  }
  const uint64_t before = threads_started();
  for (int i = 0; i < 20; ++i) {
    BorrowedRunner r = borrow_runner();
    std::thread::id id;
    r->post([&] { id = std::this_thread::get_id(); });
    r->wait();
    EXPECT_EQ(id, first);
  }
  EXPECT_EQ(threads_started(), before);
  // Two at once are two threads (the second new, unless another was idle).
  BorrowedRunner a = borrow_runner(), b = borrow_runner();
  EXPECT_LE(threads_started(), before + 1);
  std::thread::id ia, ib;
  a->post([&] { ia = std::this_thread::get_id(); });
  b->post([&] { ib = std::this_thread::get_id(); });
  a->wait();
  b->wait();
  EXPECT_NE(ia, ib);
}

}  // namespace
}  // namespace parspec
