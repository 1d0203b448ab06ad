// The Muon step on a device (part of tests/cuda_device_test): a whole step compiled into the
// orthogonalizer's kernels (compiler/ir/muon_step.h) for the generated variant, whose last
// product carries the update in its epilogue, and for the generated hopper variant, whose update
// is its own pass after a last product on the sm_90a tile (CudaVariant::fuses_muon_update). The
// momentum must be the host formula's bits; the orthogonal factor the step applied, recovered
// from the f32 parameter as (p·decay − p') / step, is judged against the f64 interpreter run on
// U with the tuner's per-tile measure.
#pragma once

#include <string>
#include <vector>

#include "cuda/nvrtc_compiler.h"
#include "cuda_device_case_log.h"

namespace orthojit::device_test {

struct MuonStepOutcome {
  std::string name;
  bool ok = false;
  std::string message;
};

// Whether `name` passes cuda_device_test's --filter texts: it contains one of them (no texts: all).
inline bool passes_filters(const std::string& name, const std::vector<std::string>& filters) {
  if (filters.empty()) return true;
  for (const std::string& text : filters)
    if (name.find(text) != std::string::npos) return true;
  return false;
}

// device_sm: the device's (the hopper variant runs on 90 only and not while ORTHOJIT_CUDA_SM90A
// turns the tile off, else it is skipped with the reason in `skipped_reason`). host_only:
// generate and compile the steps for `host_target`. filters: only the cases whose name contains
// one of them (cuda_device_test's --filter; none: all). Each case goes through `log` (its RUN line, the
// watchdog, the JSON, the end of the run when its failure poisoned the context). Prints a line
// per case.
std::vector<MuonStepOutcome> check_muon_steps(int device_sm, bool host_only, const std::string& host_target, const cuda::NamedSources& headers,
                                              const std::vector<std::string>& filters, std::string& skipped_reason, CaseLog& log);

}  // namespace orthojit::device_test
