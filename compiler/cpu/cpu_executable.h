// The CPU backend: executes scheduled IR (after plan_buffers) with JIT-compiled microkernels for
// every product and host loops for the O(mn) ops (normalize, lincomb, conversions). bf16, f16 and
// f32 storage; products accumulate in f32. Batches run whole rounds of one matrix per worker, and
// the matrices left over (or all of them, when there are fewer than workers or they are too large
// to hold one per worker) with every product split across the workers.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <unordered_map>
#include <vector>

#include "cpu/cpu_isa.h"
#include "cpu/gemm_driver.h"
#include "cpu/microkernel_codegen.h"
#include "cpu/vendor_gemm.h"
#include "ir/function.h"

namespace orthojit::cpu {

struct CpuOptions {
  CpuIsa isa = best_host_isa();
  int threads = 0;  // 0: one per logical core (the shared pool)
  GemmBlocking blocking;
  ProductEngine engine = ProductEngine::Jit;  // OpenBlas: the vendor-library candidate
  std::string describe() const;  // part of the executable cache key
};

class CpuExecutable {
 public:
  // Throws std::invalid_argument for IR the backend cannot run (f64 storage, unplanned IR).
  CpuExecutable(const ir::Function& scheduled, const CpuOptions& options);
  ~CpuExecutable();

  // `input`: batch x rows x cols f32, row-major (the user's shape). `output`: the same layout.
  void run(const float* input, float* output) const;
  // A Muon step (function().muon_step set): one matrix per batch item, host pointers
  // (ir/muon_step.h). Throws std::invalid_argument for a wrong count or an orthogonalizer.
  void run_muon_step(const std::vector<ir::MuonStepMatrix>& matrices) const;

  double jit_seconds() const { return jit_seconds_; }  // microkernels compiled for this executable
  std::vector<MicrokernelSpec> microkernels() const;   // distinct kernels it uses
  std::vector<EpilogueSpec> epilogues() const;          // distinct epilogues its products use
  const ir::Function& function() const { return function_; }

 private:
  void run_one(const float* input, float* output, ThreadPool* pool, const ir::MuonStepMatrix* io = nullptr) const;
  // How many of the batch's matrices run one per worker (whole rounds; 0: every product split).
  int64_t matrices_one_per_worker() const;
  // body(item, pool) for every matrix of the batch: pool null for the ones run one per worker.
  void for_each_matrix(const std::function<void(int64_t item, ThreadPool* pool)>& body) const;

  // One matrix per worker holds a set of planned buffers per worker at once: at most this much.
  static constexpr double kOnePerWorkerWorkspaceCap = 1024.0 * 1024 * 1024;

  ir::Function function_;
  CpuOptions options_;
  std::unique_ptr<GemmDriver> driver_;
  std::unique_ptr<ThreadPool> own_pool_;
  ThreadPool* pool_ = nullptr;
  double jit_seconds_ = 0;
  size_t workspace_bytes_ = 0;  // the planned buffers of one matrix
  std::vector<MicrokernelSpec> kernel_specs_;  // the compiled kernels, in compile order (microkernels())
  // Their functions by name: the driver asks for a kernel per product and stage, which for a batch
  // of small matrices is thousands of lookups a run.
  std::unordered_map<std::string, MicrokernelFunction> kernel_by_name_;
  std::vector<EpilogueFunction> node_epilogues_;  // per node (null: not a product)
  std::vector<EpilogueSpec> epilogue_specs_;
};

}  // namespace orthojit::cpu
