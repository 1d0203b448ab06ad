// SHA-256 on a second thread while the caller moves the same bytes to or from the disk. A state
// file's writer and reader hash every byte, in order; one thread hashes ~1.1 GB/s here (the x86
// SHA extensions), about a disk's rate, so hashing after each write or read made a save or load
// take their sum where it can take the larger of the two. The digest stays sequential (SHA-256
// cannot be split); only the I/O runs beside it.
#pragma once

#include <condition_variable>
#include <cstddef>
#include <cstdint>
#include <deque>
#include <mutex>
#include <string_view>
#include <thread>

#include "support/sha256.h"

namespace orthojit::runtime {

class BackgroundDigest {
 public:
  // Spans of at least this many bytes are worth a thread; smaller ones are hashed inline.
  static constexpr uint64_t kWorthwhileBytes = uint64_t{1} << 20;

  // Starts the hashing thread for `digest`, which nothing else may touch until wait() returns or
  // this object is destroyed. Throws std::system_error when no thread can be started (the
  // callers then hash inline).
  explicit BackgroundDigest(Sha256& digest);
  ~BackgroundDigest();  // waits for what was pushed
  BackgroundDigest(const BackgroundDigest&) = delete;
  BackgroundDigest& operator=(const BackgroundDigest&) = delete;

  // Queues `data` after what was pushed before; it must stay valid and unchanged until
  // hashed_through() covers it.
  void push(std::string_view data);
  // Blocks until `bytes` bytes of what was pushed (counted from this object's start) are hashed.
  void hashed_through(uint64_t bytes);
  // Blocks until everything pushed is hashed.
  void wait();

 private:
  void run();
  Sha256& digest_;
  std::mutex mutex_;
  std::condition_variable changed_;
  std::deque<std::string_view> queue_;
  uint64_t pushed_ = 0, hashed_ = 0;
  bool stopping_ = false;
  std::thread worker_;  // last: started once the members it reads exist
};

}  // namespace orthojit::runtime
