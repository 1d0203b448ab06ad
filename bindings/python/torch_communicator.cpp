// The torch.distributed communicator (see torch_communicator.h).
#include "bindings/python/torch_communicator.h"

#include <nanobind/ndarray.h>
#include <nanobind/stl/string.h>

#include <cstdint>
#include <cstring>
#include <stdexcept>


namespace nb = nanobind;

namespace orthojit::python {

TorchCommunicator::TorchCommunicator(nb::object collectives, int rank, int world, std::string backend, bool cuda)
    : collectives_(std::move(collectives)), rank_(rank), world_(world), backend_(std::move(backend)), cuda_(cuda) {
  if (world_ < 1 || rank_ < 0 || rank_ >= world_)
    throw std::invalid_argument("torch.distributed: rank " + std::to_string(rank_) + " of " + std::to_string(world_) + " is not a rank of the group");
  if (cuda_) cuda_memory_ = runtime::cuda_memory();  // tells device buffers from host ones
}

TorchCommunicator::~TorchCommunicator() {
  nb::gil_scoped_acquire gil;
  collectives_.reset();
}

std::string TorchCommunicator::describe() const {
  return "torch.distributed (" + backend_ + "), rank " + std::to_string(rank_) + " of " + std::to_string(world_);
}

nb::object TorchCommunicator::tensor(const void* data, int64_t bytes, bool floats) const {
  const size_t shape[1] = {static_cast<size_t>(floats ? bytes / 4 : bytes)};
  // A CUDA group's optimizer keeps its buffers in device memory, but a few scalars (the step's
  // non-finite flag) are host memory: the driver tells them apart.
  const bool on_device = cuda_memory_ && cuda_memory_->address_problem(reinterpret_cast<std::uintptr_t>(data)).empty();
  const nb::dlpack::dtype type = floats ? nb::dtype<float>() : nb::dtype<uint8_t>();
  // No owner: the optimizer's buffer outlives the call, which is all the tensor is used for.
  nb::ndarray<nb::pytorch> array(const_cast<void*>(data), 1, shape, nb::handle(), nullptr, type,
                                 on_device ? nb::device::cuda::value : nb::device::cpu::value, 0);
  return nb::cast(array, nb::rv_policy::reference);
}

void TorchCommunicator::all_reduce_sum(float* data, int64_t count) {
  if (count <= 0) return;
  nb::gil_scoped_acquire gil;
  collectives_.attr("all_reduce")(tensor(data, count * 4, true));
  bytes_sent_ += 2 * (world_ - 1) * count * 4 / world_;
}

void TorchCommunicator::reduce_scatter_sum(const float* send, float* receive, int64_t count) {
  nb::gil_scoped_acquire gil;
  collectives_.attr("reduce_scatter")(tensor(send, count * 4 * world_, true), tensor(receive, count * 4, true));
  bytes_sent_ += (world_ - 1) * count * 4;
}

void TorchCommunicator::all_gather(const void* send, int64_t bytes, void* receive) {
  nb::gil_scoped_acquire gil;
  collectives_.attr("all_gather")(tensor(send, bytes, false), tensor(receive, bytes * world_, false));
  bytes_sent_ += (world_ - 1) * bytes;
}

void TorchCommunicator::all_gather_v(const void* send, void* receive, const std::vector<int64_t>& bytes) {
  if (static_cast<int>(bytes.size()) != world_) throw std::invalid_argument("all_gather_v: one size per rank");
  // One broadcast per rank (the groups' all-gathers take equal sizes only).
  nb::gil_scoped_acquire gil;
  int64_t offset = 0;
  for (int root = 0; root < world_; ++root) {
    const int64_t size = bytes[static_cast<size_t>(root)];
    void* place = static_cast<char*>(receive) + offset;
    if (root == rank_ && size > 0 && place != send) std::memmove(place, send, static_cast<size_t>(size));
    if (size > 0) collectives_.attr("broadcast")(tensor(place, size, false), root);
    offset += size;
  }
  bytes_sent_ += (world_ - 1) * bytes[static_cast<size_t>(rank_)];
}

void TorchCommunicator::broadcast(void* data, int64_t bytes, int root) {
  if (bytes <= 0) return;
  nb::gil_scoped_acquire gil;
  collectives_.attr("broadcast")(tensor(data, bytes, false), root);
  bytes_sent_ += (world_ - 1) * bytes / world_;
}

void TorchCommunicator::exchange(const std::vector<Transfer>& sends, const std::vector<Transfer>& receives) {
  nb::gil_scoped_acquire gil;
  nb::list send_list, receive_list;
  for (const Transfer& t : sends) {
    if (t.bytes <= 0) continue;
    send_list.append(nb::make_tuple(t.peer, tensor(t.data, t.bytes, false)));
    bytes_sent_ += t.bytes;
  }
  for (const Transfer& t : receives)
    if (t.bytes > 0) receive_list.append(nb::make_tuple(t.peer, tensor(t.data, t.bytes, false)));
  collectives_.attr("exchange")(send_list, receive_list);
}

}  // namespace orthojit::python
