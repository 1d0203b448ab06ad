// The device runs' watchdog (hang_watchdog.h).
#include "bench/hang_watchdog.h"

#include <unistd.h>

#include <cmath>
#include <cstdio>

namespace orthojit::bench {

HangWatchdog::HangWatchdog(double limit_seconds, OnHang on_hang)
    : limit_seconds_(std::isfinite(limit_seconds) && limit_seconds > 0 ? limit_seconds : 0), on_hang_(on_hang ? std::move(on_hang) : OnHang(print_hung)) {
  if (limit_seconds_ > 0) thread_ = std::thread([this] { watch(); });
}

HangWatchdog::~HangWatchdog() {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    stopping_ = true;
  }
  wake_.notify_all();
  if (thread_.joinable()) thread_.join();
}

void HangWatchdog::begin(const std::string& what) {
  std::lock_guard<std::mutex> lock(mutex_);
  what_ = what.empty() ? "(unnamed)" : what;
  ++generation_;
  since_ = std::chrono::steady_clock::now();
}

void HangWatchdog::idle() {
  std::lock_guard<std::mutex> lock(mutex_);
  what_.clear();
  ++generation_;
}

bool HangWatchdog::print_hung(const std::string& what, double seconds) {
  std::printf("HUNG %s after %.0f s\n", what.c_str(), seconds);
  std::fflush(stdout);
  return true;
}

void HangWatchdog::watch() {
  std::unique_lock<std::mutex> lock(mutex_);
  while (!stopping_) {
    // A tenth of a second: a check costs nothing, and a short limit (the tests') is kept closely.
    wake_.wait_for(lock, std::chrono::milliseconds(100));
    if (stopping_ || what_.empty()) continue;
    const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - since_).count();
    if (seconds <= limit_seconds_) continue;
    const std::string what = what_;
    const unsigned long long generation = generation_;
    // The callback takes its caller's own lock (tests/cuda_device_case_log.cpp), which that
    // caller may hold while it calls begin(): called with this lock held, the two would deadlock.
    lock.unlock();
    const bool end = on_hang_(what, seconds);
    lock.lock();
    if (end) _exit(kExitHung);
    // It had finished (its idle() is on its way): not timed again, unless a begin() came meanwhile.
    if (generation_ == generation) what_.clear();
  }
}

}  // namespace orthojit::bench
