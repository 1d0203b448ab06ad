// A small fixed pool of worker threads (one per core by default: no oversubscription).
// parallel_for hands out task indices dynamically; results never depend on which worker ran a
// task, so a run is deterministic for any number of threads.
//
// Waiting spins before it sleeps. A product of a per-head Newton–Schulz (128x128x128, ~20 µs on
// one core) runs as two or three parallel phases; a worker asleep on a condition variable takes a
// futex wake-up, on a VM an inter-processor interrupt through the hypervisor, to start each one,
// and that latency ate the second core: a single 128x512 matrix took longer on two threads than
// on one (docs/cpu-backend.md, "Blocking, threads"). So a worker that finished a job watches for
// the next one for a while (kSpinMicroseconds, ORTHOJIT_THREAD_SPIN_US overrides it; 0: sleep at
// once) before it sleeps, and the caller watches for the job's end the same way, as OpenMP
// runtimes do (GOMP_SPINCOUNT, KMP_BLOCKTIME). The condition variables stay the fallback, so an
// idle pool costs nothing once the spin ends, and a spinning thread yields the core between rounds
// of polling, so that with more runnable threads than cores (two ranks with a two-thread pool
// each on two cores: 0.56 ms per 128x512 matrix either way) it does not hold a working thread off.
#pragma once

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <functional>
#include <mutex>
#include <thread>
#include <vector>

namespace orthojit::cpu {

// The most threads a pool takes: far beyond the cores of any machine this runs on. A larger count
// is a typo that would start that many threads (`--threads 99999` ran out of the process limit and
// starved the machine's other processes); front ends refuse it with their option's name.
inline constexpr int kMaxThreads = 1024;

class ThreadPool {
 public:
  // 1 <= threads <= kMaxThreads (std::invalid_argument otherwise); the caller is one of them.
  // spin_microseconds < 0: the default (above).
  explicit ThreadPool(int threads, int spin_microseconds = -1);
  ~ThreadPool();
  ThreadPool(const ThreadPool&) = delete;
  ThreadPool& operator=(const ThreadPool&) = delete;

  int size() const { return static_cast<int>(workers_.size()) + 1; }
  int spin_microseconds() const { return spin_microseconds_; }
  // Runs body(task, worker) for task in [0, count), worker in [0, size()); returns when all ran.
  // Calls from several application threads take turns (one job at a time); a body must not call
  // parallel_for on the same pool (that would wait for itself).
  void parallel_for(int64_t count, const std::function<void(int64_t task, int worker)>& body);

  static constexpr int kSpinMicroseconds = 200;

 private:
  void worker_loop(int worker);
  void run_tasks(int worker);
  // Polls `ready` for up to spin_microseconds_ (the callers then decide under the mutex).
  template <class Ready>
  void spin_until(Ready ready) const;

  std::vector<std::thread> workers_;
  int spin_microseconds_;
  std::mutex job_mutex_;  // held for a whole parallel_for: jobs from different callers take turns
  std::mutex mutex_;      // every write of the fields below; the atomics are also read without it while spinning
  std::condition_variable wake_, done_;
  const std::function<void(int64_t, int)>* body_ = nullptr;
  int64_t count_ = 0, next_ = 0;
  std::atomic<int64_t> finished_{0};
  std::atomic<uint64_t> generation_{0};
  std::atomic<int> busy_workers_{0};
  std::atomic<bool> stop_{false};
};

// The process-wide pool with one thread per logical core.
ThreadPool& shared_thread_pool();

}  // namespace orthojit::cpu
