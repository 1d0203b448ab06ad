// cuda/stream_order.h: the uses of one shared runner (its workspace and argument block) ordered
// across streams (a use on another stream than the previous one waits for that one's end event)
// and threads (one use at a time), with the driver's event calls replaced by a log, so it runs
// without a GPU. What would fail: a wait left out when the stream changes (two streams' kernels
// in one workspace at once), a wait on the wrong event, two threads inside uses at once, a
// deadlock between two multi-runner uses taken in opposite orders, a use whose end is not
// recorded when it throws.
#include <gtest/gtest.h>

#include <atomic>
#include <mutex>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

#include "cuda/stream_order.h"

namespace orthojit::cuda {
namespace {

CUstream stream(uintptr_t id) { return reinterpret_cast<CUstream>(id); }

// The driver as a log of "record E S", "wait S E", "create E", "destroy E".
struct LoggedDriver {
  std::mutex mutex;
  std::vector<std::string> log;
  std::atomic<uintptr_t> next_event{100};
  StreamOrder::Driver driver() {
    StreamOrder::Driver d;
    d.create_event = [this] {
      const uintptr_t id = next_event++;
      add("create " + std::to_string(id));
      return reinterpret_cast<CUevent>(id);
    };
    d.destroy_event = [this](CUevent e) { add("destroy " + std::to_string(reinterpret_cast<uintptr_t>(e))); };
    d.record = [this](CUevent e, CUstream s) {
      add("record " + std::to_string(reinterpret_cast<uintptr_t>(e)) + " " + std::to_string(reinterpret_cast<uintptr_t>(s)));
    };
    d.wait = [this](CUstream s, CUevent e) {
      add("wait " + std::to_string(reinterpret_cast<uintptr_t>(s)) + " " + std::to_string(reinterpret_cast<uintptr_t>(e)));
    };
    return d;
  }
  void add(const std::string& line) {
    std::lock_guard<std::mutex> lock(mutex);
    log.push_back(line);
  }
};

TEST(StreamOrder, AUseOnAnotherStreamWaitsForThePreviousUsesEnd) {
  LoggedDriver logged;
  {
    StreamOrder order(logged.driver());
    { StreamOrder::Use use(order, stream(1)); }  // first use: nothing to wait for
    { StreamOrder::Use use(order, stream(1)); }  // same stream: the stream orders it
    { StreamOrder::Use use(order, stream(2)); }  // another stream: waits for the end on stream 1
    { StreamOrder::Use use(order, nullptr); }    // the legacy stream (host calls): waits for stream 2
  }
  const std::vector<std::string> expected = {"create 100", "record 100 1", "record 100 1", "wait 2 100", "record 100 2",
                                             "wait 0 100", "record 100 0", "destroy 100"};
  EXPECT_EQ(logged.log, expected);
}

TEST(StreamOrder, AUseThatThrowsStillRecordsItsEnd) {
  LoggedDriver logged;
  StreamOrder order(logged.driver());
  try {
    StreamOrder::Use use(order, stream(3));
    throw std::runtime_error("a launch failed after an upload");
  } catch (const std::runtime_error&) {
  }
  { StreamOrder::Use use(order, stream(4)); }
  ASSERT_GE(logged.log.size(), 3u);
  EXPECT_EQ(logged.log[1], "record 100 3");
  EXPECT_EQ(logged.log[2], "wait 4 100");
}

TEST(StreamOrder, OneUseAtATimeAcrossThreads) {
  LoggedDriver logged;
  StreamOrder order(logged.driver());
  std::atomic<int> inside{0}, most{0};
  std::vector<std::thread> threads;
  for (uintptr_t t = 1; t <= 4; ++t)
    threads.emplace_back([&, t] {
      for (int i = 0; i < 200; ++i) {
        StreamOrder::Use use(order, stream(t));
        const int now = ++inside;
        int seen = most.load();
        while (now > seen && !most.compare_exchange_weak(seen, now)) {
        }
        std::this_thread::yield();
        --inside;
      }
    });
  for (auto& thread : threads) thread.join();
  EXPECT_EQ(most.load(), 1) << "two uses of one runner ran at once";
  // Every change of stream in the log is preceded by a wait of the new stream.
  std::string last_stream;
  for (size_t i = 0; i < logged.log.size(); ++i) {
    if (logged.log[i].rfind("record ", 0) != 0) continue;
    const std::string now = logged.log[i].substr(logged.log[i].rfind(' ') + 1);
    if (!last_stream.empty() && now != last_stream) {
      ASSERT_GT(i, 0u);
      EXPECT_EQ(logged.log[i - 1], "wait " + now + " 100") << "entry " << i;
    }
    last_stream = now;
  }
}

TEST(StreamOrder, SeveralRunnersAreTakenInOneOrderWithoutDeadlock) {
  LoggedDriver logged;
  StreamOrder a(logged.driver()), b(logged.driver()), c(logged.driver());
  std::vector<std::thread> threads;
  std::atomic<int> done{0};
  for (int t = 0; t < 2; ++t)
    threads.emplace_back([&, t] {
      for (int i = 0; i < 300; ++i) {
        // Opposite orders, a duplicate and a null (a group that runs on the host).
        std::vector<StreamOrder*> orders = t == 0 ? std::vector<StreamOrder*>{&a, &b, &c, &a, nullptr} : std::vector<StreamOrder*>{&c, nullptr, &b, &a};
        StreamOrder::Uses uses(orders, stream(static_cast<uintptr_t>(t + 1)));
        ++done;
      }
    });
  for (auto& thread : threads) thread.join();
  EXPECT_EQ(done.load(), 600);
  // Each Uses took every runner once: one record per runner per Uses.
  int records = 0;
  for (const std::string& line : logged.log) records += line.rfind("record ", 0) == 0;
  EXPECT_EQ(records, 3 * 600);
}

}  // namespace
}  // namespace orthojit::cuda
