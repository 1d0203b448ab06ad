// The uses of one shared CUDA runner, ordered across threads and streams.
//
// Why: a loaded program (its module, workspace and argument block) is shared by every caller in
// the process that compiles the same scheduled function and variant (runtime/orthogonalize.cpp
// caches them; two optimizers with the same layer shapes meet there). The kernels of one use read
// and write that workspace on the use's stream. Two uses on one stream are ordered by the stream;
// two on different streams are not, and neither are two threads interleaving their uploads and
// launches. So each use holds the runner's lock from its first upload to its last enqueue, and a
// use on another stream than the previous one first makes its stream wait for the previous use's
// end (an event recorded there): the GPU runs the uses one after the other, the host never waits.
//
// The driver calls are injected (StreamOrder::Driver), so the ordering logic is tested on the host
// (tests/cuda_stream_order_test.cpp); cuda_stream_order_driver() gives the real ones.
#pragma once

#include <cuda.h>

#include <functional>
#include <memory>
#include <mutex>
#include <vector>

namespace orthojit::cuda {

class StreamOrder {
 public:
  struct Driver {
    std::function<CUevent()> create_event;                   // an event without timing
    std::function<void(CUevent)> destroy_event;
    std::function<void(CUevent, CUstream)> record;           // cuEventRecord
    std::function<void(CUstream, CUevent)> wait;             // cuStreamWaitEvent
  };
  explicit StreamOrder(Driver driver);
  ~StreamOrder();
  StreamOrder(const StreamOrder&) = delete;
  StreamOrder& operator=(const StreamOrder&) = delete;

  // One use: locked from construction to destruction; made to wait on construction when the
  // previous use ran on another stream; its end recorded on destruction. A use that throws still
  // records (what it enqueued before the error is ordered too); a record that fails (a context an
  // earlier error poisoned) is not thrown from the destructor: the next use then waits on the one
  // before, or the same error stops it.
  class Use {
   public:
    Use(StreamOrder& order, CUstream stream);
    ~Use();
    Use(const Use&) = delete;
    Use& operator=(const Use&) = delete;

   private:
    StreamOrder& order_;
    std::unique_lock<std::mutex> lock_;
    CUstream stream_;
  };

  // Uses of several runners at once (a Muon step's launch groups, one CUDA graph): taken in one
  // global order (by address), so two such calls cannot deadlock; duplicates are taken once.
  class Uses {
   public:
    Uses(std::vector<StreamOrder*> orders, CUstream stream);
    Uses(const Uses&) = delete;
    Uses& operator=(const Uses&) = delete;

   private:
    std::vector<std::unique_ptr<Use>> uses_;
  };

 private:
  Driver driver_;
  std::mutex mutex_;
  CUevent last_end_ = nullptr;  // recorded at the end of the previous use (created lazily)
  CUstream last_stream_ = nullptr;
  bool used_ = false;
};

// The driver's own calls (Device::get()'s context made current first).
StreamOrder::Driver cuda_stream_order_driver();

}  // namespace orthojit::cuda
