// The Worker thread pool: dynamic chunk scheduling, the decision to stay on one
// thread, and clean failure when threads cannot be created.
#include <gtest/gtest.h>
#include <sys/resource.h>

#include <atomic>
#include <chrono>
#include <cstdlib>
#include <thread>
#include <vector>

#include "cli_helpers.h"
#include "core/error.h"
#include "core/worker.h"

namespace parspec {
namespace {

TEST(WorkerChunks, EveryItemRunsExactlyOnceForAnyGrainAndThreadCount) {
  Worker w(3);
  for (int threads : {1, 2, 3, 8})
    for (int64_t n : {1, 2, 7, 64, 1000})
      for (int64_t grain : {1, 3, 64, 5000}) {
        std::vector<std::atomic<int>> hits(n);
        w.parallel_chunks(n, grain, threads, [&](int64_t b, int64_t e) {
          // Whole chunks: one thread alone gets the whole range at once.
          EXPECT_EQ(b % grain, 0);
          if (threads > 1) {
            EXPECT_LE(e - b, grain);
          }
          for (int64_t i = b; i < e; ++i) hits[i]++;
        });
        for (int64_t i = 0; i < n; ++i)
          ASSERT_EQ(hits[i].load(), 1) << "n " << n << " grain " << grain << " item " << i;
      }
}

TEST(WorkerChunks, OneThreadJobRunsOnTheCallerWithoutSynchronisation) {
  Worker w(2);
  const uint64_t before = w.parallel_jobs();
  const auto caller = std::this_thread::get_id();
  w.parallel_chunks(100, 1, 1,
                    [&](int64_t, int64_t) { EXPECT_EQ(std::this_thread::get_id(), caller); });
  // A single chunk is never split either.
  w.parallel_chunks(10, 10, 2,
                    [&](int64_t, int64_t) { EXPECT_EQ(std::this_thread::get_id(), caller); });
  EXPECT_EQ(w.parallel_jobs(), before);
  w.parallel_chunks(10, 1, 2, [](int64_t, int64_t) {});
  EXPECT_EQ(w.parallel_jobs(), before + 1);
}

// A thread stuck in one chunk does not hold up the others: they take every
// other chunk, and the job ends when the stuck chunk does.
TEST(WorkerChunks, AStuckThreadsShareIsTakenByTheOthers) {
  Worker w(2);
  std::atomic<int> stuck_thread_chunks{0}, other_chunks{0};
  std::atomic<bool> someone_stuck{false};
  thread_local bool i_am_stuck = false;
  w.parallel_chunks(64, 1, 2, [&](int64_t, int64_t) {
    if (!someone_stuck.exchange(true)) {
      i_am_stuck = true;
      std::this_thread::sleep_for(std::chrono::milliseconds(300));
    }
    (i_am_stuck ? stuck_thread_chunks : other_chunks)++;
  });
  EXPECT_EQ(stuck_thread_chunks.load() + other_chunks.load(), 64);
  EXPECT_GE(other_chunks.load(), 60) << "the other thread should have taken the stuck one's share";
}

TEST(WorkerChunks, ManyJobsInARowWithLateThreads) {
  // Back-to-back tiny jobs: threads that wake late find the job finished or a
  // newer one, and must neither run a finished job's chunks nor lose a chunk.
  Worker w(4);
  std::atomic<int64_t> sum{0};
  for (int job = 0; job < 20000; ++job) {
    w.parallel_chunks(5, 1, 4, [&](int64_t b, int64_t e) {
      for (int64_t i = b; i < e; ++i) sum += i + 1;
    });
  }
  EXPECT_EQ(sum.load(), 20000 * 15);
}

TEST(WorkerChunks, ThreadsForGrowsWithWork) {
  Worker w(4);
  EXPECT_EQ(w.threads_for(0), 1);
  EXPECT_EQ(w.threads_for(Worker::kMinNsPerThread), 1);
  EXPECT_EQ(w.threads_for(2.5 * Worker::kMinNsPerThread), 2);
  EXPECT_EQ(w.threads_for(1e9), 4);
  EXPECT_EQ(Worker(1).threads_for(1e9), 1);
}

TEST(WorkerThreads, TooManyThreadsIsACleanError) {
  EXPECT_THROW(Worker(Worker::kMaxThreads + 1), Error);
  EXPECT_THROW(Worker(100000), Error);
}

// Under an address-space limit thread stacks cannot be mapped: the worker
// joins what it started and throws parspec::Error (no std::terminate).
TEST(WorkerThreads, ThreadCreationFailureIsACleanError) {
#if defined(__SANITIZE_ADDRESS__) || defined(__SANITIZE_THREAD__)
  GTEST_SKIP() << "ASan and TSan reserve terabytes of shadow memory: under an address-space "
                  "limit they fail before the worker starts a thread";
#endif
  EXPECT_EXIT(
      {
        rlimit limit{};
        getrlimit(RLIMIT_AS, &limit);
        limit.rlim_cur = 256u << 20;  // 8 MiB stacks: only a few dozen threads fit
        setrlimit(RLIMIT_AS, &limit);
        try {
          Worker w(Worker::kMaxThreads);
        } catch (const Error& e) {
          std::fputs(e.what(), stderr);
          std::exit(7);
        }
        std::exit(0);
      },
      ::testing::ExitedWithCode(7), "cannot start thread");
}

TEST(WorkerThreads, CommandLineReportsTooManyThreads) {
  const auto r = testing_support::run_parspec(
      std::string("generate -m ") + PARSPEC_SOURCE_DIR + "/models/draft.gguf -p hi -n 2 -t 100000",
      true);
  EXPECT_EQ(r.exit_code, 1) << r.output;
  EXPECT_NE(r.output.find("100000"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("-t"), std::string::npos) << r.output;
}

TEST(WorkerThreads, DefaultThreadCountIsWithinTheAllowedCores) {
  const int n = default_thread_count();
  EXPECT_GE(n, 1);
  EXPECT_LE(n, available_cores());
}

}  // namespace
}  // namespace parspec
