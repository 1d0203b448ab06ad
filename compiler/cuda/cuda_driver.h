// The CUDA driver API, opened at run time with dlopen (libcuda is never linked): a build with the
// CUDA backend loads and runs on machines without a GPU or driver, and says why the backend is
// unavailable instead of failing to start. cuda.h is included for its types and the versioned
// entry point names only (cuMemAlloc is cuMemAlloc_v2, ...), so the symbols we look up are the
// ones the header we compiled against documents.
#pragma once

#include <cuda.h>

#include <cstdint>
#include <stdexcept>
#include <string>

namespace orthojit::cuda {

// A driver call that failed: names the call and the driver's error name and description.
class CudaError : public std::runtime_error {
 public:
  CudaError(const std::string& message, CUresult code) : std::runtime_error(message), code_(code) {}
  CUresult code() const { return code_; }

 private:
  CUresult code_;
};

// X-macro list of the driver entry points orthojit uses: (name as called, symbol looked up).
#define ORTHOJIT_CUDA_DRIVER_FUNCTIONS(X) \
  X(cuInit)                               \
  X(cuDriverGetVersion)                   \
  X(cuGetErrorName)                       \
  X(cuGetErrorString)                     \
  X(cuDeviceGetCount)                     \
  X(cuDeviceGet)                          \
  X(cuDeviceGetName)                      \
  X(cuDeviceGetAttribute)                 \
  X(cuDeviceTotalMem)                     \
  X(cuDevicePrimaryCtxRetain)             \
  X(cuDevicePrimaryCtxRelease)            \
  X(cuCtxSetCurrent)                      \
  X(cuCtxGetCurrent)                      \
  X(cuCtxGetDevice)                       \
  X(cuCtxSynchronize)                     \
  X(cuModuleLoadData)                     \
  X(cuModuleUnload)                       \
  X(cuModuleGetFunction)                  \
  X(cuFuncSetAttribute)                   \
  X(cuOccupancyMaxActiveBlocksPerMultiprocessor) \
  X(cuTensorMapEncodeTiled)               \
  X(cuLaunchKernel)                       \
  X(cuMemAlloc)                           \
  X(cuMemFree)                            \
  X(cuMemGetInfo)                         \
  X(cuMemcpyHtoD)                         \
  X(cuMemcpyDtoH)                         \
  X(cuMemcpyDtoDAsync)                    \
  X(cuMemcpyHtoDAsync)                    \
  X(cuMemcpyDtoHAsync)                    \
  X(cuPointerGetAttribute)                \
  X(cuStreamBeginCapture)                 \
  X(cuStreamEndCapture)                   \
  X(cuGraphInstantiate)                   \
  X(cuGraphLaunch)                        \
  X(cuGraphExecDestroy)                   \
  X(cuGraphDestroy)                       \
  X(cuMemsetD8Async)                      \
  X(cuMemsetD32Async)                     \
  X(cuStreamCreate)                       \
  X(cuStreamDestroy)                      \
  X(cuStreamSynchronize)                  \
  X(cuEventCreate)                        \
  X(cuEventDestroy)                       \
  X(cuEventRecord)                        \
  X(cuEventSynchronize)                   \
  X(cuStreamWaitEvent)                    \
  X(cuEventElapsedTime)

struct DriverApi {
#define ORTHOJIT_DECLARE_POINTER(name) decltype(&::name) name = nullptr;
  ORTHOJIT_CUDA_DRIVER_FUNCTIONS(ORTHOJIT_DECLARE_POINTER)
#undef ORTHOJIT_DECLARE_POINTER
};

// The driver, or nullptr with the reason in `unavailable_reason` ("libcuda.so.1 not found: ...",
// "cuInit: CUDA_ERROR_NO_DEVICE ...", "cuInit: CUDA_ERROR_STUB_LIBRARY (the toolkit's stub
// libcuda, not a driver)"). Loaded and initialized once per process.
const DriverApi* driver(std::string* unavailable_reason = nullptr);

// Throws CudaError("what: CUDA_ERROR_X (description)") unless result is CUDA_SUCCESS.
void check(CUresult result, const std::string& what);

// ORTHOJIT_CUDA_SYNC_LAUNCHES=1: every generated launch is waited for, and an error names the
// kernel that raised it (launches are asynchronous: otherwise a fault surfaces at the next
// synchronization as "running <program>", 15 to 60 launches later). CUDA graphs are not captured
// then. scripts/gpu-check's correctness phase sets it; read once per process.
bool synchronize_each_launch();

// The device orthojit runs on (Device::get says how it is chosen): its primary context (shared
// with cuBLAS and every other runtime-API library in the process) and what the tuner and the
// code generator need to know about it.
struct DeviceInfo {
  int ordinal = 0;
  std::string name;
  int sm = 0;  // 90 for sm_90
  int multiprocessors = 0;         // what work is sized for: the device's, or ORTHOJIT_CUDA_SM_COUNT (sm_count_override.h)
  int device_multiprocessors = 0;  // the device's own count
  int l2_bytes = 0;
  int max_shared_per_block_optin = 0;
  int64_t total_memory = 0;
  int driver_version = 0;  // 13000 for 13.0
  std::string arch() const { return "sm_" + std::to_string(sm); }
  std::string describe() const;  // "NVIDIA H200 (sm_90, 132 SMs, 141 GiB, driver 13.0)", plus a reduced SM count when set
};

class Device {
 public:
  // The process's one device, chosen at the first call: $ORTHOJIT_CUDA_DEVICE when set; else the
  // ordinal a caller asked for with get_for (the device of the tensors it was handed); else the
  // device of the context current on the calling thread (torch.cuda.set_device(local_rank) makes
  // its device's primary context current, so a torchrun rank lands on its GPU); else device 0.
  // Throws CudaError (or std::runtime_error when there is no driver) when the device is unusable.
  static Device& get();
  // The device for memory on `ordinal`: get(), with `ordinal` as the choice when none is made yet;
  // throws std::invalid_argument, saying which device runs orthojit's kernels and why, when that is
  // another one (one device per process: its kernels, caches and context are that device's).
  static Device& get_for(int ordinal);
  const DeviceInfo& info() const { return info_; }
  const DriverApi& api() const { return *api_; }
  // Makes the primary context current on the calling thread (cheap; every entry point calls it).
  void make_current() const;
  // The same for destructors: a failure is ignored (the free or unload that follows then reports
  // nothing either), never thrown. Why every entry point sets the context, destructors included:
  // the driver API acts on the calling thread's current context, and a thread that frees a buffer
  // or unloads a module may never have run an orthojit launch (CUDA_ERROR_INVALID_CONTEXT, a leak).
  void make_current_quietly() const noexcept;
  // The NVRTC target for this device: its exact sm_XX when NVRTC knows it, else compute_XX of
  // the newest NVRTC supports (PTX, which the driver JIT-compiles forward).
  std::string compile_target() const;

  Device(const Device&) = delete;
  Device& operator=(const Device&) = delete;

 private:
  Device();
  const DriverApi* api_ = nullptr;
  CUdevice device_ = 0;
  CUcontext context_ = nullptr;
  DeviceInfo info_;
};

// One allocation of device memory, freed on destruction.
class DeviceBuffer {
 public:
  DeviceBuffer() = default;
  explicit DeviceBuffer(int64_t bytes);
  ~DeviceBuffer();
  DeviceBuffer(DeviceBuffer&& other) noexcept;
  DeviceBuffer& operator=(DeviceBuffer&& other) noexcept;
  DeviceBuffer(const DeviceBuffer&) = delete;
  DeviceBuffer& operator=(const DeviceBuffer&) = delete;
  CUdeviceptr get() const { return pointer_; }
  int64_t bytes() const { return bytes_; }
  void upload(const void* host, int64_t bytes, int64_t offset = 0);
  void download(void* host, int64_t bytes, int64_t offset = 0) const;

 private:
  CUdeviceptr pointer_ = 0;
  int64_t bytes_ = 0;
};

// A pair of events around work on a stream: milliseconds between them.
class EventTimer {
 public:
  EventTimer();
  ~EventTimer();
  EventTimer(const EventTimer&) = delete;
  EventTimer& operator=(const EventTimer&) = delete;
  void start(CUstream stream);
  // Records the stop event, waits for it, returns the elapsed milliseconds.
  float stop(CUstream stream);

 private:
  CUevent start_ = nullptr, stop_ = nullptr;
};

// Runs `run` on the default stream until `ms` milliseconds of GPU time have passed (at most `limit`
// calls), before timing it: the clocks ramp up over the first fraction of a second of work.
template <class Run>
void warm_up_for(float ms, Run run, int limit = 1000) {
  EventTimer timer;
  float spent = 0;
  for (int call = 0; call < limit && spent < ms; ++call) {
    timer.start(nullptr);
    run();
    spent += timer.stop(nullptr);
  }
}

}  // namespace orthojit::cuda
