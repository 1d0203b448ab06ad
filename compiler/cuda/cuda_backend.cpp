// CUDA variants compiled and loaded (see cuda_backend.h).
#include "cuda/cuda_backend.h"

#include <algorithm>
#include <stdexcept>

#include "cuda/cublas_newton_schulz.h"
#include "cuda/cublaslt_newton_schulz.h"
#include "cuda/cuda_executable.h"
#include "cuda/fused_small_codegen.h"
#include "cuda/sm90a_switch.h"

namespace orthojit::cuda {
namespace {

class GeneratedRunner : public CudaRunner {
 public:
  GeneratedRunner(CudaProgram program, const NvrtcOutput& compiled, std::string description, double compile_seconds)
      : executable_(std::move(program), compiled) {
    description_ = std::move(description);
    compile_seconds_ = compile_seconds;
  }
  void run_device(CUdeviceptr input, CUdeviceptr output, CUstream stream) const override { executable_.run_device(input, output, stream); }
  void run(const float* input, float* output) const override { executable_.run(input, output); }
  void run_muon_step(const std::vector<ir::MuonStepMatrix>& matrices, CUstream stream) const override { executable_.run_muon_step(matrices, stream); }
  void enqueue_launches(CUstream stream) const override { executable_.enqueue_launches(stream); }
  void upload_step_arguments(const std::vector<ir::MuonStepMatrix>& matrices, CUstream stream) const override {
    executable_.upload_step_arguments(matrices, stream);
  }

 private:
  CudaExecutable executable_;
};

// The baseline's per-step (a, b, c) of X ← (a + b·A + c·A²)·X: the polynomial odd-polynomial
// recognition found in the step body (whatever form the program wrote it in), so the baseline
// computes the same map as the program. Empty when a step is not of that form.
std::vector<dsl::Triple> polynomial_steps(const ir::Function& scheduled) {
  std::vector<dsl::Triple> steps;
  for (const ir::StepInfo& step : scheduled.steps) {
    if (!step.recognized || step.polynomial.empty() || step.polynomial.size() > 3) return {};
    dsl::Triple triple;
    triple.a = step.polynomial[0];
    triple.b = step.polynomial.size() > 1 ? step.polynomial[1] : 0.0;
    triple.c = step.polynomial.size() > 2 ? step.polynomial[2] : 0.0;
    steps.push_back(triple);
  }
  return steps;
}

class CublasRunner : public CudaRunner {
 public:
  CublasRunner(const dsl::Program& program, const ir::Function& scheduled, const NamedSources& headers)
      : baseline_(scheduled.batch, scheduled.input_shape.rows.size, scheduled.input_shape.cols.size, scheduled.policy.storage,
                  polynomial_steps(scheduled), program.normalization, headers) {
    description_ = "cublas (Newton–Schulz from the formula, cublasGemmStridedBatchedEx)";
  }
  void run_device(CUdeviceptr input, CUdeviceptr output, CUstream stream) const override { baseline_.run_device(input, output, stream); }
  void run(const float* input, float* output) const override { baseline_.run(input, output); }

 private:
  CublasNewtonSchulz baseline_;
};

}  // namespace

std::vector<std::vector<double>> cublaslt_polynomials(const ir::Function& scheduled, std::string* why_not) {
  std::vector<std::vector<double>> polynomials;
  const bool gram = scheduled.strategy.kind == ir::StrategyKind::Gram;
  for (size_t k = 0; k < scheduled.steps.size(); ++k) {
    const ir::StepInfo& step = scheduled.steps[k];
    if (!step.recognized || step.polynomial.empty() || (!gram && step.polynomial.size() > 3)) {
      if (why_not)
        *why_not = "step " + std::to_string(k) + " of the program is not " +
                   (gram ? std::string("X ← p(X·Xᵀ)·X, the form Gram NS on cuBLASLt computes") : std::string("X ← (a + b·A + c·A²)·X, the form the cuBLASLt baseline computes"));
      return {};
    }
    polynomials.push_back(step.polynomial);
  }
  if (polynomials.empty() && why_not) *why_not = "the program has no Newton–Schulz steps";
  return polynomials;
}

LtSchedule cublaslt_schedule_for(const ir::Function& scheduled) {
  std::string why_not;
  const auto polynomials = cublaslt_polynomials(scheduled, &why_not);
  if (polynomials.empty()) throw std::invalid_argument(why_not);
  const int64_t rows = scheduled.input_shape.rows.size, cols = scheduled.input_shape.cols.size;
  return scheduled.strategy.kind == ir::StrategyKind::Gram ? gram_lt_schedule(rows, cols, polynomials, scheduled.strategy.gram_restarts)
                                                           : standard_lt_schedule(rows, cols, polynomials);
}

namespace {

class CublasLtRunner : public CudaRunner {
 public:
  CublasLtRunner(const dsl::Program& program, const ir::Function& scheduled, const NamedSources& headers)
      : baseline_(scheduled.batch, scheduled.input_shape.rows.size, scheduled.input_shape.cols.size, scheduled.policy.storage,
                  cublaslt_schedule_for(scheduled), program.normalization, headers) {
    size_t matmuls = 0;
    for (const LtOp& op : baseline_.schedule().ops) matmuls += op.kind == LtOp::Kind::Matmul ? 1 : 0;
    description_ = std::string("cublaslt ") + ir::to_string(scheduled.strategy.kind) + " (Newton–Schulz as " + std::to_string(matmuls) +
                   " cublasLtMatmul calls, C ≠ D, heuristic algorithms)";
  }
  void run_device(CUdeviceptr input, CUdeviceptr output, CUstream stream) const override { baseline_.run_device(input, output, stream); }
  void run(const float* input, float* output) const override { baseline_.run(input, output); }

 private:
  CublasLtNewtonSchulz baseline_;
};

const char* source_name(ProgramCache::Result::Source source) {
  switch (source) {
    case ProgramCache::Result::Source::Memory: return "memory cache";
    case ProgramCache::Result::Source::Disk: return "disk cache";
    case ProgramCache::Result::Source::Compiled: return "compiled";
  }
  return "?";
}

}  // namespace

std::string spill_note(const NvrtcOutput& compiled) {
  std::string note;
  for (const auto& [kernel, resources] : compiled.resources)
    if (resources.spill_store_bytes + resources.spill_load_bytes > 0)
      note += (note.empty() ? "" : ", ") + kernel + " spills " + std::to_string(resources.spill_store_bytes) + " B stored, " +
              std::to_string(resources.spill_load_bytes) + " B loaded";
  return note.empty() ? note : "ptxas: " + note + " (local memory in the main loop: a slow tile)";
}

void CudaRunner::run_muon_step(const std::vector<ir::MuonStepMatrix>&, CUstream) const {
  throw std::invalid_argument("only the generated and fused-small CUDA variants compile a Muon step; this runner is " + description_);
}

void CudaRunner::upload_step_arguments(const std::vector<ir::MuonStepMatrix>&, CUstream) const {
  throw std::invalid_argument("only the generated and fused-small CUDA variants compile a Muon step; this runner is " + description_);
}

void CudaRunner::enqueue_launches(CUstream) const {
  throw std::invalid_argument("only the generated CUDA variant replays its launches; this runner is " + description_);
}

bool CudaVariant::needs_sm90a() const {
  if (kind != Kind::Generated) return false;
  if (hopper || (tile && tile->sm90a)) return true;
  for (const std::optional<TileConfig>& product : product_tiles)
    if (product && product->sm90a) return true;
  return false;
}

std::string CudaVariant::label() const {
  switch (kind) {
    case Kind::Generated: {
      const std::string generated = hopper ? "generated hopper" : "generated";
      if (tile) return generated + " " + tile->label();
      if (product_tiles.empty()) return generated;
      std::string text = generated + " per-product ";
      for (size_t i = 0; i < product_tiles.size(); ++i) text += (i ? "," : "") + (product_tiles[i] ? product_tiles[i]->label() : std::string("-"));
      return text;
    }
    case Kind::FusedSmall: return "fused-small";
    case Kind::Cublas: return "cublas";
    case Kind::Cublaslt: return "cublaslt";
  }
  return "?";
}

CudaVariant CudaVariant::parse(const std::string& text) {
  if (text == "generated hopper" || text.rfind("generated hopper ", 0) == 0) {
    CudaVariant variant = parse("generated" + text.substr(16));
    variant.hopper = true;
    return variant;
  }
  CudaVariant variant;
  if (text == "generated") return variant;
  if (text == "fused-small") {
    variant.kind = Kind::FusedSmall;
    return variant;
  }
  if (text == "cublas") {
    variant.kind = Kind::Cublas;
    return variant;
  }
  if (text == "cublaslt") {
    variant.kind = Kind::Cublaslt;
    return variant;
  }
  auto parse_tile = [](const std::string& label, TileConfig& tile) {
    if (label == "sm90a") {
      tile = sm90a_tile();
      return true;
    }
    if (label == "sm90a/n256") {
      tile = sm90a_wide_tile();
      return true;
    }
    int splits = 0;
    if (std::sscanf(label.c_str(), "sm90a/k%d", &splits) == 1) {
      tile = sm90a_tile(splits);
      return tile.label() == label;
    }
    return std::sscanf(label.c_str(), "%dx%dx%d/%dx%d", &tile.bm, &tile.bn, &tile.bk, &tile.warps_m, &tile.warps_n) == 5 && tile.label() == label;
  };
  if (text.rfind("generated per-product ", 0) == 0) {
    const std::string list = text.substr(22);
    size_t begin = 0;
    while (begin <= list.size()) {
      const size_t end = std::min(list.find(',', begin), list.size());
      const std::string item = list.substr(begin, end - begin);
      TileConfig tile;
      if (item == "-") {
        variant.product_tiles.emplace_back();
      } else if (parse_tile(item, tile)) {
        if (const std::string reason = tile.invalid_reason(); !reason.empty()) throw std::invalid_argument("CUDA variant '" + text + "': " + item + ": " + reason);
        variant.product_tiles.emplace_back(tile);
      } else {
        throw std::invalid_argument("CUDA variant '" + text + "': '" + item + "' is not a tile BMxBNxBK/WMxWN, 'sm90a' (the sm_90a tile), 'sm90a/kS' (it, K in S splits) or '-' (the product's default)");
      }
      begin = end + 1;
    }
    return variant;
  }
  if (text.rfind("generated ", 0) == 0) {
    TileConfig tile;
    if (std::sscanf(text.c_str() + 10, "%dx%dx%d/%dx%d", &tile.bm, &tile.bn, &tile.bk, &tile.warps_m, &tile.warps_n) == 5 && tile.label() == text.substr(10)) {
      if (const std::string reason = tile.invalid_reason(); !reason.empty()) throw std::invalid_argument("CUDA variant '" + text + "': " + reason);
      variant.tile = tile;
      return variant;
    }
  }
  throw std::invalid_argument("unknown CUDA variant '" + text + "'; valid: generated, 'generated BMxBNxBK/WMxWN' (e.g. 'generated 128x128x32/2x4'), 'generated per-product T1,T2,...' (a tile, 'sm90a', 'sm90a/kS' or '-' per product), each also as 'generated hopper ...' (products on the sm_90a tile where it can run them), fused-small, cublas, cublaslt");
}

std::string variant_switched_off_reason(const CudaVariant& variant) {
  if (!variant.needs_sm90a()) return "";
  const std::string why = sm90a_disabled_reason();
  return why.empty() ? "" : "the " + variant.label() + " variant runs products on the sm_90a tile (wgmma, TMA), which " + why + " turns off";
}

std::string variant_unavailable_reason(const ir::Function& scheduled, const CudaVariant& variant, int shared_memory_limit) {
  if (std::string reason = variant_switched_off_reason(variant); !reason.empty()) return reason;
  for (const ir::Node& node : scheduled.nodes)
    if (node.kind == ir::OpKind::Normalize && node.normalization.kind == dsl::Normalization::Kind::Aol)
      return "the program normalizes with AOL (normalize aol), which the CUDA backend does not implement; run it on the cpu or ref backend";
  const bool sixteen_bit = scheduled.policy.storage == ScalarType::BF16 || scheduled.policy.storage == ScalarType::F16;
  if (scheduled.muon_step && variant.kind != CudaVariant::Kind::Generated && variant.kind != CudaVariant::Kind::FusedSmall)
    return "a Muon step (momentum and update fused into the iteration) is compiled by the generated and fused-small variants only";
  // The vendor baselines' own kernels (baseline_kernels.cpp) put the batch in grid.z.
  if ((variant.kind == CudaVariant::Kind::Cublas || variant.kind == CudaVariant::Kind::Cublaslt) && scheduled.batch > 65535)
    return "a batch of " + std::to_string(scheduled.batch) + " matrices: the vendor baselines' normalize and output kernels take at most 65535 (grid.z)";
  switch (variant.kind) {
    case CudaVariant::Kind::Generated:
      return sixteen_bit ? "" : "the CUDA backend runs products on bf16 or f16 storage; this program stores " + std::string(to_string(scheduled.policy.storage)) + " (add --precision bf16 or f16)";
    case CudaVariant::Kind::FusedSmall: {
      FusedSmallOptions options;
      options.shared_memory_limit = shared_memory_limit;
      return fused_small_ineligible_reason(scheduled, options);
    }
    case CudaVariant::Kind::Cublas:
      if (scheduled.strategy.kind != ir::StrategyKind::Standard) return "the cuBLAS baseline runs the standard strategy only";
      if (!sixteen_bit) return "the cuBLAS baseline runs bf16 or f16 storage";
      if (polynomial_steps(scheduled).empty()) return "a step of the program is not X ← (a + b·A + c·A²)·X, the form the cuBLAS baseline computes";
      return CublasNewtonSchulz::unavailable_reason();
    case CudaVariant::Kind::Cublaslt: {
      if (!sixteen_bit) return "the cuBLASLt baseline runs bf16 or f16 storage";
      std::string why_not;
      if (cublaslt_polynomials(scheduled, &why_not).empty()) return why_not;
      return CublasLtNewtonSchulz::unavailable_reason();
    }
  }
  return "unknown variant";
}

CudaProgram generate_variant(const ir::Function& scheduled, const CudaVariant& variant, int shared_memory_limit, int multiprocessors) {
  switch (variant.kind) {
    case CudaVariant::Kind::Generated: {
      CodegenOptions options;
      options.multiprocessors = multiprocessors;
      options.hopper_products = variant.hopper;
      if (variant.tile) options.gemm_tiles.assign(scheduled.nodes.size(), *variant.tile);
      else options.gemm_tiles = variant.product_tiles;
      return generate_cuda(scheduled, options);
    }
    case CudaVariant::Kind::FusedSmall: {
      FusedSmallOptions options;
      options.shared_memory_limit = shared_memory_limit;
      return generate_fused_small_cuda(scheduled, options);
    }
    case CudaVariant::Kind::Cublas:
    case CudaVariant::Kind::Cublaslt: break;
  }
  throw std::invalid_argument("the " + variant.label() + " variant has no generated source (it calls the vendor library)");
}

std::unique_ptr<CudaRunner> build_cuda_runner(const dsl::Program& program, const ir::Function& scheduled, const CudaVariant& variant,
                                              const NamedSources& device_headers, ProgramCache* cache) {
  const Device& device = Device::get();
  const int shared_limit = device.info().max_shared_per_block_optin;
  if (const std::string reason = variant_unavailable_reason(scheduled, variant, shared_limit); !reason.empty())
    throw std::invalid_argument("CUDA variant " + variant.label() + " cannot run " + scheduled.name + ": " + reason);
  if (variant.kind == CudaVariant::Kind::Cublas) return std::make_unique<CublasRunner>(program, scheduled, device_headers);
  if (variant.kind == CudaVariant::Kind::Cublaslt) return std::make_unique<CublasLtRunner>(program, scheduled, device_headers);
  if (variant.needs_sm90a() && device.info().sm != 90)
    throw std::invalid_argument("CUDA variant " + variant.label() + " runs the sm_90a product tile, which needs compute capability 9.0; this device is " +
                                device.info().describe());
  CudaProgram generated = generate_variant(scheduled, variant, shared_limit, std::max(1, device.info().multiprocessors));
  ProgramCache& programs = cache ? *cache : ProgramCache::process_default();
  // wgmma and setmaxnreg exist in the arch-specific target only.
  const std::string target = generated.compile_target(device.compile_target());
  ProgramCache::Result compiled = programs.get_or_compile(generated.source, device_headers, target);
  std::string description = variant.label() + ", " + std::to_string(generated.launches.size()) + " launch" +
                                  (generated.launches.size() == 1 ? "" : "es") + ", " + target + (target.rfind("sm_", 0) == 0 ? " cubin" : " PTX") +
                                  " (" + source_name(compiled.source) + ")";
  if (const std::string spills = spill_note(compiled.output); !spills.empty()) description += "; " + spills;
  return std::make_unique<GeneratedRunner>(std::move(generated), compiled.output, description, compiled.compile_seconds);
}

}  // namespace orthojit::cuda
