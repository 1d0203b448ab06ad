// The watchdog of the device runs (orthojit_gpu_bench, tests/cuda_device_test): the kernels they
// run have never run on a device before (the sm_90a tile's wgmma/TMA/mbarrier kernels above all),
// and a kernel that never finishes keeps the host blocked in the driver (cuCtxSynchronize) with
// nothing said. A run killed from outside by scripts/gpu-check's timeout would then lose the rest
// of its phase. So the run ends itself after `limit` seconds on one thing: "HUNG <what> after N s"
// on stdout and exit code 3 (kExitHung), which gpu-check reads to keep what was measured, turn the
// sm_90a tile off when it was the tile, and go on without it.
//
// What is timed is named by begin() and runs until the next begin() or idle(); idle() also covers
// work that is long but not a hang (NVRTC compiles: minutes on a cold program cache).
#pragma once

#include <chrono>
#include <condition_variable>
#include <functional>
#include <mutex>
#include <string>
#include <thread>

namespace orthojit::bench {

constexpr int kExitHung = 3;

class HangWatchdog {
 public:
  // Called on the watchdog's thread, without its lock, when `what` has run `seconds` past the
  // limit. Returns whether the process ends: true, and it ends at once with kExitHung through
  // _exit (no static destructors or atexit handlers: they would call into a driver that still
  // waits for the hung kernel); false (`what` finished meanwhile: the caller's own record says
  // so), and watching goes on.
  using OnHang = std::function<bool(const std::string& what, double seconds)>;

  // limit_seconds <= 0 (or not finite): no limit, no thread. A null on_hang prints the HUNG line.
  explicit HangWatchdog(double limit_seconds, OnHang on_hang = {});
  ~HangWatchdog();
  HangWatchdog(const HangWatchdog&) = delete;
  HangWatchdog& operator=(const HangWatchdog&) = delete;

  // `what` is timed from now (replacing whatever was).
  void begin(const std::string& what);
  // Nothing is timed until the next begin().
  void idle();
  double limit_seconds() const { return limit_seconds_; }

  // "HUNG <what> after N s", flushed; returns true (the process ends).
  static bool print_hung(const std::string& what, double seconds);

 private:
  void watch();

  const double limit_seconds_;
  const OnHang on_hang_;
  std::mutex mutex_;
  std::condition_variable wake_;
  bool stopping_ = false;
  std::string what_;        // "" while idle
  unsigned long long generation_ = 0;  // counts begin() and idle() calls
  std::chrono::steady_clock::time_point since_;
  std::thread thread_;
};

}  // namespace orthojit::bench
