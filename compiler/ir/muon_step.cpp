// Muon step arguments and element access (see muon_step.h).
#include "ir/muon_step.h"

#include <bit>
#include <cstring>

namespace orthojit::ir {

std::string MuonStepSpec::describe() const {
  return std::string(ema ? "ema" : "sum") + (nesterov ? " nesterov" : "") + ", grad " + std::string(to_string(grad)) + ", param " +
         std::string(to_string(param));
}

std::string muon_step_spec_problem(const MuonStepSpec& spec) {
  auto ok = [](ScalarType type) { return type == ScalarType::F32 || type == ScalarType::BF16 || type == ScalarType::F16; };
  if (!ok(spec.grad)) return "a Muon step reads f32, bf16 or f16 gradients, not " + std::string(to_string(spec.grad));
  if (!ok(spec.param)) return "a Muon step writes f32, bf16 or f16 parameters, not " + std::string(to_string(spec.param));
  return "";
}

std::vector<uint64_t> pack_muon_step_arguments(const std::vector<MuonStepMatrix>& matrices) {
  std::vector<uint64_t> words;
  words.reserve(matrices.size() * kMuonStepWords);
  for (const MuonStepMatrix& matrix : matrices) {
    words.push_back(matrix.grad);
    words.push_back(matrix.momentum);
    words.push_back(matrix.param);
    words.push_back(std::bit_cast<uint64_t>(matrix.beta));
    words.push_back(std::bit_cast<uint64_t>(matrix.step));
    words.push_back(std::bit_cast<uint64_t>(matrix.decay));
  }
  return words;
}

double load_stored(ScalarType type, const void* base, int64_t index) {
  return with_stored_type(type, [&](auto t) { return load_stored_as<decltype(t)::value>(base, index); });
}

void store_rounded(ScalarType type, void* base, int64_t index, double value) {
  with_stored_type(type, [&](auto t) { store_rounded_as<decltype(t)::value>(base, index, value); });
}

}  // namespace orthojit::ir
