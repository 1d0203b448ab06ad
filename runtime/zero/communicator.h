// The collectives the distributed optimizer needs, behind one interface with two real engines:
// MPI (CPU processes; mpi_communicator.h) and NCCL (GPUs; nccl_communicator.h). No home-made
// transport. A trainer can hand in its own MPI_Comm or ncclComm_t.
//
// Buffers are host memory for the MPI engine and device memory for NCCL (the NCCL engine also
// accepts host buffers and stages them through the device). Reductions are f32 sums; gathers and
// broadcasts move raw bytes. Every rank must call the collectives in the same order.
// Bytes sent by this rank are counted, so a run can be checked against the plan's formulas.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace orthojit::runtime {

class Communicator {
 public:
  virtual ~Communicator() = default;
  virtual int rank() const = 0;
  virtual int world() const = 0;
  virtual std::string describe() const = 0;  // "MPI (Open MPI v4.1.4), rank 0 of 4"

  // In-place sum over all ranks of `count` floats.
  virtual void all_reduce_sum(float* data, int64_t count) = 0;
  // `send` holds world·count floats; rank r receives the sum of every rank's block r.
  virtual void reduce_scatter_sum(const float* send, float* receive, int64_t count) = 0;
  // Every rank contributes `bytes`; `receive` gets world·bytes, rank order.
  virtual void all_gather(const void* send, int64_t bytes, void* receive) = 0;
  virtual void broadcast(void* data, int64_t bytes, int root) = 0;

  // A group of point-to-point transfers completed together (no ordering deadlocks): this rank
  // sends each `sends[i]` and receives each `receives[i]`.
  struct Transfer {
    int peer = 0;
    void* data = nullptr;  // const for sends
    int64_t bytes = 0;
  };
  virtual void exchange(const std::vector<Transfer>& sends, const std::vector<Transfer>& receives) = 0;

  // Whether buffers may be device memory (NCCL): the distributed optimizer on CUDA tensors needs
  // it. Such a communicator enqueues collectives on device buffers on the stream set here (a
  // CUstream; null: the legacy default stream) without waiting; host buffers it stages and waits.
  virtual bool accepts_device_buffers() const { return false; }
  virtual void set_stream(void* stream) { (void)stream; }

  // Bytes this rank has sent since construction (by the ring algorithms' count for collectives:
  // a reduce-scatter or all-gather of S total bytes sends (N−1)/N·S per rank, an all-reduce twice
  // that, a broadcast (N−1)/N·S; point-to-point sends exactly).
  int64_t bytes_sent() const { return bytes_sent_; }
  void reset_bytes_sent() { bytes_sent_ = 0; }

 protected:
  int64_t bytes_sent_ = 0;
};

// The single-process communicator (world 1): every collective is a copy. Lets the distributed
// optimizer run, and be tested, without MPI.
class LocalCommunicator : public Communicator {
 public:
  int rank() const override { return 0; }
  int world() const override { return 1; }
  std::string describe() const override { return "local (one process)"; }
  void all_reduce_sum(float*, int64_t) override {}
  void reduce_scatter_sum(const float* send, float* receive, int64_t count) override;
  void all_gather(const void* send, int64_t bytes, void* receive) override;
  void broadcast(void*, int64_t, int root) override;
  void exchange(const std::vector<Transfer>& sends, const std::vector<Transfer>& receives) override;
};

}  // namespace orthojit::runtime
