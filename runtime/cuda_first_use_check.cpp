// The first-use check of generated CUDA kernels (cuda_first_use_check.h).
#include "runtime/cuda_first_use_check.h"

#include <algorithm>
#include <cstdlib>
#include <map>
#include <mutex>
#include <optional>
#include <stdexcept>
#include <string_view>

#include "autotune/reference_check.h"
#include "cuda/hopper_codegen.h"
#include "ir/printer.h"
#include "reference/random_matrix.h"

namespace orthojit::runtime {
namespace {

// 200 x 264: with 128-wide tiles a whole interior tile and ragged edges along M, N and K in one
// probe, with 64-wide ones several of each; every extent a multiple of 8 (the sm_90a tile's TMA
// rows). Its float64 reference takes well under a second.
constexpr int64_t kProbeShort = 200, kProbeLong = 264;

int64_t product_count(const ir::Function& function) {
  return std::count_if(function.nodes.begin(), function.nodes.end(), [](const ir::Node& node) { return node.kind == ir::OpKind::Gemm; });
}

}  // namespace

passes::CompileOptions probe_options(const passes::CompileOptions& real, const cuda::CudaVariant& variant) {
  passes::CompileOptions probe = real;
  probe.muon_step.reset();  // the orthogonalizer's kernels; the Muon step only changes its two ends
  probe.batch = std::min<int64_t>(real.batch, 2);
  const bool wide = real.rows <= real.cols;
  const bool small = real.rows * real.cols <= kProbeShort * kProbeLong;
  if (variant.kind != cuda::CudaVariant::Kind::FusedSmall && !small) {
    probe.rows = wide ? kProbeShort : kProbeLong;
    probe.cols = wide ? kProbeLong : kProbeShort;
  }
  return probe;
}

cuda::CudaVariant probe_variant(const cuda::CudaProgram& real, const ir::Function& probe, const cuda::CudaVariant& variant) {
  if (variant.kind != cuda::CudaVariant::Kind::Generated) return variant;
  const int64_t products = product_count(probe);
  std::vector<std::optional<cuda::TileConfig>> tiles(static_cast<size_t>(products));
  for (const cuda::Launch& launch : real.launches) {
    if (launch.product < 0) continue;
    if (launch.product >= products)
      throw std::invalid_argument("the probe has " + std::to_string(products) + " products, the real program at least " + std::to_string(launch.product + 1));
    tiles[static_cast<size_t>(launch.product)] = launch.tile;
  }
  // A split-K product keeps its splits where the probe's K allows them (every split non-empty),
  // else runs on the tile unsplit: the probe's K is smaller than the real one.
  // (Each product's K at the probe's shape from its launches with the default tiles.)
  bool split = false;
  for (const auto& tile : tiles) split = split || (tile && tile->sm90a && tile->splits > 1);
  if (split)
    for (const cuda::Launch& launch : cuda::generate_variant(probe, cuda::CudaVariant{}).launches) {
      if (launch.product < 0) continue;
      auto& tile = tiles[static_cast<size_t>(launch.product)];
      if (tile && tile->sm90a && tile->splits > 1 && !cuda::split_k_valid(launch.k, tile->splits)) tile = cuda::sm90a_tile();
    }
  cuda::CudaVariant fixed;
  fixed.product_tiles = std::move(tiles);
  return fixed;
}

CudaFirstUseCheck check_cuda_variant_on_first_use(const dsl::Program& program, const passes::CompileOptions& real,
                                                  const cuda::CudaProgram& real_program, const cuda::CudaVariant& variant, const CudaProbeRun& run) {
  CudaFirstUseCheck result;
  if (variant.kind != cuda::CudaVariant::Kind::Generated && variant.kind != cuda::CudaVariant::Kind::FusedSmall) {
    result.detail = "not run: " + variant.label() + " calls the vendor library";
    return result;
  }
  if (const char* mode = std::getenv("ORTHOJIT_CUDA_FIRST_USE_CHECK"); mode && std::string_view(mode) == "off") {
    result.detail = "not run: ORTHOJIT_CUDA_FIRST_USE_CHECK=off";
    return result;
  }
  const passes::CompileOptions options = probe_options(real, variant);
  const ir::Function probe = passes::compile_program(program, options);
  const cuda::CudaVariant kernels = probe_variant(real_program, probe, variant);
  const std::string shape = std::to_string(options.rows) + "x" + std::to_string(options.cols) + "x" + std::to_string(options.batch);
  // One probe per process for each program text and kernel choice; concurrent first uses of the
  // same one wait for it (the mutex is held across the run, which is short).
  static std::mutex mutex;
  static std::map<std::string, CudaFirstUseCheck> done;
  const std::string key = ir::print_function(probe) + "\n" + kernels.label();
  std::lock_guard<std::mutex> lock(mutex);
  if (auto found = done.find(key); found != done.end()) return found->second;
  const std::vector<double> values = reference::gaussian_values(options.rows * options.cols * options.batch, 0xc0de);
  const std::vector<float> input(values.begin(), values.end());
  const std::vector<float> output = run(probe, kernels, input);
  const autotune::CheckResult check = autotune::check_against_reference(probe, input, output);
  result.ran = true;
  result.passed = check.ok;
  result.detail = "probe " + program.name + " " + shape + " " + std::string(ir::to_string(options.strategy)) + " with " + kernels.label() +
                  (check.ok ? ": within the f64 reference's bounds (tile error " + std::to_string(check.error) + ")" : ": " + check.message);
  done.emplace(key, result);
  return result;
}

}  // namespace orthojit::runtime
