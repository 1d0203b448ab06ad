// The torch.distributed communicator (see torch_communicator.h).
#include "bindings/python/torch_communicator.h"

#include <nanobind/ndarray.h>
#include <nanobind/stl/string.h>

#include <cstdint>
#include <cstring>
#include <memory>
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

namespace {

// DLPack's C ABI (dmlc/dlpack, include/dlpack/dlpack.h, the unversioned "dltensor" capsule that
// torch.utils.dlpack.from_dlpack takes), written out here so that the tensor's deleter is ours.
struct DLDevice {
  int32_t device_type;  // kDLCPU = 1, kDLCUDA = 2
  int32_t device_id;
};
struct DLDataType {
  uint8_t code;  // kDLUInt = 1, kDLFloat = 2
  uint8_t bits;
  uint16_t lanes;
};
struct DLTensor {
  void* data;
  DLDevice device;
  int32_t ndim;
  DLDataType dtype;
  int64_t* shape;
  int64_t* strides;  // null: compact row-major
  uint64_t byte_offset;
};
struct DLManagedTensor {
  DLTensor dl_tensor;
  void* manager_ctx;
  void (*deleter)(DLManagedTensor* self);
};

// A view of one of the optimizer's buffers, which outlive every collective: nothing to free but
// this record. The deleter takes no lock and touches no Python object, because torch calls it
// wherever the tensor's last reference goes, which for gloo is often its worker thread; a deleter
// that needed the GIL there (nanobind's) ended the process with std::terminate when the
// interpreter was finalizing (measured in about 15% of runs, at exit).
struct BufferView {
  DLManagedTensor managed;
  int64_t shape[1];
};

void delete_buffer_view(DLManagedTensor* self) { delete reinterpret_cast<BufferView*>(self); }

// The capsule's own destructor: a capsule that torch never consumed (renamed "used_dltensor" when
// it does) still owns its record.
void delete_unconsumed_capsule(PyObject* capsule) {
  if (!PyCapsule_IsValid(capsule, "dltensor")) return;
  auto* managed = static_cast<DLManagedTensor*>(PyCapsule_GetPointer(capsule, "dltensor"));
  if (managed) managed->deleter(managed);
}

}  // namespace

nb::object TorchCommunicator::tensor(const void* data, int64_t bytes, bool floats) const {
  // A CUDA group's optimizer keeps its buffers in device memory, but a few scalars (the step's
  // non-finite flag) are host memory: the driver tells them apart.
  const bool on_device = cuda_memory_ && cuda_memory_->address_problem(reinterpret_cast<std::uintptr_t>(data)).empty();
  auto view = std::make_unique<BufferView>();
  view->shape[0] = floats ? bytes / 4 : bytes;
  DLTensor& tensor = view->managed.dl_tensor;
  tensor.data = const_cast<void*>(data);
  tensor.device = {on_device ? 2 : 1, 0};  // one GPU per rank, its cuda:0 (docs/python.md)
  tensor.ndim = 1;
  tensor.dtype = floats ? DLDataType{2, 32, 1} : DLDataType{1, 8, 1};
  tensor.shape = view->shape;
  tensor.strides = nullptr;
  tensor.byte_offset = 0;
  view->managed.manager_ctx = nullptr;
  view->managed.deleter = delete_buffer_view;
  PyObject* capsule = PyCapsule_New(&view->managed, "dltensor", delete_unconsumed_capsule);
  if (!capsule) throw nb::python_error();
  view.release();  // the capsule owns it now
  // Looked up per call (sys.modules keeps the module): a static Python object would be released
  // after the interpreter is gone.
  return nb::module_::import_("torch.utils.dlpack").attr("from_dlpack")(nb::steal(capsule));
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
