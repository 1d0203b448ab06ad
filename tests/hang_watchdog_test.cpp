// The device runs' watchdog (bench/hang_watchdog.h) without a device: a thing that runs past the
// limit ends the process with its HUNG line and exit code 3; idle time (NVRTC compiles) and a
// sequence of short things that add up past the limit do not; a callback that says the thing had
// finished keeps the watch going; no limit, no watch. Each "does not fire" case would end the
// test's child with exit code 3 instead of 0 if it fired.
#include "bench/hang_watchdog.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <limits>
#include <mutex>
#include <string>
#include <thread>

namespace orthojit::bench {
namespace {

using std::chrono::milliseconds;

// Death tests match stderr; the HUNG line goes to stdout (where gpu-check reads it).
void stdout_to_stderr() {
  std::fflush(stdout);
  ::dup2(2, 1);
}

TEST(HangWatchdog, AThingPastTheLimitEndsTheProcessNamingIt) {
  EXPECT_EXIT(
      {
        stdout_to_stderr();
        HangWatchdog watchdog(0.5);
        watchdog.begin("jordan_ns5 standard bf16 4096x4096 [sm90a]");
        std::this_thread::sleep_for(std::chrono::seconds(30));
        std::exit(0);
      },
      ::testing::ExitedWithCode(kExitHung), "^HUNG jordan_ns5 standard bf16 4096x4096 \\[sm90a\\] after [0-9]+ s\n$");
}

TEST(HangWatchdog, IdleTimeIsNotTimed) {
  EXPECT_EXIT(
      {
        HangWatchdog watchdog(0.3);
        watchdog.begin("a case");
        watchdog.idle();  // its variants compile now: minutes on a cold cache
        std::this_thread::sleep_for(milliseconds(1200));
        std::exit(0);
      },
      ::testing::ExitedWithCode(0), "");
}

TEST(HangWatchdog, EachBeginRestartsTheClock) {
  // Five things of 0.3 s each under a 1 s limit: 1.5 s in all, never 1 s on one.
  EXPECT_EXIT(
      {
        HangWatchdog watchdog(1.0);
        for (int thing = 0; thing < 5; ++thing) {
          watchdog.begin("thing " + std::to_string(thing));
          std::this_thread::sleep_for(milliseconds(300));
        }
        std::exit(0);
      },
      ::testing::ExitedWithCode(0), "");
}

TEST(HangWatchdog, ACallbackThatSaysFinishedKeepsTheWatchGoing) {
  EXPECT_EXIT(
      {
        std::atomic<int> calls{0};
        HangWatchdog watchdog(0.3, [&](const std::string& what, double seconds) {
          ++calls;
          std::fprintf(stderr, "late %s %d\n", what.c_str(), seconds > 0.3 ? 1 : 0);
          return what == "second";  // the first had finished as the watchdog looked
        });
        watchdog.begin("first");
        std::this_thread::sleep_for(milliseconds(1200));
        // Asked once only: after "finished" the thing is no longer timed.
        if (calls != 1) std::exit(10 + calls);
        watchdog.begin("second");
        std::this_thread::sleep_for(std::chrono::seconds(30));
        std::exit(0);
      },
      ::testing::ExitedWithCode(kExitHung), "^late first 1\nlate second 1\n$");
}

// The watchdog's thread reads what the caller's thread writes, and calls back without its lock
// (the callback takes the caller's own lock): run under ThreadSanitizer (make
// test-sanitize-thread). A callback that always says "finished" keeps the process alive.
TEST(HangWatchdog, ConcurrentBeginIdleAndLateCallbacks) {
  std::mutex caller_lock;  // as tests/cuda_device_case_log.cpp's CaseLog holds its own
  std::string running;
  std::atomic<int> calls{0};
  {
    HangWatchdog watchdog(0.05, [&](const std::string& what, double) {
      std::lock_guard<std::mutex> lock(caller_lock);
      ++calls;
      EXPECT_FALSE(what.empty());
      return false;
    });
    for (int thing = 0; thing < 40; ++thing) {
      const std::string name = "thing " + std::to_string(thing);
      {
        std::lock_guard<std::mutex> lock(caller_lock);
        running = name;
      }
      watchdog.begin(name);
      // Every fourth runs past the limit: the callback comes while the next begin may race it.
      std::this_thread::sleep_for(milliseconds(thing % 4 == 0 ? 150 : 1));
      watchdog.idle();
    }
  }
  EXPECT_GE(calls.load(), 1);
  EXPECT_LE(calls.load(), 40);  // once per thing at most (a slow machine may take any past the limit)
}

TEST(HangWatchdog, NoLimitNoWatch) {
  for (double limit : {0.0, -1.0, std::numeric_limits<double>::quiet_NaN(), std::numeric_limits<double>::infinity()}) {
    HangWatchdog watchdog(limit);
    EXPECT_EQ(watchdog.limit_seconds(), 0.0) << limit;
    watchdog.begin("anything");
  }
  EXPECT_EXIT(
      {
        HangWatchdog watchdog(0);
        watchdog.begin("a long case");
        std::this_thread::sleep_for(milliseconds(600));
        std::exit(0);
      },
      ::testing::ExitedWithCode(0), "");
}

}  // namespace
}  // namespace orthojit::bench
