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
  switch (type) {
    case ScalarType::F32: return static_cast<const float*>(base)[index];
    case ScalarType::BF16: return std::bit_cast<float>(static_cast<uint32_t>(static_cast<const uint16_t*>(base)[index]) << 16);
    case ScalarType::F16: return static_cast<double>(std::bit_cast<_Float16>(static_cast<const uint16_t*>(base)[index]));
    case ScalarType::F64: return static_cast<const double*>(base)[index];
  }
  return 0;
}

void store_rounded(ScalarType type, void* base, int64_t index, double value) {
  switch (type) {
    case ScalarType::F32: static_cast<float*>(base)[index] = static_cast<float>(value); return;
    case ScalarType::BF16: {
      const float rounded = static_cast<float>(round_to(ScalarType::BF16, value));  // exact in f32
      static_cast<uint16_t*>(base)[index] = static_cast<uint16_t>(std::bit_cast<uint32_t>(rounded) >> 16);
      return;
    }
    case ScalarType::F16:
      static_cast<uint16_t*>(base)[index] = std::bit_cast<uint16_t>(static_cast<_Float16>(round_to(ScalarType::F16, value)));
      return;
    case ScalarType::F64: static_cast<double*>(base)[index] = value; return;
  }
}

}  // namespace orthojit::ir
