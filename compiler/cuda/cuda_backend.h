// What the runtime, the tuner, the GPU tests and scripts/gpu-check call: a program compiled for
// one shape as one of the CUDA variants, ready to run on the device.
//
//   generated   one kernel per IR op (cuda_codegen.h), every product with the given tile
//               configuration (or the per-product default)
//   fused-small the whole iteration in one CTA per matrix (fused_small_codegen.h), m <= 128
//   cublas      Newton–Schulz from the formula with cuBLAS products (cublas_newton_schulz.h),
//               the old baseline (cublasGemmStridedBatchedEx plus device copies); standard only
//   cublaslt    Newton–Schulz as cuBLASLt matmuls (cublaslt_newton_schulz.h), C ≠ D with β in
//               the call: the vendor baseline and the tuner's vendor candidate; the program's
//               strategy decides which iteration runs (standard, or Gram NS on cuBLASLt)
#pragma once

#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "cuda/cublaslt_schedule.h"
#include "cuda/cuda_codegen.h"
#include "cuda/cuda_driver.h"
#include "cuda/nvrtc_compiler.h"
#include "cuda/program_cache.h"
#include "dsl/ast.h"
#include "ir/function.h"

namespace orthojit::cuda {

struct CudaVariant {
  enum class Kind { Generated, FusedSmall, Cublas, Cublaslt } kind = Kind::Generated;
  std::optional<TileConfig> tile;  // generated: every product's tile; none = default per product
  // generated: the tile of each product in schedule order (the tuner's per-product choice; a
  // product without a value or past the end takes its default; sm90a_tile(): that product on the
  // sm_90a tile). Exclusive with `tile`.
  std::vector<std::optional<TileConfig>> product_tiles{};
  // generated: the products the sm_90a tile can run use it (CodegenOptions::hopper_products; CC
  // 9.0 devices only), the others the tile above. Labelled "generated hopper ...".
  bool hopper = false;
  // Whether a product runs on the sm_90a tile (hopper, or a product or `tile` given
  // sm90a_tile()): the program needs compute capability 9.0.
  bool needs_sm90a() const;
  // Whether a Muon step compiled for this variant carries its update in the epilogue of the
  // last X's kernel (passes::CompileOptions::fuse_update). Not where products run on the sm_90a
  // tile: its epilogue stores D through TMA and takes no update (hopper_ineligible_reason), so a
  // fused update would keep the last product, a full-size one, on the mma.sync kernel; unfused,
  // the product stays on the tile and the update is one element-wise pass over the stored X.
  bool fuses_muon_update() const { return !needs_sm90a(); }
  // "generated", "generated 128x128x32/2x4", "generated per-product 64x64x32/2x2,-,sm90a"
  // ('-': that product's default; sm90a: the sm_90a tile), each also as "generated hopper[ ...]",
  // "fused-small", "cublas", "cublaslt"
  std::string label() const;
  // Parses label(); throws std::invalid_argument naming the valid forms.
  static CudaVariant parse(const std::string& text);
};

// Empty when `variant` can run `scheduled` (fused-small: its eligibility; cublas: standard
// strategy, 16-bit storage, cuBLAS present; cublaslt: 16-bit storage, steps of the form the
// strategy needs, cuBLASLt and a device present; none on the sm_90a tile while
// variant_switched_off_reason refuses it); else why not.
std::string variant_unavailable_reason(const ir::Function& scheduled, const CudaVariant& variant, int shared_memory_limit);

// Empty unless `variant` runs products on the sm_90a tile and ORTHOJIT_CUDA_SM90A turns the tile
// off in this process (sm90a_switch.h); then why, naming the switch. Part of
// variant_unavailable_reason; on its own where there is no schedule (a tuning record's winner).
std::string variant_switched_off_reason(const CudaVariant& variant);

// The cublaslt variant's per-step polynomials ([a, b, c] for standard, p_k for gram); empty
// with the reason in `why_not` when a step is not of the form the strategy needs.
std::vector<std::vector<double>> cublaslt_polynomials(const ir::Function& scheduled, std::string* why_not = nullptr);
// The cublaslt variant's sequence of matmuls for `scheduled` (its strategy, steps and gram
// restarts): what the device runs, and what tests/cublaslt_schedule_test.cpp runs in f64.
// Throws std::invalid_argument when a step is not of the form.
LtSchedule cublaslt_schedule_for(const ir::Function& scheduled);

// The generated source of a variant (not cublas or cublaslt), for `orthojit compile --emit cuda`.
CudaProgram generate_variant(const ir::Function& scheduled, const CudaVariant& variant, int shared_memory_limit = 163 * 1024, int multiprocessors = 132);

class CudaRunner {
 public:
  virtual ~CudaRunner() = default;
  // batch x rows x cols f32 (the user's shape), device memory; enqueued, not synchronized.
  virtual void run_device(CUdeviceptr input, CUdeviceptr output, CUstream stream) const = 0;
  // Host f32 in and out; synchronizes.
  virtual void run(const float* input, float* output) const = 0;
  // A Muon step (the scheduled function's muon_step): device pointers, enqueued on `stream`.
  // The generated and fused-small variants compile Muon steps (variant_unavailable_reason says so).
  virtual void run_muon_step(const std::vector<ir::MuonStepMatrix>& matrices, CUstream stream) const;
  // Its two halves: the argument block's upload, and the launches bound to it.
  virtual void upload_step_arguments(const std::vector<ir::MuonStepMatrix>& matrices, CUstream stream) const;
  // The launches alone, bound to the last run_muon_step's arguments (for graph capture).
  virtual void enqueue_launches(CUstream stream) const;
  const std::string& description() const { return description_; }  // "generated 128x128x32/2x4, 17 launches, sm_90 cubin (disk cache)"
  double compile_seconds() const { return compile_seconds_; }

 protected:
  std::string description_;
  double compile_seconds_ = 0;
};

// The kernels ptxas reports spilling registers to local memory, for a runner's description:
// "ptxas: gemm_3 spills 84 B stored, 84 B loaded (...)", or empty. A tile the search space would
// never offer (deep K tiles on few warps in the register-staged path) can still be asked for by
// name; it runs correctly but slowly, and the tuner's and the benchmark's lines then say why.
std::string spill_note(const NvrtcOutput& compiled);

// Compiles (through `cache`, the process default when null) and loads the variant on the
// device. A variant whose kernels spill says so in its description (spill_note). `program` supplies the normalization of the cublas and cublaslt variants.
// Throws std::invalid_argument for a variant that cannot run the function, CudaCompileError,
// CudaError or std::runtime_error (no device).
std::unique_ptr<CudaRunner> build_cuda_runner(const dsl::Program& program, const ir::Function& scheduled, const CudaVariant& variant,
                                              const NamedSources& device_headers, ProgramCache* cache = nullptr);

}  // namespace orthojit::cuda
