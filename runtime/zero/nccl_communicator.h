// The NCCL engine of the communicator: GPUs. libnccl is opened with dlopen (like libcuda), so the
// library is always compiled and linked, and says why when NCCL or a device is missing. Buffers
// may be device memory (used directly, enqueued on the stream of set_stream without waiting: the
// optimizer on CUDA tensors) or host memory (staged through a device buffer and waited for: the
// host-resident optimizer state, the "offload" configuration). The driver tells which.
#pragma once

#include <memory>
#include <string>

#include "runtime/zero/communicator.h"

namespace orthojit::runtime {

class NcclCommunicator : public Communicator {
 public:
  // Creates the NCCL communicator of `bootstrap`'s ranks (rank 0's unique id is broadcast over
  // it): one GPU per rank, the process's CUDA device (cuda::Device::get: ORTHOJIT_CUDA_DEVICE, else
  // the device current on the calling thread, else 0; ranks sharing a node and seeing the same
  // devices must each set one of these). Throws std::runtime_error
  // naming what is missing (libnccl.so.2, a CUDA driver, a device).
  static std::unique_ptr<NcclCommunicator> create(Communicator& bootstrap);
  // Wraps the trainer's own communicator (an ncclComm_t as void*), which it keeps owning.
  static std::unique_ptr<NcclCommunicator> wrap(void* nccl_comm, int rank, int world);
  ~NcclCommunicator() override;

  // Empty when libnccl can be loaded; else why not.
  static std::string unavailable_reason();

  int rank() const override { return rank_; }
  int world() const override { return world_; }
  std::string describe() const override;
  void all_reduce_sum(float* data, int64_t count) override;
  void reduce_scatter_sum(const float* send, float* receive, int64_t count) override;
  void all_gather(const void* send, int64_t bytes, void* receive) override;
  void broadcast(void* data, int64_t bytes, int root) override;
  void exchange(const std::vector<Transfer>& sends, const std::vector<Transfer>& receives) override;
  bool accepts_device_buffers() const override { return true; }
  void set_stream(void* stream) override { stream_ = stream; }

 private:
  NcclCommunicator() = default;
  struct Impl;
  std::unique_ptr<Impl> impl_;
  int rank_ = 0, world_ = 1;
  void* stream_ = nullptr;
};

}  // namespace orthojit::runtime
