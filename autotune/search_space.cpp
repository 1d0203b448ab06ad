// Search space parsing, enumeration and pruning.
#include "autotune/search_space.h"

#include <algorithm>
#include <stdexcept>

#include "cpu/bf16_engine.h"
#include "cpu/build_status.h"
#include "cpu/cpu_isa.h"
#include "cpu/openblas_library.h"
#include "cpu/vendor_gemm.h"
#include "autotune/tuning_options.h"

namespace orthojit::autotune {

extern const char* const kCpuSearchSpaceJson;  // generated from search_spaces/cpu.json

std::string Candidate::label() const {
  const std::string strategy_name = ir::to_string(strategy);
  if (engine == cpu::ProductEngine::OpenBlas) return "openblas " + strategy_name + (triangular ? " syrk" : " gemm");
  if (engine == cpu::ProductEngine::OneDnn) return "onednn " + strategy_name + " matmul";
  return std::string(cpu::to_string(engine)) + (kernel.empty() ? "" : " " + kernel) + " " + strategy_name + (triangular ? " tri " : " dense ") +
         std::to_string(mc) + "/" + std::to_string(kc) + "/" + std::to_string(nc);
}

// The record's strings are those of earlier versions ("engine": "jit", "strategy": "gram"), so
// their files still load.
nlohmann::json Candidate::to_json() const {
  nlohmann::json value = {{"engine", cpu::to_string(engine)}, {"strategy", ir::to_string(strategy)}, {"triangular", triangular}};
  if (engine == cpu::ProductEngine::Jit) value["blocking"] = {mc, kc, nc};
  if (engine == cpu::ProductEngine::Jit && !kernel.empty()) value["kernel"] = kernel;
  return value;
}

Candidate Candidate::from_json(const nlohmann::json& value) {
  Candidate candidate;
  std::string engine, strategy;
  try {
    engine = value.at("engine").get<std::string>();
    strategy = value.at("strategy").get<std::string>();
    candidate.triangular = value.at("triangular").get<bool>();
    if (engine == "jit") {
      const auto blocking = value.at("blocking").get<std::vector<int64_t>>();
      if (blocking.size() != 3) throw std::invalid_argument("\"blocking\" must be [MC, KC, NC]");
      candidate.mc = blocking[0];
      candidate.kc = blocking[1];
      candidate.nc = blocking[2];
      candidate.kernel = value.value("kernel", std::string());
    }
  } catch (const nlohmann::json::exception& error) {
    throw std::invalid_argument(std::string("bad candidate configuration ") + value.dump() + ": " + error.what());
  }
  const auto parsed_engine = parse_product_engine(engine);
  if (!parsed_engine) throw std::invalid_argument("unknown engine '" + engine + "' (expected jit, openblas or onednn)");
  candidate.engine = *parsed_engine;
  if (!candidate.kernel.empty() && !cpu::parse_bf16_engine(candidate.kernel))
    throw std::invalid_argument("unknown kernel '" + candidate.kernel + "' (expected amx, bf16dot or fma)");
  candidate.strategy = parse_strategy_or_throw(strategy, "candidate configuration");
  if (candidate.mc < 1 || candidate.kc < 2 || candidate.nc < 1) throw std::invalid_argument("blocking must be positive (KC at least 2): " + value.dump());
  return candidate;
}

cpu::GemmBlocking Candidate::blocking() const {
  cpu::GemmBlocking result;
  result.mc = mc;
  result.kc = kc;
  result.nc = nc;
  // "" is the default path with its default engine of bf16 products (effective() names it the
  // same way; the runtime's untuned default runs it): vdpbf16ps where it measured faster.
  result.bf16_dot = kernel == "bf16dot" || (kernel.empty() && cpu::default_bf16_engine(cpu::best_host_isa()) == cpu::Bf16Engine::Bf16Dot);
  return result;
}

std::optional<cpu::CpuIsa> Candidate::cpu_isa() const {
  if (engine != cpu::ProductEngine::Jit || kernel.empty()) return std::nullopt;
  return cpu::isa_for(*cpu::parse_bf16_engine(kernel));  // from_json checked the name
}

std::string default_kernel(ScalarType storage) {
  if (storage != ScalarType::BF16) return "fma";
  return std::string(cpu::to_string(cpu::default_bf16_engine(cpu::best_host_isa())));
}

SearchSpace parse_search_space(const nlohmann::json& document) {
  SearchSpace space;
  try {
    for (const auto& name : document.at("strategies").get<std::vector<std::string>>())
      space.strategies.push_back(parse_strategy_or_throw(name, "malformed search space"));
    for (const auto& name : document.at("engines").get<std::vector<std::string>>()) {
      const auto engine = parse_product_engine(name);
      if (!engine) throw std::invalid_argument("malformed search space: unknown engine '" + name + "' (expected jit, openblas or onednn)");
      space.engines.push_back(*engine);
    }
    space.triangular = document.at("triangular").get<std::vector<bool>>();
    for (const auto& entry : document.at("blocking")) {
      const auto values = entry.get<std::vector<int64_t>>();
      if (values.size() != 3) throw std::invalid_argument("each blocking is [MC, KC, NC]");
      space.blocking.push_back({values[0], values[1], values[2]});
    }
    if (document.contains("kernels")) space.kernels = document.at("kernels").get<std::vector<std::string>>();
    space.tie_tolerance = document.value("tie_tolerance", 0.02);
    space.retime_top = document.value("retime_top", 3);
  } catch (const nlohmann::json::exception& error) {
    throw std::invalid_argument(std::string("malformed search space: ") + error.what());
  }
  if (space.strategies.empty() || space.engines.empty() || space.triangular.empty() || space.blocking.empty())
    throw std::invalid_argument("malformed search space: strategies, engines, triangular and blocking must not be empty");
  space.document = document;
  return space;
}

const SearchSpace& search_space(const std::string& backend) {
  if (backend != "cpu") throw std::invalid_argument("no search space for backend '" + backend + "' (available: cpu)");
  static const SearchSpace cpu = parse_search_space(nlohmann::json::parse(kCpuSearchSpaceJson));
  return cpu;
}

std::vector<Candidate> stage_one_candidates(const SearchSpace& space) {
  std::vector<Candidate> result;
  for (const auto& engine : space.engines)
    for (const auto& kernel : engine == cpu::ProductEngine::Jit ? space.kernels : std::vector<std::string>{""})
    for (const auto& strategy : space.strategies)
      for (bool triangular : space.triangular) {
        Candidate candidate;
        candidate.engine = engine;
        candidate.kernel = kernel;
        candidate.strategy = strategy;
        candidate.triangular = triangular;
        candidate.mc = space.blocking.front()[0];
        candidate.kc = space.blocking.front()[1];
        candidate.nc = space.blocking.front()[2];
        result.push_back(candidate);
      }
  return result;
}

std::vector<Candidate> stage_two_candidates(const SearchSpace& space, const Candidate& best) {
  std::vector<Candidate> result;
  for (size_t i = 1; i < space.blocking.size(); ++i) {
    Candidate candidate = best;
    candidate.mc = space.blocking[i][0];
    candidate.kc = space.blocking[i][1];
    candidate.nc = space.blocking[i][2];
    candidate.stage = 2;
    result.push_back(candidate);
  }
  return result;
}

namespace {

// The blocking the GEMM driver really uses for this problem: MC and NC cannot exceed the rounded
// matrix sides, KC not the largest inner dimension (the products' sides are at most max(rows, cols)).
Candidate effective(const Candidate& candidate, int64_t rows, int64_t cols, ScalarType storage) {
  Candidate result = candidate;
  result.stage = 0;
  if (candidate.engine != cpu::ProductEngine::Jit) {
    result.mc = result.kc = result.nc = 0;
    // oneDNN has no triangular product (no syrk): both settings run the same dense matmuls.
    if (candidate.engine == cpu::ProductEngine::OneDnn) result.triangular = true;
    return result;
  }
  // Only bf16 products have a choice of engine; the default path's is named.
  result.kernel = storage != ScalarType::BF16 || candidate.kernel.empty() ? default_kernel(storage) : candidate.kernel;
  const cpu::IsaTraits traits = cpu::traits_of(cpu::best_host_isa());
  const int64_t large = std::max(rows, cols);
  auto round_up = [](int64_t value, int64_t multiple) { return (value + multiple - 1) / multiple * multiple; };
  result.mc = std::min(round_up(std::max<int64_t>(candidate.mc, traits.mr), traits.mr), round_up(large, traits.mr));
  result.nc = std::min(round_up(std::max<int64_t>(candidate.nc, traits.nr), traits.nr), round_up(large, traits.nr));
  result.kc = std::min(candidate.kc, large);
  return result;
}

}  // namespace

std::optional<std::string> prune_reason(const Candidate& candidate, int64_t rows, int64_t cols, const std::string& gram_error,
                                        const std::vector<Candidate>& earlier, ScalarType storage) {
  const bool jit = candidate.engine == cpu::ProductEngine::Jit;
  if (jit && candidate.kernel == "amx" && cpu::best_host_isa() != cpu::CpuIsa::AmxBf16)
    return "amx: " + (cpu::host_supports(cpu::CpuIsa::AmxBf16) ? std::string("ORTHOJIT_CPU_ISA forces another path")
                                                                : cpu::unsupported_reason(cpu::CpuIsa::AmxBf16));
  if (jit && candidate.kernel == "bf16dot" &&
      !(cpu::best_host_isa() == cpu::CpuIsa::AmxBf16 || cpu::best_host_isa() == cpu::CpuIsa::Avx512Bf16))
    return "bf16dot: the default path " + std::string(cpu::to_string(cpu::best_host_isa())) + " has no vdpbf16ps (AVX512-BF16)";
  if (candidate.strategy == ir::StrategyKind::Gram && !gram_error.empty()) return "gram is impossible for this program: " + gram_error;
  if (candidate.engine == cpu::ProductEngine::OpenBlas && !cpu::openblas_unavailable_reason().empty()) return cpu::openblas_unavailable_reason();
  if (candidate.engine == cpu::ProductEngine::OneDnn)
    if (std::string reason = cpu::onednn_unavailable_reason(storage); !reason.empty()) return reason;
  if (candidate.engine == cpu::ProductEngine::OpenBlas && !candidate.triangular && candidate.strategy == ir::StrategyKind::Gram)
    return "gram's symmetric products on OpenBLAS: syrk is the vendor's way; dense sgemm adds nothing to compare";
  const Candidate mine = effective(candidate, rows, cols, storage);
  for (const Candidate& other : earlier)
    if (effective(other, rows, cols, storage) == mine) return "same effective configuration as '" + other.label() + "' at " + std::to_string(rows) + "x" + std::to_string(cols);
  return std::nullopt;
}

}  // namespace orthojit::autotune
