// The CUDA tuner: the CUDA backend of the shared tuning loop (tuning_loop.h) over the CUDA search
// space (cuda_search_space.h), on the device: every candidate compiled through the program cache,
// its output (poisoned first) checked against the f64 reference, timed with CUDA events after
// an L2 flush (a memset of twice the L2), the top three timed again, ties within 2% to the
// earlier candidate. Records go to their own file, keyed by the GPU's fingerprint.
#pragma once

#include <nlohmann/json.hpp>
#include <optional>
#include <string>

#include "autotune/cuda_search_space.h"
#include "autotune/device_fingerprint.h"
#include "autotune/tuner.h"

namespace orthojit::autotune {

// backend "cuda", the GPU's name, sm_XX, SM count, the NVRTC version. Throws std::runtime_error
// when there is no usable device.
DeviceFingerprint cuda_fingerprint();

// The untuned default: the heuristic's strategy with the generated kernels' default tiles.
CudaCandidate default_cuda_candidate(const dsl::Program& program, int64_t rows, int64_t cols, std::optional<ScalarType> precision, std::string* reason);

// One tuning-record entry, like tune_shape. Needs a device.
nlohmann::json tune_shape_cuda(const TuneProblem& problem, const TuneSettings& settings);

struct TunedCudaChoice {
  std::optional<CudaCandidate> winner;
  std::optional<std::vector<int>> gram_restarts;  // the entry's "gram_restarts" (nullopt: the program's own)
  std::string reason;
};
// This GPU's recorded winner for the problem, or why there is none.
TunedCudaChoice lookup_tuned_cuda(const dsl::Program& program, int64_t rows, int64_t cols, int64_t batch, std::optional<ScalarType> precision);

}  // namespace orthojit::autotune
