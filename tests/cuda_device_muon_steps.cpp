// The Muon step on a device: see cuda_device_muon_steps.h.
#include "cuda_device_muon_steps.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <random>
#include <tuple>

#include "autotune/error_measure.h"
#include "cuda/program_cache.h"
#include "cuda/cuda_backend.h"
#include "cuda/sm_count_override.h"
#include "cuda/cuda_driver.h"
#include "cuda/sm90a_switch.h"
#include "cuda/sticky_error.h"
#include "ir/muon_step.h"
#include "kernels/program_library.h"
#include "passes/pipeline.h"
#include "reference/interpreter.h"

namespace orthojit::device_test {
namespace {

struct StepCase {
  int64_t rows, cols, batch;
  cuda::CudaVariant variant;
  std::string name() const {
    return "muon step jordan_ns5 bf16 standard " + std::to_string(rows) + "x" + std::to_string(cols) + "x" + std::to_string(batch) + " [" + variant.label() +
           (variant.fuses_muon_update() ? ", update fused" : ", update its own pass") + "]";
  }
};

// Nesterov momentum on an f32 gradient and an f32 parameter: f32 so that the orthogonal factor
// the step applied can be read back from the parameter (bf16 would round most updates away).
const ir::MuonStepSpec kSpec{false, true, ScalarType::F32, ScalarType::F32};

ir::Function schedule(const StepCase& c, bool muon_step) {
  passes::CompileOptions options;
  options.rows = c.rows;
  options.cols = c.cols;
  options.batch = c.batch;
  options.precision = ScalarType::BF16;
  options.strategy = ir::StrategyKind::Standard;
  if (muon_step) {
    options.muon_step = kSpec;
    options.fuse_update = c.variant.fuses_muon_update();  // as runtime/orthogonalize.cpp compiles it
  }
  return passes::compile_program(kernels::load_program_by_name_or_path("jordan_ns5"), options);
}

MuonStepOutcome run_case(const StepCase& c, const cuda::NamedSources& headers) {
  MuonStepOutcome outcome;
  outcome.name = c.name();
  const dsl::Program program = kernels::load_program_by_name_or_path("jordan_ns5");
  const ir::Function step = schedule(c, true), plain = schedule(c, false);
  auto runner = cuda::build_cuda_runner(program, step, c.variant, headers);
  const int64_t elements = c.rows * c.cols, total = elements * c.batch;
  std::mt19937 random(4242);
  std::normal_distribution<double> normal(0.0, 1.0);
  std::vector<float> grad(static_cast<size_t>(total)), momentum(static_cast<size_t>(total)), param(static_cast<size_t>(total));
  for (int64_t i = 0; i < total; ++i) {
    grad[static_cast<size_t>(i)] = static_cast<float>(1e-2 * normal(random));
    momentum[static_cast<size_t>(i)] = static_cast<float>(1e-2 * normal(random));
    param[static_cast<size_t>(i)] = static_cast<float>(0.1 * normal(random));
  }
  cuda::DeviceBuffer device_grad(total * 4), device_momentum(total * 4), device_param(total * 4);
  device_grad.upload(grad.data(), total * 4);
  device_momentum.upload(momentum.data(), total * 4);
  device_param.upload(param.data(), total * 4);
  std::vector<ir::MuonStepMatrix> matrices(static_cast<size_t>(c.batch));
  for (int64_t z = 0; z < c.batch; ++z) {
    ir::MuonStepMatrix& io = matrices[static_cast<size_t>(z)];
    io.grad = static_cast<std::uintptr_t>(device_grad.get() + static_cast<CUdeviceptr>(z * elements * 4));
    io.momentum = static_cast<std::uintptr_t>(device_momentum.get() + static_cast<CUdeviceptr>(z * elements * 4));
    io.param = static_cast<std::uintptr_t>(device_param.get() + static_cast<CUdeviceptr>(z * elements * 4));
    io.beta = 0.9 + 0.03 * static_cast<double>(z);
    io.step = 0.02 * static_cast<double>(z + 1);
    io.decay = 1.0 - 1e-3 * static_cast<double>(z + 1);
  }
  runner->run_muon_step(matrices, nullptr);
  cuda::check(cuda::Device::get().api().cuCtxSynchronize(), outcome.name);
  std::vector<float> momentum_after(static_cast<size_t>(total)), param_after(static_cast<size_t>(total));
  device_momentum.download(momentum_after.data(), total * 4);
  device_param.download(param_after.data(), total * 4);

  // The momentum, bit for bit; U from it, as the host rules compute them.
  std::vector<double> update(static_cast<size_t>(total));
  std::vector<float> applied(static_cast<size_t>(total));
  int64_t momentum_differs = 0, first = -1;
  for (int64_t z = 0; z < c.batch; ++z) {
    const ir::MuonStepMatrix& io = matrices[static_cast<size_t>(z)];
    for (int64_t i = z * elements; i < (z + 1) * elements; ++i) {
      const size_t at = static_cast<size_t>(i);
      const float next = ir::muon_momentum_next(kSpec.ema, io.beta, grad[at], momentum[at]);
      if (std::memcmp(&next, &momentum_after[at], 4) != 0 && momentum_differs++ == 0) first = i;
      update[at] = ir::muon_update_value(kSpec.ema, kSpec.nesterov, io.beta, grad[at], next);
      // The factor the step applied: p' = p·decay − step·O rounded once to f32, so this is O
      // within 2⁻²⁴·|p'| / step (about 1e-6 here, against bf16's 4e-3).
      applied[at] = static_cast<float>((static_cast<double>(param[at]) * io.decay - static_cast<double>(param_after[at])) / io.step);
    }
  }
  const std::vector<double> reference = reference::interpret(plain, update);
  const autotune::ErrorMeasure measure = autotune::measure_error(applied.data(), reference.data(), c.rows, c.cols, c.batch);
  const autotune::ErrorBounds bounds = autotune::error_bounds(plain);
  outcome.ok = momentum_differs == 0 && autotune::within(measure, bounds);
  char line[256];
  std::snprintf(line, sizeof line, "momentum: %lld elements differ; applied factor: tile %.2e (tol %.2e), rel %.2e (tol %.0e)", static_cast<long long>(momentum_differs),
                measure.tile, bounds.tile, measure.frobenius, bounds.frobenius);
  outcome.message = line;
  if (momentum_differs > 0) outcome.message += "; first differing momentum element " + std::to_string(first);
  if (!measure.finite) outcome.message += "; a non-finite parameter";
  else if (!autotune::within(measure, bounds)) outcome.message += "; " + autotune::describe_violation(measure, bounds, c.rows, c.cols);
  return outcome;
}

}  // namespace

std::vector<MuonStepOutcome> check_muon_steps(int device_sm, bool host_only, const std::string& host_target, const cuda::NamedSources& headers,
                                              const std::vector<std::string>& filters, std::string& skipped_reason, CaseLog& log) {
  cuda::CudaVariant generated, hopper;
  hopper.hopper = true;
  // A wide shape and a tall one (the step runs oriented: momentum and parameter through the
  // transpose), 16-byte aligned rows so that every product of the hopper variant is on the tile.
  std::vector<StepCase> cases;
  for (const cuda::CudaVariant& variant : {generated, hopper})
    for (const auto& [rows, cols, batch] : {std::tuple<int64_t, int64_t, int64_t>{256, 1024, 2}, {512, 256, 1}}) cases.push_back({rows, cols, batch, variant});
  std::vector<MuonStepOutcome> outcomes;
  for (const StepCase& c : cases) {
    if (!passes_filters(c.name(), filters)) continue;
    const bool needs_90 = c.variant.needs_sm90a();
    if (const std::string off = cuda::sm90a_disabled_reason(); needs_90 && !off.empty()) {
      skipped_reason = "the sm_90a tile is turned off by " + off;
      continue;
    }
    if (host_only) {
      if (needs_90 && host_target != "sm_90" && host_target != "sm_90a") continue;
      MuonStepOutcome outcome;
      outcome.name = c.name() + " (NVRTC " + (needs_90 ? std::string("sm_90a") : host_target) + ")";
      log.begin(outcome.name);
      try {
        // The opt-in shared memory and SM count of an H100/H200 (the hopper tile's plan needs them;
        // the SM count as ORTHOJIT_CUDA_SM_COUNT sizes it, e.g. under cuda_device_test --one-sm).
        const cuda::CudaProgram program = cuda::generate_variant(schedule(c, true), c.variant, 227 * 1024, cuda::multiprocessors_to_use(132));
        // Through the program cache, as the device run compiles it (so scripts/gpu-kit's prewarm
        // holds it too).
        cuda::ProgramCache::process_default().get_or_compile(program.source, headers, program.compile_target(host_target));
        outcome.ok = true;
      } catch (const std::exception& error) {
        outcome.message = error.what();
      }
      std::printf("%s %s%s%s\n", outcome.ok ? "READY" : "FAIL", outcome.name.c_str(), outcome.message.empty() ? "" : ": ", outcome.message.c_str());
      log.finish({outcome.name, outcome.ok, outcome.message, ""});
      outcomes.push_back(outcome);
      continue;
    }
    if (needs_90 && device_sm != 90) {
      skipped_reason = "the Muon step on the sm_90a tile needs compute capability 9.0 (this device: sm_" + std::to_string(device_sm) + ")";
      continue;
    }
    MuonStepOutcome outcome;
    const std::string name = c.name();
    std::string sticky;  // the context's sticky error after a failure (cuda/sticky_error.h)
    log.begin(name);
    try {
      outcome = run_case(c, headers);
      if (!outcome.ok) sticky = cuda::poisoned_context_reason();
    } catch (const std::exception& error) {
      outcome.name = name;
      outcome.message = error.what();
      sticky = cuda::sticky_error_after(error);
    }
    std::printf("%s %s: %s\n", outcome.ok ? "PASS" : "FAIL", outcome.name.c_str(), outcome.message.c_str());
    log.finish({name, outcome.ok, outcome.message, ""});
    log.stop_if_sticky(name, sticky);
    outcomes.push_back(outcome);
  }
  return outcomes;
}

}  // namespace orthojit::device_test
