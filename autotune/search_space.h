// Search spaces as data (autotune/search_spaces/<backend>.json, embedded at build time): the
// candidates a shape is tuned over, and the rules that prune invalid or redundant ones before any
// timing, each with its reason.
#pragma once

#include <array>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

#include "cpu/gemm_driver.h"
#include "cpu/vendor_gemm.h"
#include "ir/function.h"

namespace orthojit::autotune {

// One configuration of the CPU backend.
struct Candidate {
  cpu::ProductEngine engine = cpu::ProductEngine::Jit;  // jit (generated kernels) | openblas | onednn (the vendor libraries)
  ir::StrategyKind strategy = ir::StrategyKind::Standard;
  bool triangular = true;      // symmetric products computed as one triangle
  int64_t mc = 144, kc = 384, nc = 1024;  // jit blocking
  // jit: the engine of the bf16 products (the search axis "kernels"): "amx" (AMX-BF16 tiles, the
  // amx path), "bf16dot" (vdpbf16ps on the avx512bf16 path), "fma" (operands widened to f32 on
  // the strongest FMA path); "" is the default path (best_host_isa: amx where usable).
  std::string kernel;
  int stage = 1;

  std::string label() const;  // "jit gram tri 144/384/1024", "openblas standard syrk", "onednn gram matmul"
  nlohmann::json to_json() const;
  static Candidate from_json(const nlohmann::json& value);  // throws std::invalid_argument naming the bad field
  cpu::GemmBlocking blocking() const;  // with bf16_dot set for kernel "bf16dot", and for "" where the default engine is bf16dot
  // The ISA path the kernel runs on (nullopt: the default path). A tuned record's winner is
  // applied with it (and blocking()).
  std::optional<cpu::CpuIsa> cpu_isa() const;
  bool operator==(const Candidate& other) const { return to_json() == other.to_json(); }
};

struct SearchSpace {
  std::vector<ir::StrategyKind> strategies;  // parsed once from the document's names
  std::vector<cpu::ProductEngine> engines;
  std::vector<std::string> kernels = {""};  // the jit engines of the bf16 products (Candidate::kernel)
  std::vector<bool> triangular;
  std::vector<std::array<int64_t, 3>> blocking;
  double tie_tolerance = 0.02;
  int retime_top = 3;
  nlohmann::json document;
};

// The embedded space of a backend ("cpu"); throws std::invalid_argument for an unknown one.
const SearchSpace& search_space(const std::string& backend);
SearchSpace parse_search_space(const nlohmann::json& document);  // throws std::invalid_argument

// Stage 1 candidates in their deterministic order (ties go to the earlier one).
std::vector<Candidate> stage_one_candidates(const SearchSpace& space);
// Stage 2: `best` with each other blocking.
std::vector<Candidate> stage_two_candidates(const SearchSpace& space, const Candidate& best);

// Why a candidate need not be timed for this problem, or nullopt. `gram_error` is the compiler's
// reason gram is impossible for the program (empty when it is possible); `earlier` are the
// candidates already accepted (a candidate whose effective configuration equals one of theirs is
// redundant: e.g. every KC at or above the largest inner dimension gives the same kernels).
// `storage`: the policy's storage type (kernels other than fma differ only for bf16 storage; a
// kernel this machine or the forced path cannot run is pruned with the reason).
std::optional<std::string> prune_reason(const Candidate& candidate, int64_t rows, int64_t cols, const std::string& gram_error,
                                        const std::vector<Candidate>& earlier, ScalarType storage = ScalarType::F32);

// The kernel the default path runs bf16 products on for `storage`: cpu::default_bf16_engine of the
// default path ("amx" there, "bf16dot" on an avx512bf16 path where vdpbf16ps measured faster than
// f32 FMAs, else "fma"); "fma" for other storage types.
std::string default_kernel(ScalarType storage);

}  // namespace orthojit::autotune
