// The calls that turn a program and a batch of matrices into their orthogonalized versions:
// compile (passes; the strategy explicit or the autotune layer's choice under "auto"), then run
// on a backend: `ref` (the float64 reference interpreter), `cpu` (LLVM JIT kernels) or `cuda`
// (NVRTC-compiled kernels, when this build has the CUDA backend and the machine a driver).
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <stdexcept>
#include <string>
#include <vector>

#include "dsl/ast.h"
#include "ir/function.h"
#include "runtime/errors.h"  // UsageError: bad input from the user; UnavailableError: a backend that cannot run here

namespace orthojit::cuda {
class StreamOrder;
}  // namespace orthojit::cuda

namespace orthojit::runtime {

struct OrthogonalizeOptions {
  std::string strategy = "auto";  // auto | standard | gram
  std::optional<std::vector<int>> gram_restarts;
  std::optional<ScalarType> precision;
  std::string backend = "ref";  // ref | cpu | cuda | auto (ref for f64 storage, else cpu)
  // cuda backend: "" (generated, default tiles), "generated BMxBNxBK/WMxWN", "fused-small", "cublas", "cublaslt"
  std::string cuda_variant;
  // cpu backend
  std::string cpu_isa;  // "" = the best this machine runs; generic | avx2 | avx512f | avx512bf16 | amx
  // The engine of bf16 x bf16 products (cpu/bf16_engine.h): "" = the tuning record's, else the
  // path's default; fma | bf16dot (the avx512bf16 path) | amx (the amx path).
  std::string cpu_kernel;
  int threads = 0;      // 0 = one per logical core
  // Under strategy "auto": use this device's tuning record for the shape when there is one
  // (autotune/record_lookup.h), else the heuristic.
  bool use_tuning_records = true;
  // Set: compile a whole Muon step of this shape (momentum, the iteration, the parameter update;
  // compiler/ir/muon_step.h) instead of an orthogonalizer; run it with run_muon_step.
  std::optional<ir::MuonStepSpec> muon_step;
};

// A program compiled for one shape and backend, reusable across calls (and timed by `bench`).
// The cuda backend's loaded programs are shared by every caller with the same scheduled function
// and variant; their uses are ordered across threads and streams (cuda/stream_order.h).
class CompiledOrthogonalizer {
 public:
  virtual ~CompiledOrthogonalizer() = default;
  // batch x rows x cols, row-major, f32 in and out.
  virtual void run(const float* input, float* output) const = 0;
  // The same in device memory (the cuda backend): `input` and `output` are CUdeviceptr values of
  // the current device's primary context (the one PyTorch uses), enqueued on `stream` (a
  // CUstream; null: the legacy default stream) and not synchronized. Other backends throw
  // UsageError: their memory is the host's.
  virtual void run_device(std::uintptr_t input, std::uintptr_t output, void* stream) const;
  virtual bool runs_on_device() const { return false; }
  // A Muon step (compiled with OrthogonalizeOptions::muon_step): one matrix per batch item, host
  // pointers on ref and cpu, device pointers on cuda (enqueued on `stream`, not synchronized).
  virtual void run_muon_step(const std::vector<ir::MuonStepMatrix>& matrices, void* stream) const = 0;
  // cuda: run_muon_step's two halves, for graph capture (muon_step_launcher.h): the upload of
  // the matrices' argument block, and the launches bound to it. Unlike the calls above they take no
  // use of the shared runner (stream_order()): the caller holds one around both.
  virtual void upload_step_arguments(const std::vector<ir::MuonStepMatrix>& matrices, void* stream) const;
  virtual void enqueue_launches(void* stream) const;
  // cuda: what orders the uses of the loaded program this shares with every caller of the same
  // scheduled function and variant (cuda/stream_order.h); null elsewhere.
  virtual cuda::StreamOrder* stream_order() const { return nullptr; }
  const ir::Function& function() const { return function_; }
  ir::StrategyKind strategy() const { return function_.strategy.kind; }
  const std::string& strategy_reason() const { return strategy_reason_; }
  const std::string& backend() const { return backend_; }
  double jit_seconds() const { return jit_seconds_; }
  std::string describe_target() const { return target_; }  // "ref" or "cpu avx512bf16 threads=2 ..."
  // cpu: the engine of the bf16 products ("fma", "bf16dot" or "amx"; "fma" for other storage:
  // compiler/cpu/bf16_engine.h; "openblas" or "onednn" when a tuning record's winner runs the
  // products in that library) and the ISA path it runs on ("avx512bf16", ...: a tuning record or
  // the kernel may pick it); "" on the other backends.
  const std::string& cpu_engine() const { return engine_; }
  const std::string& cpu_path() const { return isa_; }

 protected:
  ir::Function function_;
  std::string strategy_reason_, backend_, target_;
  std::string engine_, isa_;
  double jit_seconds_ = 0;
  friend std::shared_ptr<CompiledOrthogonalizer> compile_orthogonalizer(const dsl::Program&, int64_t, int64_t, int64_t,
                                                                        const OrthogonalizeOptions&);
};

std::shared_ptr<CompiledOrthogonalizer> compile_orthogonalizer(const dsl::Program& program, int64_t batch, int64_t rows, int64_t cols,
                                                               const OrthogonalizeOptions& options);

struct OrthogonalizeResult {
  std::vector<double> values;  // batch x rows x cols, row-major
  ir::StrategyKind strategy = ir::StrategyKind::Standard;
  std::string strategy_reason;
  std::string backend;  // the backend that ran ("auto" resolved)
  double jit_seconds = 0;
};

// Names of the backends this build can run on this machine.
std::vector<std::string> available_backends();
// Empty when --backend cuda can run here; else why not ("no CUDA driver: libcuda.so.1 could not
// be loaded ...", "this build has no CUDA backend ...").
std::string cuda_backend_unavailable_reason();

// Why memory on CUDA device `ordinal` cannot be handed to orthojit's kernels in this process: they
// run on another device (cuda::Device::get_for says which and why); "" when it can, and also when
// there is no usable CUDA backend at all (cuda_backend_unavailable_reason reports that). The first
// call with no device chosen yet chooses `ordinal`.
std::string cuda_device_mismatch_reason(int ordinal);

// `input` holds `batch` row-major rows x cols matrices. The ref backend computes in f64 from the
// values as given; the cpu backend reads them as f32.
OrthogonalizeResult orthogonalize(const dsl::Program& program, const std::vector<double>& input, int64_t batch, int64_t rows,
                                  int64_t cols, const OrthogonalizeOptions& options);

// Parses "auto" / "standard" / "gram"; throws UsageError naming the valid values.
std::optional<ir::StrategyKind> parse_strategy_option(const std::string& text);

}  // namespace orthojit::runtime
