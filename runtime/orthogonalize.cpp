// Strategy resolution, backend dispatch, and the in-memory cache of compiled CPU executables.
#include "runtime/orthogonalize.h"

#include <cstdio>
#include <cstdlib>
#include <map>
#include <mutex>
#include <stdexcept>

#include "autotune/record_lookup.h"
#include "autotune/strategy_heuristic.h"
#ifdef ORTHOJIT_HAVE_CUDA
#include "autotune/cuda_tuner.h"
#include "runtime/cuda_first_use_check.h"
#endif
#include "cpu/amx_self_check.h"
#include "cpu/bf16_engine.h"
#include "support/host_cpu.h"
#include "cpu/build_status.h"
#include "cpu/cpu_executable.h"
#include "cpu/thread_pool.h"
#include "ir/printer.h"
#include "passes/pipeline.h"
#include "reference/interpreter.h"
#ifdef ORTHOJIT_HAVE_CUDA
#include "cuda/cuda_backend.h"
#include "cuda/stream_order.h"
#include "kernels/cuda_device_headers.h"
#endif

namespace orthojit::runtime {
namespace {

class ReferenceOrthogonalizer : public CompiledOrthogonalizer {
 public:
  void run(const float* input, float* output) const override {
    // Refuse a Muon step before reading: its input is not one X of batch x rows x cols (ASan
    // found the copy below reading past a caller's shorter buffer before interpret refused it).
    if (function_.muon_step) throw std::invalid_argument("run: this orthogonalizer was compiled as a Muon step; call run_muon_step");
    const size_t count = static_cast<size_t>(function_.input_shape.elements() * function_.batch);
    std::vector<double> values(input, input + count);
    const auto result = reference::interpret(function_, values);
    for (size_t i = 0; i < count; ++i) output[i] = static_cast<float>(result[i]);
  }
  void run_muon_step(const std::vector<ir::MuonStepMatrix>& matrices, void*) const override { reference::interpret_muon_step(function_, matrices); }
};

class CpuOrthogonalizer : public CompiledOrthogonalizer {
 public:
  explicit CpuOrthogonalizer(std::shared_ptr<const cpu::CpuExecutable> executable) : executable_(std::move(executable)) {}
  void run(const float* input, float* output) const override { executable_->run(input, output); }
  void run_muon_step(const std::vector<ir::MuonStepMatrix>& matrices, void*) const override { executable_->run_muon_step(matrices); }

 private:
  std::shared_ptr<const cpu::CpuExecutable> executable_;
};

#ifdef ORTHOJIT_HAVE_CUDA
// A loaded program as the process shares it, and what orders its uses (cuda/stream_order.h).
struct SharedRunner {
  std::shared_ptr<const cuda::CudaRunner> runner;
  std::shared_ptr<cuda::StreamOrder> order;
};

class CudaOrthogonalizer : public CompiledOrthogonalizer {
 public:
  explicit CudaOrthogonalizer(SharedRunner shared) : runner_(std::move(shared.runner)), order_(std::move(shared.order)) {}
  void run(const float* input, float* output) const override {
    cuda::StreamOrder::Use use(*order_, nullptr);
    runner_->run(input, output);
  }
  void run_device(std::uintptr_t input, std::uintptr_t output, void* stream) const override {
    cuda::StreamOrder::Use use(*order_, static_cast<CUstream>(stream));
    runner_->run_device(static_cast<CUdeviceptr>(input), static_cast<CUdeviceptr>(output), static_cast<CUstream>(stream));
  }
  bool runs_on_device() const override { return true; }
  void run_muon_step(const std::vector<ir::MuonStepMatrix>& matrices, void* stream) const override {
    cuda::StreamOrder::Use use(*order_, static_cast<CUstream>(stream));
    runner_->run_muon_step(matrices, static_cast<CUstream>(stream));
  }
  cuda::StreamOrder* stream_order() const override { return order_.get(); }
  void enqueue_launches(void* stream) const override { runner_->enqueue_launches(static_cast<CUstream>(stream)); }
  void upload_step_arguments(const std::vector<ir::MuonStepMatrix>& matrices, void* stream) const override {
    runner_->upload_step_arguments(matrices, static_cast<CUstream>(stream));
  }

 private:
  std::shared_ptr<const cuda::CudaRunner> runner_;
  std::shared_ptr<cuda::StreamOrder> order_;
};

void check_first_use(const dsl::Program& program, const ir::Function& function, const cuda::CudaVariant& variant, const passes::CompileOptions& compile);

// Loaded variants keyed by the scheduled IR's text and the variant (the program cache under them
// keeps the compiled images across processes). With `first_use` (the real program's compile
// options), a runner about to be built for the first time is first judged by the first-use check
// (cuda_first_use_check.h), whose probe runners come from here without it; outside the lock,
// since the probe loads its own runner.
SharedRunner cached_cuda_runner(const dsl::Program& program, const ir::Function& function, const cuda::CudaVariant& variant, double& compile_seconds,
                                const passes::CompileOptions* first_use = nullptr) {
  static std::mutex mutex;
  static std::map<std::string, SharedRunner> cache;
  const std::string key = ir::print_function(function) + "\n" + variant.label();
  auto cached = [&]() -> SharedRunner {
    std::lock_guard<std::mutex> lock(mutex);
    const auto it = cache.find(key);
    return it == cache.end() ? SharedRunner{} : it->second;
  };
  if (SharedRunner shared = cached(); shared.runner) {
    compile_seconds = 0;
    return shared;
  }
  try {
    if (first_use) check_first_use(program, function, variant, *first_use);
    std::lock_guard<std::mutex> lock(mutex);
    if (auto it = cache.find(key); it != cache.end()) {  // another thread built it meanwhile
      compile_seconds = 0;
      return it->second;
    }
    SharedRunner shared{cuda::build_cuda_runner(program, function, variant, kernels::cuda_device_headers()),
                        std::make_shared<cuda::StreamOrder>(cuda::cuda_stream_order_driver())};
    compile_seconds = shared.runner->compile_seconds();
    cache.emplace(key, shared);
    return shared;
  } catch (const std::invalid_argument& error) {
    throw UsageError(error.what());
  }
}

// Kernels nothing has judged on this device yet run a small probe of the same program first;
// wrong ones refuse the program (cuda_first_use_check.h).
void check_first_use(const dsl::Program& program, const ir::Function& function, const cuda::CudaVariant& variant, const passes::CompileOptions& compile) {
  if (variant.kind != cuda::CudaVariant::Kind::Generated && variant.kind != cuda::CudaVariant::Kind::FusedSmall) return;  // vendor libraries
  const cuda::Device& device = cuda::Device::get();
  const cuda::CudaProgram real = cuda::generate_variant(function, variant, device.info().max_shared_per_block_optin, std::max(1, device.info().multiprocessors));
  const CudaFirstUseCheck check = check_cuda_variant_on_first_use(
      program, compile, real, variant, [&](const ir::Function& probe, const cuda::CudaVariant& kernels, const std::vector<float>& input) {
        double probe_compile_seconds = 0;
        const SharedRunner probe_runner = cached_cuda_runner(program, probe, kernels, probe_compile_seconds);
        std::vector<float> output(input.size());
        cuda::StreamOrder::Use use(*probe_runner.order, nullptr);
        probe_runner.runner->run(input.data(), output.data());
        return output;
      });
  if (!check.passed)
    throw UnavailableError("--backend cuda: the " + variant.label() + " kernels failed their first-use check on " + device.info().describe() + " (" +
                           check.detail + "); run --variant cublaslt, tune this shape (orthojit tune --backend cuda), or use --backend cpu. "
                           "ORTHOJIT_CUDA_FIRST_USE_CHECK=off skips the check");
}
#endif

std::string cuda_unavailable_reason() {
#ifdef ORTHOJIT_HAVE_CUDA
  std::string reason;
  if (!cuda::driver(&reason)) return reason;
  try {
    cuda::Device::get();
  } catch (const std::exception& error) {
    return error.what();
  }
  return "";
#else
  return "this build has no CUDA backend (the CUDA toolkit was not found when it was configured)";
#endif
}

// The engine of the bf16 products (cpu/bf16_engine.h) into `cpu_options`: --kernel (with the ISA
// path it needs, checked against a forced --isa), else the tuning record's winner (already in
// cpu_options when `engine_from_record`), else the path's default (the vdpbf16ps kernel where it
// measured faster than f32 FMAs).
void choose_bf16_engine(const OrthogonalizeOptions& options, bool engine_from_record, cpu::CpuOptions& cpu_options) {
  if (options.cpu_kernel.empty()) {
    if (!engine_from_record) cpu_options.blocking.bf16_dot = cpu::default_bf16_engine(cpu_options.isa) == cpu::Bf16Engine::Bf16Dot;
    return;
  }
  const auto engine = cpu::parse_bf16_engine(options.cpu_kernel);
  if (!engine) throw UsageError("unknown kernel '" + options.cpu_kernel + "'; expected fma, bf16dot or amx");
  const cpu::CpuIsa needed = cpu::isa_for(*engine);
  if (!cpu::host_supports(needed)) throw UsageError("--kernel " + options.cpu_kernel + ": " + cpu::unsupported_reason(needed));
  const bool fma_on_forced_path = *engine == cpu::Bf16Engine::Fma && cpu_options.isa != cpu::CpuIsa::AmxBf16;
  if (!options.cpu_isa.empty() && cpu_options.isa != needed && !fma_on_forced_path)
    throw UsageError("--kernel " + options.cpu_kernel + " runs on the " + std::string(cpu::to_string(needed)) + " path; --isa " + options.cpu_isa +
                     " names another (" + (cpu_options.isa == cpu::CpuIsa::AmxBf16 ? "its bf16 products run on AMX tiles)" : "it has no such kernel)"));
  if (!fma_on_forced_path) cpu_options.isa = needed;
  cpu_options.blocking.bf16_dot = *engine == cpu::Bf16Engine::Bf16Dot;
}

// Executables keyed by the scheduled IR's text and the CPU options: the IR text holds the shape,
// strategy, types and coefficients; the microkernels below carry their own key
// (docs/cpu-backend.md, "Caches").
std::shared_ptr<const cpu::CpuExecutable> cached_executable(const ir::Function& function, const cpu::CpuOptions& options, double& jit_seconds) {
  static std::mutex mutex;
  static std::map<std::string, std::shared_ptr<const cpu::CpuExecutable>> cache;
  const std::string key = ir::print_function(function) + "\n" + options.describe();
  std::lock_guard<std::mutex> lock(mutex);
  if (auto it = cache.find(key); it != cache.end()) {
    jit_seconds = 0;
    return it->second;
  }
  try {
    auto executable = std::make_shared<const cpu::CpuExecutable>(function, options);
    jit_seconds = executable->jit_seconds();
    cache.emplace(key, executable);
    return executable;
  } catch (const std::invalid_argument& error) {
    throw UsageError(error.what());
  }
}

}  // namespace

std::vector<std::string> available_backends() {
  std::vector<std::string> names = {"ref"};
  if (cpu::cpu_backend_unavailable_reason().empty()) names.push_back("cpu");  // a build with LLVM 19 (ORTHOJIT_WITH_LLVM)
  if (cuda_backend_unavailable_reason().empty()) names.push_back("cuda");
  return names;
}

std::string cuda_backend_unavailable_reason() {
  static const std::string reason = cuda_unavailable_reason();
  return reason;
}

std::string cuda_device_mismatch_reason(int ordinal) {
#ifdef ORTHOJIT_HAVE_CUDA
  std::string no_driver;
  if (!cuda::driver(&no_driver)) return "";
  try {
    cuda::Device::get_for(ordinal);
  } catch (const std::invalid_argument& error) {
    return error.what();
  } catch (const std::exception&) {
    return "";  // an unusable device: cuda_backend_unavailable_reason() says why
  }
#else
  (void)ordinal;
#endif
  return "";
}

void CompiledOrthogonalizer::upload_step_arguments(const std::vector<ir::MuonStepMatrix>&, void*) const {
  throw UsageError("the " + backend_ + " backend has no device launches to replay (graph capture needs backend cuda)");
}

void CompiledOrthogonalizer::enqueue_launches(void*) const {
  throw UsageError("the " + backend_ + " backend has no device launches to replay (graph capture needs backend cuda)");
}

void CompiledOrthogonalizer::run_device(std::uintptr_t, std::uintptr_t, void*) const {
  throw UsageError("the " + backend_ + " backend runs on host memory; device memory needs backend cuda");
}

std::optional<ir::StrategyKind> parse_strategy_option(const std::string& text) {
  if (text == "auto") return std::nullopt;
  if (auto kind = ir::parse_strategy(text)) return kind;
  throw UsageError("unknown strategy '" + text + "'; expected auto, standard or gram");
}

std::shared_ptr<CompiledOrthogonalizer> compile_orthogonalizer(const dsl::Program& program, int64_t batch, int64_t rows, int64_t cols,
                                                               const OrthogonalizeOptions& options) {
  if (options.backend == "cuda") {
    if (const std::string why = cuda_backend_unavailable_reason(); !why.empty()) throw UnavailableError("--backend cuda: " + why);
  } else if (options.backend == "cpu") {
    if (const std::string& why = cpu::cpu_backend_unavailable_reason(); !why.empty()) throw UnavailableError("--backend cpu: " + why);
  } else if (options.backend != "ref" && options.backend != "cpu" && options.backend != "auto") {
    std::string names;
    for (const auto& name : available_backends()) names += (names.empty() ? "" : ", ") + name;
    throw UsageError("backend '" + options.backend + "' is not available in this build; available: " + names);
  }
  cpu::CpuOptions cpu_options;
  if (!options.cpu_isa.empty()) {
    auto isa = cpu::parse_cpu_isa(options.cpu_isa);
    if (!isa) throw UsageError("unknown ISA '" + options.cpu_isa + "'; expected generic, avx2, avx512f, avx512bf16 or amx");
    if (!cpu::host_supports(*isa)) throw UsageError("this CPU cannot run the " + options.cpu_isa + " code path");
    cpu_options.isa = *isa;
  }
  if (options.threads < 0 || options.threads > cpu::kMaxThreads)
    throw UsageError("--threads " + std::to_string(options.threads) + ": expected 0 (one per logical core) or 1 to " + std::to_string(cpu::kMaxThreads));
  // Until the autotuner sets blocking per shape, ORTHOJIT_CPU_BLOCKING="MC,KC,NC[,DIRECT]" overrides
  // the defaults (for experiments; bench/RESULTS.md); DIRECT is GemmBlocking::direct_operand_bytes
  // (0: every operand packed).
  bool blocking_from_environment = false;
  if (const char* text = std::getenv("ORTHOJIT_CPU_BLOCKING"); text && *text) {
    blocking_from_environment = true;
    long mc = 0, kc = 0, nc = 0, direct = -1;
    char rest = 0;
    const int fields = std::sscanf(text, "%ld,%ld,%ld,%ld%c", &mc, &kc, &nc, &direct, &rest);
    if (fields < 3 || fields > 4 || mc < 1 || kc < 2 || nc < 1 || (fields == 4 && direct < 0))
      throw UsageError(std::string("ORTHOJIT_CPU_BLOCKING='") + text +
                       "' is not MC,KC,NC[,DIRECT] with positive MC, NC, KC >= 2 and DIRECT >= 0 bytes (e.g. 144,384,1024 or 144,384,1024,0)");
    cpu_options.blocking.mc = mc;
    cpu_options.blocking.kc = kc;
    cpu_options.blocking.nc = nc;
    if (fields == 4) cpu_options.blocking.direct_operand_bytes = direct;
  }
  cpu_options.threads = options.threads;

  passes::CompileOptions compile;
  compile.rows = rows;
  compile.cols = cols;
  compile.batch = batch;
  compile.precision = options.precision;
  compile.gram_restarts = options.gram_restarts;
  // "auto": a backend that runs the storage asked for: the reference interpreter for f64 (the
  // exact iteration), the CPU kernels for bf16, f16 and f32 (the reference interpreter, which
  // emulates those storage types exactly, in a build without the CPU backend).
  const bool have_cpu = cpu::cpu_backend_unavailable_reason().empty();
  const ScalarType storage = passes::effective_policy(program.policy, options.precision).storage;
  const std::string backend = options.backend != "auto" ? options.backend : storage == ScalarType::F64 || !have_cpu ? "ref" : "cpu";
  if (options.muon_step) {
    if (const std::string problem = ir::muon_step_spec_problem(*options.muon_step); !problem.empty()) throw UsageError(problem);
    compile.muon_step = options.muon_step;
    compile.fuse_update = backend == "cuda";  // the CPU products' epilogues do not carry the parameter
  }
  std::string reason, tuned_variant;
  bool engine_from_record = false;  // a tuning record's winner set the engine of the bf16 products
  // A tuning record's CPU winner: its kernels, blocking, engine and ISA path (and the restarts it
  // was tuned with), unless ORTHOJIT_CPU_BLOCKING set the blocking.
  auto apply_cpu_winner = [&](const autotune::TunedChoice& tuned) {
    const autotune::Candidate& winner = *tuned.winner;
    compile.strategy = winner.strategy;
    compile.triangular_products = winner.triangular;
    if (tuned.gram_restarts) compile.gram_restarts = tuned.gram_restarts;  // the restarts it was tuned with
    if (!blocking_from_environment) {
      engine_from_record = true;
      cpu_options.blocking = winner.blocking();
      cpu_options.engine = winner.engine;
      // The ISA path the winner's kernel needs (amx, the vdpbf16ps kernel, FMAs), unless the
      // caller forced one or this CPU cannot run it.
      if (auto isa = winner.cpu_isa(); isa && options.cpu_isa.empty() && cpu::host_supports(*isa)) cpu_options.isa = *isa;
    }
  };
  if (auto explicit_strategy = parse_strategy_option(options.strategy)) {
    compile.strategy = *explicit_strategy;
    reason = std::string(ir::to_string(compile.strategy)) + ": requested";
    // The strategy is the caller's (a Muon preset pins it), but a record whose winner has that
    // strategy still gives its kernels and blocking: a preset's shapes run as tuned.
    if (options.backend != "cuda" && options.use_tuning_records) {
      const autotune::TunedChoice tuned = autotune::lookup_tuned(program, rows, cols, batch, options.precision);
      // Requested restarts must be the ones the winner was tuned with (they change the iteration).
      const bool same_restarts = !options.gram_restarts || *explicit_strategy == ir::StrategyKind::Standard || tuned.gram_restarts == options.gram_restarts;
      if (tuned.winner && tuned.winner->strategy == *explicit_strategy && same_restarts) {
        apply_cpu_winner(tuned);
        if (*explicit_strategy == ir::StrategyKind::Standard && options.gram_restarts) compile.gram_restarts = options.gram_restarts;
        reason += "; kernels " + tuned.reason;
      } else if (tuned.winner) {
        reason += " (the tuning record's winner runs " + std::string(ir::to_string(tuned.winner->strategy)) +
                  (tuned.winner->strategy == *explicit_strategy ? " with other restarts" : "") + ": not used)";
      }
    }
  } else {
    autotune::TunedChoice tuned;
#ifdef ORTHOJIT_HAVE_CUDA
    if (options.backend == "cuda") {
      // The GPU's own records: strategy and variant.
      autotune::TunedCudaChoice tuned_cuda;
      if (options.use_tuning_records && !options.gram_restarts) tuned_cuda = autotune::lookup_tuned_cuda(program, rows, cols, batch, options.precision);
      else tuned_cuda.reason = "tuning records not consulted";
      tuned.reason = tuned_cuda.reason;
      if (tuned_cuda.winner) {
        compile.strategy = tuned_cuda.winner->strategy;
        tuned_variant = tuned_cuda.winner->variant;
        if (tuned_cuda.gram_restarts) compile.gram_restarts = tuned_cuda.gram_restarts;  // the restarts it was tuned with
        reason = std::string(ir::to_string(compile.strategy)) + ": " + tuned_cuda.reason;
      }
    } else
#endif
    if (options.use_tuning_records && !options.gram_restarts) tuned = autotune::lookup_tuned(program, rows, cols, batch, options.precision);
    else tuned.reason = "tuning records not consulted";
    if (!reason.empty()) {
      // chosen from the CUDA records above
    } else if (tuned.winner) {
      apply_cpu_winner(tuned);
      reason = std::string(ir::to_string(compile.strategy)) + ": " + tuned.reason;
    } else {
      // Recognition on the standard form decides whether gram is possible at all.
      passes::CompileOptions probe = compile;
      probe.strategy = ir::StrategyKind::Standard;
      const ir::Function standard = passes::compile_program(program, probe);
      auto choice = autotune::choose_strategy_heuristically(standard, rows, cols);
      compile.strategy = choice.strategy;
      reason = choice.reason + " (" + tuned.reason + "; heuristic)";
    }
  }
  if (!options.cpu_kernel.empty() && backend != "cpu")
    throw UsageError("--kernel " + options.cpu_kernel + " is an option of the cpu backend (this run is on " + backend + ")");
  if (backend == "cpu") choose_bf16_engine(options, engine_from_record, cpu_options);
#ifdef ORTHOJIT_HAVE_CUDA
  cuda::CudaVariant variant;
  if (backend == "cuda") {
    try {
      // An explicit --variant wins over the tuning record's.
      if (!options.cuda_variant.empty()) variant = cuda::CudaVariant::parse(options.cuda_variant);
      else if (!tuned_variant.empty()) variant = cuda::CudaVariant::parse(tuned_variant);
    } catch (const std::invalid_argument& error) {
      throw UsageError(error.what());
    }
    if (compile.muon_step) compile.fuse_update = variant.fuses_muon_update();
  }
#endif
  ir::Function function = passes::compile_program(program, compile);
  std::shared_ptr<CompiledOrthogonalizer> compiled;
  double jit_seconds = 0;
  if (backend == "cpu") {
    compiled = std::make_shared<CpuOrthogonalizer>(cached_executable(function, cpu_options, jit_seconds));
    compiled->target_ = "cpu " + cpu_options.describe();
    compiled->isa_ = std::string(cpu::to_string(cpu_options.isa));
    // f32 storage: always f32 FMAs; f16: the tiles where the CPU has AMX-FP16 (the executable's
    // GemmBlocking::amx_fp16), else FMAs.
    const ScalarType stored = function.policy.storage;
    cpu::Bf16Engine engine = cpu::Bf16Engine::Fma;
    if (stored == ScalarType::BF16) engine = cpu::engine_on(cpu_options.isa, cpu_options.blocking.bf16_dot);
    if (stored == ScalarType::F16 && cpu_options.isa == cpu::CpuIsa::AmxBf16 && cpu::amx_fp16_usable()) engine = cpu::Bf16Engine::Amx;
    compiled->engine_ = std::string(cpu::to_string(engine));
    // A tuning record whose winner is a vendor library: the library ran the products, not the
    // JIT's kernels (bench's ceiling and its words follow this name).
    if (cpu_options.engine != cpu::ProductEngine::Jit) compiled->engine_ = cpu::to_string(cpu_options.engine);
#ifdef ORTHOJIT_HAVE_CUDA
  } else if (backend == "cuda") {
    if (function.muon_step && variant.kind != cuda::CudaVariant::Kind::Generated &&
        !cuda::variant_unavailable_reason(function, variant, cuda::Device::get().info().max_shared_per_block_optin).empty()) {
      // The tuned winner for the orthogonalizer may be cuBLAS, which compiles no Muon step (or a
      // fused-small kernel that cannot carry this one); the step is then compiled by the generated
      // kernels (with the record's strategy).
      reason += "; " + variant.label() + " does not compile a Muon step: generated kernels";
      variant = cuda::CudaVariant{};
    }
    if (function.policy.storage != ScalarType::BF16 && function.policy.storage != ScalarType::F16)
      throw UsageError("--backend cuda runs bf16 or f16 storage (tensor-core products); " + program.name + " stores " +
                       std::string(to_string(function.policy.storage)) + ": add --precision bf16 (or f16), or use --backend cpu");
    // Kernels a tuning record chose were checked on this device by the tuner; others are checked
    // when their runner is first built.
    const bool judged_by_tuner = options.cuda_variant.empty() && !tuned_variant.empty();
    SharedRunner shared = cached_cuda_runner(program, function, variant, jit_seconds, judged_by_tuner ? nullptr : &compile);
    const std::string description = shared.runner->description();
    compiled = std::make_shared<CudaOrthogonalizer>(std::move(shared));
    compiled->target_ = "cuda " + cuda::Device::get().info().name + ", " + description;
#endif
  } else {
    compiled = std::make_shared<ReferenceOrthogonalizer>();
    compiled->target_ = "ref";
  }
  compiled->function_ = std::move(function);
  compiled->strategy_reason_ = reason;
  compiled->backend_ = backend;
  compiled->jit_seconds_ = jit_seconds;
  return compiled;
}

OrthogonalizeResult orthogonalize(const dsl::Program& program, const std::vector<double>& input, int64_t batch, int64_t rows,
                                  int64_t cols, const OrthogonalizeOptions& options) {
  auto compiled = compile_orthogonalizer(program, batch, rows, cols, options);
  OrthogonalizeResult result;
  result.strategy = compiled->strategy();
  result.strategy_reason = compiled->strategy_reason();
  result.backend = compiled->backend();
  result.jit_seconds = compiled->jit_seconds();
  if (compiled->backend() == "ref") {
    result.values = reference::interpret(compiled->function(), input);  // full f64 input
    return result;
  }
  std::vector<float> in(input.begin(), input.end()), out(input.size());
  compiled->run(in.data(), out.data());
  result.values.assign(out.begin(), out.end());
  return result;
}

}  // namespace orthojit::runtime
