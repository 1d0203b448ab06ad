// The worker pool (compiler/cpu/thread_pool.h): every task of a job runs exactly once and the job
// returns only after all of them, for any pool size, with workers that spin before they sleep and
// with workers that sleep at once; jobs follow each other faster than a worker can fall asleep and
// slower than the spin; several application threads take turns on one pool. A lost wake-up shows
// as a hang (ctest's timeout), a task run twice or never as a wrong count, a job returning before
// a worker left its body as a TSan report (TSAN_TESTS in the Makefile runs this file).
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <stdexcept>
#include <thread>
#include <vector>

#include "cpu/thread_pool.h"

namespace orthojit::cpu {
namespace {

// Runs `jobs` jobs of varying task counts; each task adds its index + 1 to its own slot, so a task
// run twice, never, or after its job returned leaves a wrong slot.
void run_jobs(ThreadPool& pool, int jobs, std::chrono::microseconds pause) {
  for (int job = 0; job < jobs; ++job) {
    const int64_t count = 1 + job % 37;
    std::vector<int64_t> slots(static_cast<size_t>(count), 0);
    std::vector<int> workers(static_cast<size_t>(count), -1);
    pool.parallel_for(count, [&](int64_t task, int worker) {
      slots[static_cast<size_t>(task)] += task + 1;
      workers[static_cast<size_t>(task)] = worker;
    });
    for (int64_t task = 0; task < count; ++task) {
      ASSERT_EQ(slots[static_cast<size_t>(task)], task + 1) << "job " << job << " task " << task;
      ASSERT_GE(workers[static_cast<size_t>(task)], 0);
      ASSERT_LT(workers[static_cast<size_t>(task)], pool.size());
    }
    if (pause.count() > 0) std::this_thread::sleep_for(pause);
  }
}

TEST(ThreadPool, EveryTaskRunsOnceForAnySizeSpinningOrSleeping) {
  for (int threads : {1, 2, 3, 5})
    for (int spin : {0, 50, ThreadPool::kSpinMicroseconds}) {
      SCOPED_TRACE(std::to_string(threads) + " threads, spin " + std::to_string(spin) + " us");
      ThreadPool pool(threads, spin);
      EXPECT_EQ(pool.size(), threads);
      EXPECT_EQ(pool.spin_microseconds(), spin);
      run_jobs(pool, 400, std::chrono::microseconds(0));  // back to back: workers still spinning
      run_jobs(pool, 20, std::chrono::microseconds(3 * spin + 500));  // each job after the spin ended: workers asleep
    }
}

TEST(ThreadPool, AJobReturnsOnlyAfterEveryWorkersTask) {
  // Tasks that take a while, so that the caller runs out of tasks while workers are still inside
  // theirs: returning then would leave their slots unwritten.
  for (int spin : {0, ThreadPool::kSpinMicroseconds}) {
    ThreadPool pool(3, spin);
    for (int job = 0; job < 20; ++job) {
      std::vector<int> slots(6, 0);
      std::atomic<int> by_workers{0};
      pool.parallel_for(6, [&](int64_t task, int worker) {
        std::this_thread::sleep_for(std::chrono::microseconds(300));
        by_workers.fetch_add(worker != 0);
        slots[static_cast<size_t>(task)] = 1;
      });
      for (int task = 0; task < 6; ++task) ASSERT_EQ(slots[static_cast<size_t>(task)], 1) << "spin " << spin << ", job " << job << ", task " << task;
      if (job == 19) {
        EXPECT_GT(by_workers.load(), 0) << "the workers took part";
      }
    }
  }
}

TEST(ThreadPool, ApplicationThreadsTakeTurns) {
  ThreadPool pool(3);
  std::atomic<int64_t> total{0};
  std::vector<std::thread> callers;
  for (int caller = 0; caller < 4; ++caller)
    callers.emplace_back([&] {
      for (int job = 0; job < 200; ++job) pool.parallel_for(10, [&](int64_t task, int) { total.fetch_add(task + 1); });
    });
  for (std::thread& caller : callers) caller.join();
  EXPECT_EQ(total.load(), int64_t{4} * 200 * 55);
}

TEST(ThreadPool, SpinComesFromTheEnvironmentWithinBounds) {
  ::setenv("ORTHOJIT_THREAD_SPIN_US", "0", 1);
  EXPECT_EQ(ThreadPool(2).spin_microseconds(), 0);
  ::setenv("ORTHOJIT_THREAD_SPIN_US", "1234", 1);
  EXPECT_EQ(ThreadPool(2).spin_microseconds(), 1234);
  for (const char* bad : {"-1", "fast", "12us", "1000000"}) {
    ::setenv("ORTHOJIT_THREAD_SPIN_US", bad, 1);
    EXPECT_EQ(ThreadPool(2).spin_microseconds(), ThreadPool::kSpinMicroseconds) << bad;
  }
  ::unsetenv("ORTHOJIT_THREAD_SPIN_US");
  EXPECT_EQ(ThreadPool(2, 7).spin_microseconds(), 7) << "an explicit value wins";
}

TEST(ThreadPool, RefusesMoreThanKMaxThreads) {
  // The safety net under the front ends' checks: no pool of 99999 threads.
  EXPECT_THROW(ThreadPool(kMaxThreads + 1), std::invalid_argument);
  EXPECT_EQ(ThreadPool(2).size(), 2);
}

}  // namespace
}  // namespace orthojit::cpu
