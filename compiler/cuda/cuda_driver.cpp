// The CUDA driver opened with dlopen (see cuda_driver.h).
#include "cuda/cuda_driver.h"

#include <dlfcn.h>

#include <atomic>
#include <cstdio>
#include <cstdlib>
#include <mutex>

#include "cuda/nvrtc_compiler.h"
#include "cuda/sm_count_override.h"

namespace orthojit::cuda {
namespace {

// Two-level stringification: the argument is macro-expanded first, so cuMemAlloc names the
// versioned symbol cuMemAlloc_v2 that cuda.h maps it to.
#define ORTHOJIT_STRINGIFY_EXPANDED(x) ORTHOJIT_STRINGIFY(x)
#define ORTHOJIT_STRINGIFY(x) #x

struct LoadedDriver {
  DriverApi api;
  bool usable = false;
  std::string reason;
};

std::string error_text(const DriverApi& api, CUresult result) {
  const char* name = nullptr;
  const char* text = nullptr;
  if (api.cuGetErrorName) api.cuGetErrorName(result, &name);
  if (api.cuGetErrorString) api.cuGetErrorString(result, &text);
  return std::string(name ? name : "CUDA error " + std::to_string(static_cast<int>(result))) + (text ? std::string(" (") + text + ")" : "");
}

LoadedDriver load_driver() {
  LoadedDriver loaded;
  // libcuda.so.1 is the driver's soname; plain libcuda.so is only a development link (and in a
  // toolkit's stubs/ folder it is the stub, which cuInit reports as CUDA_ERROR_STUB_LIBRARY).
  void* handle = dlopen("libcuda.so.1", RTLD_NOW | RTLD_LOCAL);
  if (!handle) {
    const char* error = dlerror();
    loaded.reason = std::string("no CUDA driver: libcuda.so.1 could not be loaded (") + (error ? error : "unknown error") + ")";
    return loaded;
  }
  DriverApi& api = loaded.api;
  std::string missing;
#define ORTHOJIT_LOAD_SYMBOL(name)                                                                                \
  api.name = reinterpret_cast<decltype(api.name)>(dlsym(handle, ORTHOJIT_STRINGIFY_EXPANDED(name)));               \
  if (!api.name) missing += std::string(missing.empty() ? "" : ", ") + ORTHOJIT_STRINGIFY_EXPANDED(name);
  ORTHOJIT_CUDA_DRIVER_FUNCTIONS(ORTHOJIT_LOAD_SYMBOL)
#undef ORTHOJIT_LOAD_SYMBOL
  if (!missing.empty()) {
    loaded.reason = "the CUDA driver is too old for this build: libcuda.so.1 lacks " + missing;
    return loaded;
  }
  if (const CUresult result = api.cuInit(0); result != CUDA_SUCCESS) {
    loaded.reason = "no usable CUDA driver: cuInit failed with " + error_text(api, result) +
                    (result == CUDA_ERROR_STUB_LIBRARY ? " — the toolkit's stub libcuda was loaded, not a driver" : "");
    return loaded;
  }
  int count = 0;
  if (const CUresult result = api.cuDeviceGetCount(&count); result != CUDA_SUCCESS || count == 0) {
    loaded.reason = "no CUDA device: the driver loaded but reports " +
                    (result == CUDA_SUCCESS ? std::string("0 devices") : error_text(api, result));
    return loaded;
  }
  loaded.usable = true;
  return loaded;
}

const LoadedDriver& loaded_driver() {
  static const LoadedDriver instance = load_driver();
  return instance;
}

int attribute(const DriverApi& api, CUdevice device, CUdevice_attribute which) {
  int value = 0;
  check(api.cuDeviceGetAttribute(&value, which, device), "cuDeviceGetAttribute");
  return value;
}

}  // namespace

const DriverApi* driver(std::string* unavailable_reason) {
  const LoadedDriver& loaded = loaded_driver();
  if (!loaded.usable) {
    if (unavailable_reason) *unavailable_reason = loaded.reason;
    return nullptr;
  }
  return &loaded.api;
}

void check(CUresult result, const std::string& what) {
  if (result == CUDA_SUCCESS) return;
  throw CudaError(what + ": " + error_text(loaded_driver().api, result), result);
}

std::string DeviceInfo::describe() const {
  char text[256];
  std::snprintf(text, sizeof text, "%s (sm_%d, %d SMs, %.0f GiB, L2 %d MiB, driver %d.%d)", name.c_str(), sm, device_multiprocessors ? device_multiprocessors : multiprocessors,
                static_cast<double>(total_memory) / (1024.0 * 1024.0 * 1024.0), l2_bytes / (1024 * 1024), driver_version / 1000,
                (driver_version % 1000) / 10);
  std::string description = text;
  if (device_multiprocessors && multiprocessors != device_multiprocessors)
    description += ", work sized for " + std::to_string(multiprocessors) + " SMs (ORTHOJIT_CUDA_SM_COUNT)";
  return description;
}

namespace {
// The ordinal get_for asked for before the device was chosen (-1: none); read once by Device().
std::atomic<int> requested_ordinal{-1};
// How the device was chosen, for get_for's refusal.
std::string chosen_because;
}  // namespace

Device& Device::get_for(int ordinal) {
  int none = -1;
  requested_ordinal.compare_exchange_strong(none, ordinal);
  Device& device = get();
  if (device.info_.ordinal != ordinal)
    throw std::invalid_argument("the memory is on cuda:" + std::to_string(ordinal) + ", but orthojit's CUDA kernels run on cuda:" +
                                std::to_string(device.info_.ordinal) + " in this process (" + chosen_because +
                                "); one device per process: put the tensors on that device, or start one process per GPU "
                                "(torchrun; torch.cuda.set_device(local_rank) before the first orthojit call, or ORTHOJIT_CUDA_DEVICE)");
  return device;
}

Device& Device::get() {
  static Device* instance = nullptr;
  static std::once_flag once;
  static std::string failure;
  std::call_once(once, [] {
    try {
      instance = new Device();  // never destroyed: the primary context outlives static destructors
    } catch (const std::exception& error) {
      failure = error.what();
    }
  });
  if (!instance) throw std::runtime_error(failure);
  return *instance;
}

Device::Device() {
  std::string reason;
  api_ = driver(&reason);
  if (!api_) throw std::runtime_error(reason);
  int ordinal = 0;
  bool chosen = true;  // by the variable or the first tensors; else the current context's device, else 0
  chosen_because = "device 0: no ORTHOJIT_CUDA_DEVICE, no earlier tensors, no current CUDA context on the first call's thread";
  CUcontext current = nullptr;
  CUdevice current_device = 0;
  if (const char* text = std::getenv("ORTHOJIT_CUDA_DEVICE"); text && *text) {
    char* end = nullptr;
    ordinal = static_cast<int>(std::strtol(text, &end, 10));
    if (*end != '\0' || ordinal < 0) throw std::runtime_error(std::string("ORTHOJIT_CUDA_DEVICE='") + text + "' is not a device ordinal (0, 1, ...)");
    chosen_because = std::string("ORTHOJIT_CUDA_DEVICE=") + text;
  } else if (const int requested = requested_ordinal.load(); requested >= 0) {
    ordinal = requested;
    chosen_because = "the device of the first tensors it was given";
  } else {
    chosen = false;
  }
  int count = 0;
  check(api_->cuDeviceGetCount(&count), "cuDeviceGetCount");
  if (!chosen && api_->cuCtxGetCurrent(&current) == CUDA_SUCCESS && current &&
      api_->cuCtxGetDevice(&current_device) == CUDA_SUCCESS) {
    // The ordinal whose handle is the current context's device.
    for (int candidate = 0; candidate < count; ++candidate) {
      CUdevice handle = 0;
      if (api_->cuDeviceGet(&handle, candidate) == CUDA_SUCCESS && handle == current_device) {
        ordinal = candidate;
        chosen_because = "the device current on the thread of the first call (torch.cuda.set_device, cudaSetDevice)";
        break;
      }
    }
  }
  if (ordinal >= count)
    throw std::runtime_error("device " + std::to_string(ordinal) + " (" + chosen_because + ") but the driver reports " + std::to_string(count) + " device(s)");
  check(api_->cuDeviceGet(&device_, ordinal), "cuDeviceGet");
  check(api_->cuDevicePrimaryCtxRetain(&context_, device_), "cuDevicePrimaryCtxRetain");
  check(api_->cuCtxSetCurrent(context_), "cuCtxSetCurrent");
  info_.ordinal = ordinal;
  char name[256] = {};
  check(api_->cuDeviceGetName(name, sizeof name, device_), "cuDeviceGetName");
  info_.name = name;
  info_.sm = attribute(*api_, device_, CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR) * 10 +
             attribute(*api_, device_, CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR);
  info_.device_multiprocessors = attribute(*api_, device_, CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT);
  info_.multiprocessors = multiprocessors_to_use(info_.device_multiprocessors);
  info_.l2_bytes = attribute(*api_, device_, CU_DEVICE_ATTRIBUTE_L2_CACHE_SIZE);
  info_.max_shared_per_block_optin = attribute(*api_, device_, CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_BLOCK_OPTIN);
  size_t total = 0;
  check(api_->cuDeviceTotalMem(&total, device_), "cuDeviceTotalMem");
  info_.total_memory = static_cast<int64_t>(total);
  check(api_->cuDriverGetVersion(&info_.driver_version), "cuDriverGetVersion");
  if (info_.sm < 80)
    throw std::runtime_error("the CUDA backend needs sm_80 or newer (bf16 tensor cores); " + info_.name + " is sm_" + std::to_string(info_.sm));
}

bool synchronize_each_launch() {
  static const bool on = [] {
    const char* text = std::getenv("ORTHOJIT_CUDA_SYNC_LAUNCHES");
    return text && std::string(text) == "1";
  }();
  return on;
}

void Device::make_current() const { check(api_->cuCtxSetCurrent(context_), "cuCtxSetCurrent"); }

void Device::make_current_quietly() const noexcept { api_->cuCtxSetCurrent(context_); }

std::string Device::compile_target() const {
  if (info_.sm <= newest_supported_sm()) return info_.arch();
  return "compute_" + std::to_string(newest_supported_sm());
}

DeviceBuffer::DeviceBuffer(int64_t bytes) : bytes_(bytes) {
  if (bytes <= 0) return;
  const Device& device = Device::get();
  device.make_current();
  check(device.api().cuMemAlloc(&pointer_, static_cast<size_t>(bytes)), "cuMemAlloc(" + std::to_string(bytes) + " bytes)");
}

DeviceBuffer::~DeviceBuffer() {
  if (!pointer_) return;
  const Device& device = Device::get();
  device.make_current_quietly();
  device.api().cuMemFree(pointer_);
}

DeviceBuffer::DeviceBuffer(DeviceBuffer&& other) noexcept : pointer_(other.pointer_), bytes_(other.bytes_) {
  other.pointer_ = 0;
  other.bytes_ = 0;
}

DeviceBuffer& DeviceBuffer::operator=(DeviceBuffer&& other) noexcept {
  if (this != &other) {
    if (pointer_) {
      const Device& device = Device::get();
      device.make_current_quietly();
      device.api().cuMemFree(pointer_);
    }
    pointer_ = other.pointer_;
    bytes_ = other.bytes_;
    other.pointer_ = 0;
    other.bytes_ = 0;
  }
  return *this;
}

void DeviceBuffer::upload(const void* host, int64_t bytes, int64_t offset) {
  if (offset < 0 || offset + bytes > bytes_) throw std::out_of_range("DeviceBuffer::upload beyond the allocation");
  Device::get().make_current();
  check(Device::get().api().cuMemcpyHtoD(pointer_ + static_cast<CUdeviceptr>(offset), host, static_cast<size_t>(bytes)), "cuMemcpyHtoD");
}

void DeviceBuffer::download(void* host, int64_t bytes, int64_t offset) const {
  if (offset < 0 || offset + bytes > bytes_) throw std::out_of_range("DeviceBuffer::download beyond the allocation");
  Device::get().make_current();
  check(Device::get().api().cuMemcpyDtoH(host, pointer_ + static_cast<CUdeviceptr>(offset), static_cast<size_t>(bytes)), "cuMemcpyDtoH");
}

EventTimer::EventTimer() {
  const Device& device = Device::get();
  device.make_current();
  check(device.api().cuEventCreate(&start_, CU_EVENT_DEFAULT), "cuEventCreate");
  check(device.api().cuEventCreate(&stop_, CU_EVENT_DEFAULT), "cuEventCreate");
}

EventTimer::~EventTimer() {
  Device::get().make_current_quietly();
  const DriverApi& api = Device::get().api();
  api.cuEventDestroy(start_);
  api.cuEventDestroy(stop_);
}

void EventTimer::start(CUstream stream) { check(Device::get().api().cuEventRecord(start_, stream), "cuEventRecord"); }

float EventTimer::stop(CUstream stream) {
  const DriverApi& api = Device::get().api();
  check(api.cuEventRecord(stop_, stream), "cuEventRecord");
  check(api.cuEventSynchronize(stop_), "cuEventSynchronize");
  float milliseconds = 0;
  check(api.cuEventElapsedTime(&milliseconds, start_, stop_), "cuEventElapsedTime");
  return milliseconds;
}

}  // namespace orthojit::cuda
