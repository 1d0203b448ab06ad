// Where a device-resident optimizer's tensors live (device_optimizer.h): the few memory
// primitives it needs, behind one interface with two implementations, so the same optimizer code
// runs on CUDA memory in training and on host memory in the tests (no GPU needed):
//
//   host_memory()  plain host memory; "enqueue" means "do it now"; the stream is ignored
//   cuda_memory()  device 0's primary context (the one the CUDA runtime and PyTorch use) through
//                  the dlopen'd driver (compiler/cuda/cuda_driver.h); addresses are CUdeviceptr
//                  values, work is enqueued on the caller's CUstream (null: the legacy default
//                  stream) and never synchronizes the device, except where a function says so
//
// Addresses are std::uintptr_t in both: host pointers or CUdeviceptr values.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "runtime/muon/optimizer_settings.h"
#include "runtime/muon/parameter.h"
#include "runtime/muon/parameter_tagging.h"

namespace orthojit::runtime {

// One tensor for the non-finite check: `count` elements of `type` at `address`.
struct TensorSpan {
  DType type = DType::F32;
  std::uintptr_t address = 0;
  int64_t count = 0;
};

class MemorySpace {
 public:
  virtual ~MemorySpace() = default;
  virtual const char* name() const = 0;  // "host" | "cuda"
  virtual bool is_device() const = 0;
  // Empty when `address` can be used as this space's memory, else why not (CUDA: the driver does
  // not know the address: host memory the CUDA runtime never allocated or registered). Host:
  // always empty (host memory cannot be told from anything else).
  virtual std::string address_problem(std::uintptr_t address) const = 0;

  // Memory of `bytes` bytes, zeroed when this returns (an allocation at build time: it may
  // synchronize). free(0) is a no-op.
  virtual std::uintptr_t allocate(int64_t bytes) = 0;
  virtual void free(std::uintptr_t address) = 0;
  // Zeroes `bytes` bytes, enqueued on `stream`.
  virtual void zero(std::uintptr_t address, int64_t bytes, void* stream) = 0;
  // Whole-state copies for save and load (and QK-clip's rows): these wait for all work on the
  // device first (CUDA: cuCtxSynchronize) and return when the copy is done.
  virtual void download(void* host, std::uintptr_t address, int64_t bytes) = 0;
  virtual void upload(std::uintptr_t address, const void* host, int64_t bytes) = 0;

  // True when an element of any span is a NaN or an infinity. CUDA: one generated kernel per
  // span (elementwise_codegen.h oj_nonfinite) sets one device flag, which comes back with one
  // 4-byte copy on `stream` and one synchronization of that stream: the step's only wait.
  virtual bool any_nonfinite(const std::vector<TensorSpan>& spans, void* stream) = 0;
  // Σ x[i]² in f64 over `count` f32 values (the gradient-clipping norm): host in order; CUDA one
  // generated kernel with a partial per thread, added in order on the host after a wait for
  // `stream`. Deterministic on each.
  virtual double sum_squares(std::uintptr_t values, int64_t count, void* stream) = 0;

  // One AdamW step (update_rules.h adam_step; `step` already incremented) on `count` elements:
  // g in its own type, m and v f32 in place, p in its own type. CUDA: the generated kernel
  // (device_update_rules.h), the same bits.
  virtual void adam_step(const AdamGroupSettings& adam, int64_t step, DType grad_type, std::uintptr_t grad, std::uintptr_t exp_avg,
                         std::uintptr_t exp_avg_sq, DType param_type, std::uintptr_t param, int64_t count, void* stream) = 0;

  // The distributed step's element-wise work (runtime/zero/distributed_optimizer.h), each with
  // the host loop's bits (CUDA: the generated kernels of elementwise_codegen.h), enqueued:
  //   copy          `bytes` bytes, source and destination in this space
  //   accumulate    acc ← acc + g, acc f32, g in its own type
  //   divide        x ← x / divisor, f32
  //   convert       d ← s in another type (rounded once)
  //   muon_momentum muon_momentum (update_rules.h) on `count` elements, g f32
  //   apply_muon    apply_muon (update_rules.h) on the parameter's elements [begin, end);
  //                 `orthogonal` is indexed like the whole parameter
  virtual void copy(std::uintptr_t destination, std::uintptr_t source, int64_t bytes, void* stream) = 0;
  virtual void accumulate(DType grad_type, std::uintptr_t grad, std::uintptr_t accumulator, int64_t count, void* stream) = 0;
  virtual void divide(std::uintptr_t values, float divisor, int64_t count, void* stream) = 0;
  virtual void convert(DType from, std::uintptr_t source, DType to, std::uintptr_t destination, int64_t count, void* stream) = 0;
  virtual void muon_momentum(const MuonGroupSettings& muon, std::uintptr_t gradient, std::uintptr_t momentum, std::uintptr_t update, int64_t count,
                             void* stream) = 0;
  virtual void apply_muon(const MuonGroupSettings& muon, const MatrixPlan& plan, DType param_type, std::uintptr_t param, std::uintptr_t orthogonal,
                          int64_t begin, int64_t end, void* stream) = 0;
};

// The process's host memory space.
std::shared_ptr<MemorySpace> host_memory();
// The CUDA memory space; throws UsageError with cuda_backend_unavailable_reason() when this build
// or machine cannot run the cuda backend.
std::shared_ptr<MemorySpace> cuda_memory();

}  // namespace orthojit::runtime
