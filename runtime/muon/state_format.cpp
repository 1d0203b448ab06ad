// Saved-state formats and momentum conversion (see state_format.h).
#include "runtime/muon/state_format.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <set>
#include <stdexcept>

#include "runtime/muon/muon_variants.h"
#include "runtime/muon/safetensors_file.h"
#include "runtime/muon/variant_state.h"

namespace orthojit::runtime {

MomentumKind saved_momentum_kind(const std::string& format, const std::string& preset, const std::string& momentum_kind) {
  if (!momentum_kind.empty()) {
    auto kind = parse_momentum_kind(momentum_kind);
    if (!kind) throw std::runtime_error("optimizer state: momentum_kind '" + momentum_kind + "' is not ema or sum");
    return *kind;
  }
  // Format 1 (no record): the form each preset had when format 1 was written.
  (void)format;
  return (preset == "keller" || preset == "moonlight") ? MomentumKind::Sum : MomentumKind::Ema;
}

std::string momentum_mismatch_message(const std::string& where, const std::string& format, MomentumKind saved, MomentumKind wanted) {
  auto form = [](MomentumKind kind) {
    return kind == MomentumKind::Sum ? std::string("the sum form (buf <- beta*buf + g)") : std::string("the EMA form (buf <- lerp(buf, g, 1-beta))");
  };
  std::string text = where + " holds momentum buffers in " + form(saved) + " but this optimizer uses " + form(wanted);
  if (format == "hybrid-optimizer-state/1")
    text += " (a format 1 state: the keller preset followed the 2024 KellerJordan/Muon sum form until it moved to the EMA of the current code)";
  text += "; nothing was loaded. The buffers differ by the factor 1/(1-beta). Either convert the state (`orthojit convert-state --input FILE "
          "--output NEW --momentum-kind " +
          std::string(to_string(wanted)) + " --momentum BETA`; Python: orthojit.convert_momentum_state(state_dict, to=\"" + to_string(wanted) +
          "\", momentum=BETA); exact for a constant beta) or keep the saved form with the setting muon.momentum_kind = " + to_string(saved);
  return text;
}

namespace {

int64_t element_count(const std::vector<int64_t>& shape) {
  int64_t count = 1;
  for (int64_t dimension : shape) count *= dimension;
  return count;
}

}  // namespace

std::vector<TensorSource> state_file_tensors(const std::vector<StateOwner>& owners, const std::map<std::string, HybridOptimizer::State>* state,
                                             MuonVariant variant) {
  std::vector<TensorSource> tensors;
  for (const StateOwner& owner : owners) {
    const HybridOptimizer::State* values = nullptr;
    if (state) {
      const auto found = state->find(owner.name);
      if (found == state->end()) throw std::invalid_argument("the optimizer state has no entry for '" + owner.name + "'");
      values = &found->second;
    }
    const size_t elements = static_cast<size_t>(element_count(owner.shape));
    auto f32 = [&](const char* key, const std::vector<float>* buffer) {
      if (buffer && buffer->size() != elements)
        throw std::invalid_argument("the optimizer state's '" + owner.name + key + "' has " + std::to_string(buffer->size()) + " elements, its shape " +
                                    shape_text(owner.shape) + " needs " + std::to_string(elements));
      tensors.push_back({{owner.name + key, "F32", owner.shape}, buffer ? buffer->data() : nullptr});
    };
    if (owner.muon) {
      f32(".momentum_buffer", values ? &values->momentum : nullptr);
      if (values && variant != MuonVariant::Muon &&
          values->second_moment.size() != static_cast<size_t>(element_count(variant_state_shape(variant, owner.plan, owner.shape))))
        throw std::invalid_argument("the optimizer state's '" + owner.name + "' second moment has " + std::to_string(values->second_moment.size()) +
                                    " elements, expected " + std::to_string(element_count(variant_state_shape(variant, owner.plan, owner.shape))));
      add_variant_state_tensors(tensors, owner, values, variant);
    } else {
      f32(".exp_avg", values ? &values->exp_avg : nullptr);
      f32(".exp_avg_sq", values ? &values->exp_avg_sq : nullptr);
      tensors.push_back({{owner.name + ".step", "I64", {}}, values ? &values->step : nullptr});
    }
  }
  return tensors;
}

std::map<std::string, std::string> state_file_metadata(const OptimizerSettings& settings, int64_t steps_taken) {
  char beta[32];
  std::snprintf(beta, sizeof beta, "%.17g", settings.muon.momentum);
  return {{"orthojit.format", kStateFormat},
          {"orthojit.preset", settings.preset},
          {"orthojit.steps_taken", std::to_string(steps_taken)},
          {"orthojit.momentum_kind", to_string(settings.muon.momentum_kind)},
          {"orthojit.momentum", beta},
          {"orthojit.muon_variant", to_string(settings.muon.variant)}};
}

void write_state_file(const std::string& path, const std::vector<StateOwner>& owners, const std::map<std::string, HybridOptimizer::State>& state,
                      const OptimizerSettings& settings, int64_t steps_taken, const FileProgressCallback& progress) {
  write_safetensors_from(path, state_file_tensors(owners, &state, settings.muon.variant), state_file_metadata(settings, steps_taken), progress);
}

int64_t check_state_file(const SafetensorsHeader& header, const std::string& path, const std::vector<StateOwner>& owners, const OptimizerSettings& settings) {
  auto problem = [&](const std::string& what) { return std::runtime_error("optimizer state " + path + " does not match the parameters: " + what + "; nothing was loaded"); };
  const auto format = header.metadata.find("orthojit.format");
  if (format == header.metadata.end() || (format->second != kStateFormat && format->second != "hybrid-optimizer-state/1"))
    throw problem(std::string("it is not an orthojit optimizer state (metadata orthojit.format is missing or not ") + kStateFormat + ")");
  // The momentum form the buffers were saved in: recorded since format 2; format 1 files hold
  // the form their preset had then (keller: the sum form).
  const auto preset = header.metadata.find("orthojit.preset");
  const auto kind = header.metadata.find("orthojit.momentum_kind");
  const MomentumKind saved_kind = saved_momentum_kind(format->second, preset == header.metadata.end() ? "" : preset->second,
                                                      kind == header.metadata.end() ? "" : kind->second);
  const bool has_muon = std::any_of(owners.begin(), owners.end(), [](const StateOwner& e) { return e.muon; });
  if (saved_kind != settings.muon.momentum_kind && has_muon) throw std::runtime_error(momentum_mismatch_message(path, format->second, saved_kind, settings.muon.momentum_kind));
  check_saved_variant(header.metadata, path, settings.muon.variant, has_muon);
  // Every tensor the optimizer needs, with its dtype and shape; nothing else.
  std::set<std::string> needed;
  for (const TensorSource& wanted : state_file_tensors(owners, nullptr, settings.muon.variant)) {
    const TensorPlace& place = wanted.place;
    needed.insert(place.name);
    const TensorPlace* found = header.find(place.name);
    if (!found) throw problem("no tensor '" + place.name + "'");
    if (found->dtype != place.dtype) throw problem("'" + place.name + "' is " + found->dtype + ", expected " + place.dtype);
    if (found->shape != place.shape) throw problem("'" + place.name + "' has shape " + shape_text(found->shape) + ", expected " + shape_text(place.shape));
  }
  // A tensor it does not use: first one of a parameter this optimizer does not have, if any.
  std::set<std::string> owner_names;
  for (const StateOwner& owner : owners) owner_names.insert(owner.name);
  bool extra = false;
  for (const TensorPlace& tensor : header.tensors) {
    if (needed.count(tensor.name)) continue;
    extra = true;
    const std::string base = tensor.name.substr(0, tensor.name.rfind('.'));
    if (!owner_names.count(base)) throw problem("it holds state for '" + base + "', which this optimizer does not have (or which is tagged differently)");
  }
  if (extra) throw problem("it holds tensors this optimizer does not use (a parameter tagged differently?)");
  int64_t steps = 0;
  if (auto found = header.metadata.find("orthojit.steps_taken"); found != header.metadata.end()) {
    try {
      size_t used = 0;
      steps = std::stoll(found->second, &used);
      if (used != found->second.size() || steps < 0) throw std::invalid_argument("not a count");
    } catch (const std::exception&) {
      throw problem("metadata orthojit.steps_taken = '" + found->second + "' is not a non-negative integer");
    }
  }
  return steps;
}

std::map<std::string, HybridOptimizer::State> read_state_file(const std::string& path, const std::vector<StateOwner>& owners,
                                                              const OptimizerSettings& settings, int64_t& steps_taken,
                                                              const FileProgressCallback& progress) {
  SafetensorsReader reader(path);
  reader.set_progress(progress);
  const int64_t steps = check_state_file(reader.header(), path, owners, settings);
  std::map<std::string, HybridOptimizer::State> loaded;
  auto take = [&](const std::string& name, const char*, const std::vector<int64_t>&, void* out) {
    const TensorPlace& place = *reader.header().find(name);  // checked above
    reader.read(place, 0, out, place.end - place.begin);
  };
  for (const StateOwner& owner : owners) {
    HybridOptimizer::State& state = loaded[owner.name];
    const size_t elements = static_cast<size_t>(element_count(owner.shape));
    if (owner.muon) {
      state.momentum.resize(elements);
      take(owner.name + ".momentum_buffer", "F32", owner.shape, state.momentum.data());
      read_variant_state(state, owner, settings.muon.variant, take);
    } else {
      state.exp_avg.resize(elements);
      state.exp_avg_sq.resize(elements);
      take(owner.name + ".exp_avg", "F32", owner.shape, state.exp_avg.data());
      take(owner.name + ".exp_avg_sq", "F32", owner.shape, state.exp_avg_sq.data());
      take(owner.name + ".step", "I64", {}, &state.step);
    }
  }
  reader.verify_checksum();  // before anything is returned
  steps_taken = steps;
  return loaded;
}

ConversionReport convert_state_momentum(const std::string& input, const std::string& output, MomentumKind to, double beta,
                                        const FileProgressCallback& progress) {
  if (!(beta >= 0 && beta < 1)) throw std::invalid_argument("the momentum beta must be in [0, 1)");
  SafetensorsReader reader(input);
  reader.set_progress(progress);
  const SafetensorsHeader& header = reader.header();
  const auto format = header.metadata.find("orthojit.format");
  if (format == header.metadata.end() || (format->second != kStateFormat && format->second != "hybrid-optimizer-state/1"))
    throw std::runtime_error(input + " is not an orthojit optimizer state (metadata orthojit.format is missing or unknown)");
  auto text = [&](const char* key) {
    auto found = header.metadata.find(key);
    return found == header.metadata.end() ? std::string() : found->second;
  };
  // The beta a format 2 state records is the one its buffers were made with (the last step's under
  // a schedule): converting with another scaled every buffer by a wrong factor, without a word.
  if (const std::string recorded = text("orthojit.momentum"); !recorded.empty()) {
    char* end = nullptr;
    const double saved = std::strtod(recorded.c_str(), &end);
    if (*end != '\0' || !(saved >= 0 && saved < 1))
      throw std::runtime_error(input + " records the momentum '" + recorded + "', not a number in [0, 1): the file is damaged");
    if (saved != beta) {
      char given[32];
      std::snprintf(given, sizeof given, "%.17g", beta);
      throw std::invalid_argument(input + " records the momentum " + recorded + " (its buffers were made with it), but --momentum " + given +
                                  " was given; convert with --momentum " + recorded);
    }
  }
  std::error_code same_error;
  if (std::filesystem::equivalent(input, output, same_error))
    throw std::invalid_argument("--output " + output + " is the input file; write the converted state to another file (the input is kept as it is)");
  ConversionReport report;
  report.from = saved_momentum_kind(format->second, text("orthojit.preset"), text("orthojit.momentum_kind"));
  report.factor = momentum_conversion_factor(report.from, to, beta);
  const std::string suffix = ".momentum_buffer";
  auto is_momentum = [&](const TensorPlace& tensor) {
    return tensor.name.size() > suffix.size() && tensor.name.compare(tensor.name.size() - suffix.size(), suffix.size(), suffix) == 0;
  };
  for (const TensorPlace& tensor : header.tensors)
    if (is_momentum(tensor) && tensor.dtype != "F32") throw std::runtime_error(input + ": '" + tensor.name + "' is " + tensor.dtype + ", expected F32");
  char beta_text[32];
  std::snprintf(beta_text, sizeof beta_text, "%.17g", beta);
  std::map<std::string, std::string> metadata = header.metadata;
  metadata["orthojit.format"] = kStateFormat;
  metadata["orthojit.momentum_kind"] = to_string(to);
  metadata["orthojit.momentum"] = beta_text;
  // Tensor by tensor in the file's order, through a fixed buffer (a whole number of floats); the
  // input's checksum is checked as it is read, before the output is committed.
  SafetensorsWriter writer(output, header.tensors, metadata);
  // The reads report the pass over the data; the writer adds its commit (checksum, sync) alone.
  if (progress)
    writer.set_progress([&progress](const FileProgress& step) {
      if (step.phase != "write") progress(step);
    });
  std::vector<float> buffer(size_t{1} << 21);
  for (const TensorPlace& tensor : header.tensors) {
    const uint64_t bytes = tensor.end - tensor.begin;
    for (uint64_t at = 0; at < bytes;) {
      const uint64_t size = std::min<uint64_t>(bytes - at, buffer.size() * sizeof(float));
      reader.read(tensor, at, buffer.data(), size);
      if (is_momentum(tensor))
        for (size_t i = 0; i < size / sizeof(float); ++i) buffer[i] = static_cast<float>(static_cast<double>(buffer[i]) * report.factor);
      writer.write(tensor.name, at, buffer.data(), size);
      at += size;
    }
    if (is_momentum(tensor)) ++report.buffers;
  }
  reader.verify_checksum();
  writer.commit();
  return report;
}

}  // namespace orthojit::runtime
