// The NCCL engine (see nccl_communicator.h).
#include "runtime/zero/nccl_communicator.h"

#include <dlfcn.h>
#include <nccl.h>

#include <cstring>
#include <stdexcept>

#include "cuda/cuda_driver.h"

namespace orthojit::runtime {
namespace {

struct NcclApi {
  decltype(&::ncclGetVersion) getVersion = nullptr;
  decltype(&::ncclGetUniqueId) getUniqueId = nullptr;
  decltype(&::ncclCommInitRank) commInitRank = nullptr;
  decltype(&::ncclCommDestroy) commDestroy = nullptr;
  decltype(&::ncclGetErrorString) getErrorString = nullptr;
  decltype(&::ncclAllReduce) allReduce = nullptr;
  decltype(&::ncclReduceScatter) reduceScatter = nullptr;
  decltype(&::ncclAllGather) allGather = nullptr;
  decltype(&::ncclBroadcast) broadcast = nullptr;
  decltype(&::ncclSend) send = nullptr;
  decltype(&::ncclRecv) recv = nullptr;
  decltype(&::ncclGroupStart) groupStart = nullptr;
  decltype(&::ncclGroupEnd) groupEnd = nullptr;
  // Optional (wrap checks the caller's rank and world with them where the library has them).
  decltype(&::ncclCommCount) commCount = nullptr;
  decltype(&::ncclCommUserRank) commUserRank = nullptr;
  std::string reason;
};

const NcclApi& nccl() {
  static const NcclApi api = [] {
    NcclApi loaded;
    void* handle = dlopen("libnccl.so.2", RTLD_NOW | RTLD_LOCAL);
    if (!handle) {
      const char* error = dlerror();
      loaded.reason = std::string("NCCL is not available: libnccl.so.2 could not be loaded (") + (error ? error : "?") + ")";
      return loaded;
    }
    auto symbol = [&](auto& pointer, const char* name) {
      pointer = reinterpret_cast<std::remove_reference_t<decltype(pointer)>>(dlsym(handle, name));
      if (!pointer && loaded.reason.empty()) loaded.reason = std::string("libnccl.so.2 lacks ") + name;
    };
    symbol(loaded.getVersion, "ncclGetVersion");
    symbol(loaded.getUniqueId, "ncclGetUniqueId");
    symbol(loaded.commInitRank, "ncclCommInitRank");
    symbol(loaded.commDestroy, "ncclCommDestroy");
    symbol(loaded.getErrorString, "ncclGetErrorString");
    symbol(loaded.allReduce, "ncclAllReduce");
    symbol(loaded.reduceScatter, "ncclReduceScatter");
    symbol(loaded.allGather, "ncclAllGather");
    symbol(loaded.broadcast, "ncclBroadcast");
    symbol(loaded.send, "ncclSend");
    symbol(loaded.recv, "ncclRecv");
    symbol(loaded.groupStart, "ncclGroupStart");
    symbol(loaded.groupEnd, "ncclGroupEnd");
    loaded.commCount = reinterpret_cast<decltype(loaded.commCount)>(dlsym(handle, "ncclCommCount"));
    loaded.commUserRank = reinterpret_cast<decltype(loaded.commUserRank)>(dlsym(handle, "ncclCommUserRank"));
    return loaded;
  }();
  return api;
}

void check(ncclResult_t result, const char* what) {
  if (result == ncclSuccess) return;
  throw std::runtime_error(std::string(what) + " failed: " + nccl().getErrorString(result));
}

}  // namespace

struct NcclCommunicator::Impl {
  ncclComm_t comm = nullptr;
  bool owned = false;
  cuda::DeviceBuffer staging_in, staging_out;
  CUdeviceptr in(const void* host, int64_t bytes) {
    if (staging_in.bytes() < bytes) staging_in = cuda::DeviceBuffer(bytes);
    if (bytes > 0) staging_in.upload(host, bytes);
    return staging_in.get();
  }
  CUdeviceptr out(int64_t bytes) {
    if (staging_out.bytes() < bytes) staging_out = cuda::DeviceBuffer(bytes);
    return staging_out.get();
  }
  void synchronize() { cuda::check(cuda::Device::get().api().cuCtxSynchronize(), "NCCL collective"); }
};

std::string NcclCommunicator::unavailable_reason() { return nccl().reason; }

std::unique_ptr<NcclCommunicator> NcclCommunicator::create(Communicator& bootstrap) {
  if (!nccl().reason.empty()) throw std::runtime_error(nccl().reason);
  cuda::Device::get().make_current();  // throws with the reason when there is no device
  ncclUniqueId id;
  std::memset(&id, 0, sizeof id);
  if (bootstrap.rank() == 0) check(nccl().getUniqueId(&id), "ncclGetUniqueId");
  bootstrap.broadcast(&id, sizeof id, 0);
  std::unique_ptr<NcclCommunicator> communicator(new NcclCommunicator());
  communicator->impl_ = std::make_unique<Impl>();
  check(nccl().commInitRank(&communicator->impl_->comm, bootstrap.world(), id, bootstrap.rank()), "ncclCommInitRank");
  communicator->impl_->owned = true;
  communicator->rank_ = bootstrap.rank();
  communicator->world_ = bootstrap.world();
  return communicator;
}

std::unique_ptr<NcclCommunicator> NcclCommunicator::wrap(void* nccl_comm, int rank, int world) {
  if (!nccl().reason.empty()) throw std::runtime_error(nccl().reason);
  if (!nccl_comm || rank < 0 || rank >= world) throw std::invalid_argument("NcclCommunicator::wrap: a null communicator or a rank outside the world");
  if (nccl().commCount && nccl().commUserRank) {  // a rank or world that is not the communicator's: a wrong plan or a hang
    int count = 0, user_rank = 0;
    check(nccl().commCount(static_cast<ncclComm_t>(nccl_comm), &count), "ncclCommCount");
    check(nccl().commUserRank(static_cast<ncclComm_t>(nccl_comm), &user_rank), "ncclCommUserRank");
    if (count != world || user_rank != rank)
      throw std::invalid_argument("NcclCommunicator::wrap: rank " + std::to_string(rank) + " of " + std::to_string(world) + " was given, but the NCCL communicator is rank " +
                                  std::to_string(user_rank) + " of " + std::to_string(count));
  }
  std::unique_ptr<NcclCommunicator> communicator(new NcclCommunicator());
  communicator->impl_ = std::make_unique<Impl>();
  communicator->impl_->comm = static_cast<ncclComm_t>(nccl_comm);
  communicator->rank_ = rank;
  communicator->world_ = world;
  return communicator;
}

NcclCommunicator::~NcclCommunicator() {
  if (impl_ && impl_->owned && impl_->comm) nccl().commDestroy(impl_->comm);
}

std::string NcclCommunicator::describe() const {
  int version = 0;
  nccl().getVersion(&version);
  return "NCCL " + std::to_string(version / 10000) + "." + std::to_string(version / 100 % 100) + "." + std::to_string(version % 100) + ", rank " +
         std::to_string(rank_) + " of " + std::to_string(world_) + " on " + cuda::Device::get().info().name;
}

namespace {

// True when the driver knows `pointer` as device memory (cudaMalloc'd, PyTorch's CUDA tensors):
// NCCL takes it directly. Anything else is host memory, staged through the device.
bool on_device(const void* pointer) {
  if (!pointer) return false;
  unsigned type = 0;
  const CUresult result =
      cuda::Device::get().api().cuPointerGetAttribute(&type, CU_POINTER_ATTRIBUTE_MEMORY_TYPE, reinterpret_cast<CUdeviceptr>(pointer));
  return result == CUDA_SUCCESS && type == CU_MEMORYTYPE_DEVICE;
}

void* raw(CUdeviceptr pointer) { return reinterpret_cast<void*>(pointer); }

}  // namespace

// Device buffers go to NCCL as they are, on stream_, and nothing waits; host buffers are staged
// through device buffers on the legacy default stream (ordered with the synchronous staging
// copies) and the device is waited for before they come back.
void NcclCommunicator::all_reduce_sum(float* data, int64_t count) {
  const int64_t bytes = count * 4;
  const auto stream = static_cast<cudaStream_t>(stream_);
  bytes_sent_ += 2 * (world_ - 1) * bytes / world_;
  if (on_device(data)) {
    check(nccl().allReduce(data, data, static_cast<size_t>(count), ncclFloat32, ncclSum, impl_->comm, stream), "ncclAllReduce");
    return;
  }
  const CUdeviceptr buffer = impl_->in(data, bytes);
  check(nccl().allReduce(raw(buffer), raw(buffer), static_cast<size_t>(count), ncclFloat32, ncclSum, impl_->comm, nullptr), "ncclAllReduce");
  impl_->synchronize();
  impl_->staging_in.download(data, bytes);
}

void NcclCommunicator::reduce_scatter_sum(const float* send, float* receive, int64_t count) {
  const auto stream = static_cast<cudaStream_t>(stream_);
  bytes_sent_ += (world_ - 1) * count * 4;
  if (on_device(send) && on_device(receive)) {
    check(nccl().reduceScatter(send, receive, static_cast<size_t>(count), ncclFloat32, ncclSum, impl_->comm, stream), "ncclReduceScatter");
    return;
  }
  const CUdeviceptr in = impl_->in(send, count * 4 * world_);
  const CUdeviceptr out = impl_->out(count * 4);
  check(nccl().reduceScatter(raw(in), raw(out), static_cast<size_t>(count), ncclFloat32, ncclSum, impl_->comm, nullptr), "ncclReduceScatter");
  impl_->synchronize();
  impl_->staging_out.download(receive, count * 4);
}

void NcclCommunicator::all_gather(const void* send, int64_t bytes, void* receive) {
  const auto stream = static_cast<cudaStream_t>(stream_);
  bytes_sent_ += (world_ - 1) * bytes;
  if (on_device(send) && on_device(receive)) {
    check(nccl().allGather(send, receive, static_cast<size_t>(bytes), ncclUint8, impl_->comm, stream), "ncclAllGather");
    return;
  }
  const CUdeviceptr in = impl_->in(send, bytes);
  const CUdeviceptr out = impl_->out(bytes * world_);
  check(nccl().allGather(raw(in), raw(out), static_cast<size_t>(bytes), ncclUint8, impl_->comm, nullptr), "ncclAllGather");
  impl_->synchronize();
  impl_->staging_out.download(receive, bytes * world_);
}

void NcclCommunicator::broadcast(void* data, int64_t bytes, int root) {
  const auto stream = static_cast<cudaStream_t>(stream_);
  bytes_sent_ += (world_ - 1) * bytes / world_;
  if (on_device(data)) {
    check(nccl().broadcast(data, data, static_cast<size_t>(bytes), ncclUint8, root, impl_->comm, stream), "ncclBroadcast");
    return;
  }
  const CUdeviceptr buffer = impl_->in(data, bytes);
  check(nccl().broadcast(raw(buffer), raw(buffer), static_cast<size_t>(bytes), ncclUint8, root, impl_->comm, nullptr), "ncclBroadcast");
  impl_->synchronize();
  impl_->staging_in.download(data, bytes);
}

void NcclCommunicator::exchange(const std::vector<Transfer>& sends, const std::vector<Transfer>& receives) {
  bool direct = true;
  for (const std::vector<Transfer>* list : {&sends, &receives})
    for (const Transfer& t : *list) direct = direct && (t.bytes == 0 || on_device(t.data));
  if (direct) {  // device buffers: one group of sends and receives on the stream
    const auto stream = static_cast<cudaStream_t>(stream_);
    check(nccl().groupStart(), "ncclGroupStart");
    for (const Transfer& t : sends) {
      check(nccl().send(t.data, static_cast<size_t>(t.bytes), ncclUint8, t.peer, impl_->comm, stream), "ncclSend");
      bytes_sent_ += t.bytes;
    }
    for (const Transfer& t : receives) check(nccl().recv(t.data, static_cast<size_t>(t.bytes), ncclUint8, t.peer, impl_->comm, stream), "ncclRecv");
    check(nccl().groupEnd(), "ncclGroupEnd");
    return;
  }
  // Host buffers: every send packed into one device buffer and every receive into another.
  int64_t send_total = 0, receive_total = 0;
  for (const Transfer& t : sends) send_total += t.bytes;
  for (const Transfer& t : receives) receive_total += t.bytes;
  std::vector<unsigned char> packed(static_cast<size_t>(send_total));
  int64_t offset = 0;
  for (const Transfer& t : sends) {
    std::memcpy(packed.data() + offset, t.data, static_cast<size_t>(t.bytes));
    offset += t.bytes;
  }
  const CUdeviceptr in = impl_->in(packed.data(), send_total);
  const CUdeviceptr out = impl_->out(receive_total);
  check(nccl().groupStart(), "ncclGroupStart");
  offset = 0;
  for (const Transfer& t : sends) {
    check(nccl().send(raw(in + static_cast<CUdeviceptr>(offset)), static_cast<size_t>(t.bytes), ncclUint8, t.peer, impl_->comm, nullptr), "ncclSend");
    offset += t.bytes;
    bytes_sent_ += t.bytes;
  }
  offset = 0;
  for (const Transfer& t : receives) {
    check(nccl().recv(raw(out + static_cast<CUdeviceptr>(offset)), static_cast<size_t>(t.bytes), ncclUint8, t.peer, impl_->comm, nullptr), "ncclRecv");
    offset += t.bytes;
  }
  check(nccl().groupEnd(), "ncclGroupEnd");
  impl_->synchronize();
  std::vector<unsigned char> unpacked(static_cast<size_t>(receive_total));
  if (receive_total > 0) impl_->staging_out.download(unpacked.data(), receive_total);
  offset = 0;
  for (const Transfer& t : receives) {
    std::memcpy(t.data, unpacked.data() + offset, static_cast<size_t>(t.bytes));
    offset += t.bytes;
  }
}

}  // namespace orthojit::runtime
