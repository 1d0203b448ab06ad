// The Communicator (runtime/zero/communicator.h) over a torch.distributed process group: what a
// program launched with torchrun already has (gloo for CPU tensors, NCCL for CUDA tensors). Each
// collective wraps the optimizer's buffers as torch tensors without copying (DLPack, CPU or CUDA
// memory as the buffer is) and calls the matching method of a Python object
// (orthojit/distributed.py, _TorchCollectives), which runs torch.distributed on that group:
//
//   all_reduce(t)                 sum in place
//   reduce_scatter(src, dst)      dst ← this rank's block of the sum of every rank's src
//   all_gather(src, dst)          dst ← every rank's src, rank order
//   broadcast(t, root)
//   exchange([(peer, t)], [(peer, t)])   point-to-point sends and receives completed together
//
// The GIL is taken for each call (the optimizer's step runs without it). Device buffers are
// accepted when the group's backend moves CUDA tensors (NCCL); torch orders its collectives after
// the work already on the current stream, which is where the optimizer enqueues.
#pragma once

#include <nanobind/nanobind.h>

#include <memory>
#include <string>
#include <vector>

#include "runtime/muon/memory_space.h"
#include "runtime/zero/communicator.h"

namespace orthojit::python {

class TorchCommunicator : public runtime::Communicator {
 public:
  // `collectives`: the Python object above; `cuda`: whether buffers may be CUDA memory (NCCL).
  TorchCommunicator(nanobind::object collectives, int rank, int world, std::string backend, bool cuda);
  ~TorchCommunicator() override;

  int rank() const override { return rank_; }
  int world() const override { return world_; }
  std::string describe() const override;
  void all_reduce_sum(float* data, int64_t count) override;
  void reduce_scatter_sum(const float* send, float* receive, int64_t count) override;
  void all_gather(const void* send, int64_t bytes, void* receive) override;
  void broadcast(void* data, int64_t bytes, int root) override;
  void exchange(const std::vector<Transfer>& sends, const std::vector<Transfer>& receives) override;
  bool accepts_device_buffers() const override { return cuda_; }

 private:
  // A torch tensor over `bytes` bytes at `data` (f32 when `floats`, else uint8), no copy.
  nanobind::object tensor(const void* data, int64_t bytes, bool floats) const;
  nanobind::object collectives_;
  int rank_ = 0, world_ = 1;
  std::string backend_;
  bool cuda_ = false;
  std::shared_ptr<runtime::MemorySpace> cuda_memory_;  // set for a CUDA group
};

}  // namespace orthojit::python
