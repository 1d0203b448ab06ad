// The device-resident optimizer (runtime/muon/device_optimizer.h) on host memory against
// HybridOptimizer, bit for bit: the same parameters (QKV row splits with per-head splits, 3-D
// experts, a conv filter, AdamW vectors and embeddings, a frozen one; f32, bf16 and f16
// parameters and gradients), the same gradients, over several steps with learning-rate changes,
// missing gradients under both missing_grad settings, a non-finite gradient, and save/load round
// trips in both directions. Both step through compiled Muon steps (HybridOptimizer per parameter,
// DeviceOptimizer with equal blocks of all parameters in one batch), on the ref backend and, where
// this build has it, the cpu backend. On a machine without a CUDA device the CUDA memory space
// must say why it is unavailable.
#include <gtest/gtest.h>

#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <limits>
#include <random>

#include "runtime/errors.h"
#include "runtime/muon/device_optimizer.h"
#include "runtime/muon/hybrid_optimizer.h"
#include "runtime/muon/memory_space.h"
#include "runtime/muon/safetensors_file.h"
#include "runtime/muon/update_rules.h"
#include "runtime/orthogonalize.h"

namespace orthojit::runtime {
namespace {

struct Spec {
  std::string name;
  std::vector<int64_t> shape;
  DType dtype = DType::F32, grad_dtype = DType::F32;
  std::optional<bool> use_muon;
  bool frozen = false;
  MatrixLayout layout = MatrixLayout::Auto;
  std::vector<int64_t> row_splits;
  int64_t head_rows = 0;
};

Spec spec(std::string name, std::vector<int64_t> shape, DType dtype, DType grad_dtype) {
  Spec s;
  s.name = std::move(name);
  s.shape = std::move(shape);
  s.dtype = dtype;
  s.grad_dtype = grad_dtype;
  return s;
}

Spec split(Spec s, std::vector<int64_t> row_splits, int64_t head_rows) {
  s.row_splits = std::move(row_splits);
  s.head_rows = head_rows;
  return s;
}

Spec laid_out(Spec s, MatrixLayout layout) {
  s.layout = layout;
  return s;
}

std::vector<Spec> model() {
  Spec bias = spec("head.bias", {8}, DType::F16, DType::F32);
  bias.use_muon = false;
  Spec frozen = spec("frozen.weight", {8, 8}, DType::F32, DType::F32);
  frozen.frozen = true;
  return {
      split(spec("layers.0.attn.qkv.weight", {24, 16}, DType::F32, DType::BF16), {8, 8, 8}, 4),
      split(spec("layers.1.attn.qkv.weight", {24, 16}, DType::F32, DType::BF16), {8, 8, 8}, 4),
      spec("layers.0.attn.o.weight", {16, 16}, DType::BF16, DType::BF16),
      spec("layers.0.mlp.up.weight", {32, 16}, DType::BF16, DType::F32),
      spec("layers.0.mlp.down.weight", {16, 32}, DType::F16, DType::F16),
      spec("layers.1.mlp.up.weight", {32, 16}, DType::BF16, DType::F32),
      laid_out(spec("experts.w1", {3, 8, 16}, DType::F16, DType::F32), MatrixLayout::Batch),
      laid_out(spec("experts.w2", {2, 16, 8}, DType::BF16, DType::BF16), MatrixLayout::Trailing),
      spec("conv.weight", {4, 2, 3, 3}, DType::F32, DType::F32),
      spec("embed_tokens.weight", {10, 8}, DType::BF16, DType::BF16),
      spec("norm.weight", {16}, DType::F32, DType::F16),
      bias,
      frozen,
  };
}

std::vector<unsigned char> random_tensor(DType type, int64_t count, std::mt19937& random, double scale) {
  std::normal_distribution<double> normal(0.0, scale);
  std::vector<unsigned char> bytes(static_cast<size_t>(count * dtype_bytes(type)));
  for (int64_t i = 0; i < count; ++i) store_element(type, bytes.data(), i, normal(random));
  return bytes;
}

int64_t elements(const Spec& spec) {
  int64_t count = 1;
  for (int64_t d : spec.shape) count *= d;
  return count;
}

// Two copies of every parameter (one per optimizer) and one gradient each, shared (read only).
struct Model {
  std::vector<Spec> specs = model();
  std::vector<std::vector<unsigned char>> hybrid_data, device_data, grads;
  explicit Model(std::mt19937& random) {
    for (const Spec& spec : specs) {
      hybrid_data.push_back(random_tensor(spec.dtype, elements(spec), random, 0.5));
      device_data.push_back(hybrid_data.back());
      grads.push_back(random_tensor(spec.grad_dtype, elements(spec), random, 1.0));
    }
  }
  std::vector<Parameter> parameters(bool device) {
    std::vector<Parameter> result;
    for (size_t i = 0; i < specs.size(); ++i) {
      const Spec& spec = specs[i];
      Parameter p;
      p.name = spec.name;
      p.shape = spec.shape;
      p.dtype = spec.dtype;
      p.grad_dtype = spec.grad_dtype;
      p.data = (device ? device_data : hybrid_data)[i].data();
      p.grad = grads[i].data();
      p.requires_grad = !spec.frozen;
      p.use_muon = spec.use_muon;
      p.layout = spec.layout;
      p.row_splits = spec.row_splits;
      p.head_rows = spec.head_rows;
      result.push_back(p);
    }
    return result;
  }
  // In place: the optimizers hold the pointers.
  static void restore(std::vector<std::vector<unsigned char>>& target, const std::vector<std::vector<unsigned char>>& values) {
    for (size_t i = 0; i < target.size(); ++i) std::copy(values[i].begin(), values[i].end(), target[i].begin());
  }
  void new_gradients(std::mt19937& random) {
    for (size_t i = 0; i < specs.size(); ++i) {
      const auto fresh = random_tensor(specs[i].grad_dtype, elements(specs[i]), random, 1.0);
      std::copy(fresh.begin(), fresh.end(), grads[i].begin());  // in place: the optimizers hold the pointers
    }
  }
};

OptimizerSettings settings_for(const std::string& preset, const std::string& backend) {
  OptimizerSettings settings = preset_settings(preset);
  settings.muon.backend = backend;
  settings.muon.threads = 1;
  settings.muon.weight_decay = 0.05;
  settings.adam.weight_decay = 0.01;
  return settings;
}

std::vector<std::string> host_backends() {
  std::vector<std::string> backends = {"ref"};
  for (const std::string& name : available_backends())
    if (name == "cpu") backends.push_back("cpu");
  return backends;
}

void expect_same_bits(const Model& model, const HybridOptimizer& hybrid, const DeviceOptimizer& device, const std::string& where) {
  for (size_t i = 0; i < model.specs.size(); ++i)
    EXPECT_EQ(model.hybrid_data[i], model.device_data[i]) << where << ": parameter " << model.specs[i].name << " differs";
  const auto expected = hybrid.state();
  const auto actual = device.state();
  ASSERT_EQ(expected.size(), actual.size()) << where;
  for (const auto& [name, state] : expected) {
    const HybridOptimizer::State& other = actual.at(name);
    ASSERT_EQ(state.momentum.size(), other.momentum.size()) << where << ": " << name;
    // AdamW parameters have no momentum; memcmp of two empty vectors' null data() is undefined.
    if (!state.momentum.empty()) {
      EXPECT_EQ(std::memcmp(state.momentum.data(), other.momentum.data(), state.momentum.size() * 4), 0) << where << ": momentum of " << name;
    }
    EXPECT_EQ(state.exp_avg, other.exp_avg) << where << ": exp_avg of " << name;
    EXPECT_EQ(state.exp_avg_sq, other.exp_avg_sq) << where << ": exp_avg_sq of " << name;
    EXPECT_EQ(state.step, other.step) << where << ": step of " << name;
  }
  EXPECT_EQ(hybrid.steps_taken(), device.steps_taken()) << where;
}

void expect_same_report(const StepReport& expected, const StepReport& actual, const std::string& where) {
  EXPECT_EQ(expected.skipped, actual.skipped) << where;
  EXPECT_EQ(expected.reason, actual.reason) << where;
  EXPECT_EQ(expected.muon_updated, actual.muon_updated) << where;
  EXPECT_EQ(expected.adam_updated, actual.adam_updated) << where;
  EXPECT_EQ(expected.without_gradient, actual.without_gradient) << where;
}

std::string temp_path(std::mt19937& random) {
  return (std::filesystem::temp_directory_path() / ("orthojit_device_state_" + std::to_string(random()) + ".safetensors")).string();
}

// The whole schedule on one preset and backend: steps, an lr change, missing gradients, a NaN,
// a save/load round trip each way.
void run_schedule(const std::string& preset, const std::string& backend) {
  SCOPED_TRACE(preset + " on " + backend);
  std::mt19937 random(20261202);
  Model model(random);
  const OptimizerSettings settings = settings_for(preset, backend);
  HybridOptimizer hybrid(model.parameters(false), settings);
  DeviceOptimizer device(model.parameters(true), settings, host_memory());
  EXPECT_EQ(hybrid.parameters().size(), device.parameters().size());
  EXPECT_EQ(hybrid.state_bytes().muon, device.state_bytes().muon);
  EXPECT_EQ(hybrid.state_bytes().adam, device.state_bytes().adam);
  auto both_step = [&](const std::string& where) {
    const StepReport expected = hybrid.step();
    const StepReport actual = device.step(nullptr);
    expect_same_report(expected, actual, where);
    expect_same_bits(model, hybrid, device, where);
  };
  const auto initial = model.hybrid_data;
  both_step("step 1");
  for (size_t i = 0; i < model.specs.size(); ++i)  // the comparison is not of two untouched copies
    EXPECT_EQ(model.hybrid_data[i] != initial[i], !model.specs[i].frozen) << model.specs[i].name;
  model.new_gradients(random);
  both_step("step 2");

  // A learning-rate schedule.
  hybrid.set_learning_rates(settings.muon.lr * 0.5, settings.adam.lr * 2);
  device.set_learning_rates(settings.muon.lr * 0.5, settings.adam.lr * 2);
  model.new_gradients(random);
  both_step("step 3 (lr changed)");

  // Missing gradients for a Muon parameter with splits, an expert tensor and an AdamW vector.
  for (const char* name : {"layers.1.attn.qkv.weight", "experts.w1", "norm.weight"}) {
    hybrid.set_gradient(name, nullptr, DType::F32);
    device.set_gradient(name, nullptr, DType::F32);
  }
  model.new_gradients(random);
  both_step("step 4 (three gradients missing)");

  // A non-finite gradient: both skip with the same reason, nothing changes.
  const size_t bad = 3;  // layers.0.mlp.up.weight, an f32 gradient
  ASSERT_EQ(model.specs[bad].grad_dtype, DType::F32);
  float* gradient = reinterpret_cast<float*>(model.grads[bad].data());
  const float saved = gradient[37];
  gradient[37] = std::numeric_limits<float>::quiet_NaN();
  both_step("step 5 (NaN)");
  gradient[37] = std::numeric_limits<float>::infinity();
  both_step("step 5 (infinity)");
  gradient[37] = saved;

  // Save the device state, step, load it into a fresh HybridOptimizer and a fresh device
  // optimizer from the saved parameters: the same next step everywhere.
  const std::string path = temp_path(random);
  device.save_state(path);
  const auto saved_hybrid = model.hybrid_data, saved_device = model.device_data;
  model.new_gradients(random);
  both_step("step 6");
  const auto after_hybrid = model.hybrid_data;
  Model::restore(model.hybrid_data, saved_hybrid);
  Model::restore(model.device_data, saved_device);
  {
    std::vector<Parameter> reloaded_hybrid = model.parameters(false), reloaded_device = model.parameters(true);
    for (std::vector<Parameter>* list : {&reloaded_hybrid, &reloaded_device})
      for (Parameter& p : *list)
        if (p.name == "layers.1.attn.qkv.weight" || p.name == "experts.w1" || p.name == "norm.weight") p.grad = nullptr;
    HybridOptimizer hybrid2(reloaded_hybrid, hybrid.settings());
    DeviceOptimizer device2(reloaded_device, device.settings(), host_memory());
    hybrid2.load_state(path);
    device2.load_state(path);
    EXPECT_EQ(device2.steps_taken(), device.steps_taken() - 1);
    expect_same_report(hybrid2.step(), device2.step(nullptr), "step 6 after load");
    expect_same_bits(model, hybrid2, device2, "step 6 after load");
    for (size_t i = 0; i < model.specs.size(); ++i) EXPECT_EQ(model.hybrid_data[i], after_hybrid[i]) << "step 6 after load: " << model.specs[i].name;
    // And the other way: HybridOptimizer's file into the device optimizer.
    hybrid.save_state(path);
    device2.load_state(path);
    hybrid2.load_state(path);
    expect_same_bits(model, hybrid2, device2, "HybridOptimizer's state loaded into both");
  }
  std::filesystem::remove(path);
}

TEST(DeviceOptimizer, OnHostMemoryIsHybridOptimizerBitForBit) {
  std::printf("host backends: %zu (ref%s)\n", host_backends().size(), host_backends().size() > 1 ? ", cpu" : "");
  for (const std::string& backend : host_backends())
    for (const char* preset : {"deepspeed", "keller", "moonlight", "torch"}) run_schedule(preset, backend);
}

// Host memory that records the state's copies to and from the host (their largest size, their
// count) and can fail the n-th upload, as a device whose copy fails would.
class CopyRecordingMemory final : public MemorySpace {
 public:
  std::shared_ptr<MemorySpace> host = host_memory();
  int64_t largest_download = 0, largest_upload = 0, downloads = 0, uploads = 0;
  int64_t fail_upload = -1;  // the index of the upload that throws, or -1

  const char* name() const override { return host->name(); }
  bool is_device() const override { return false; }
  std::string address_problem(std::uintptr_t address) const override { return host->address_problem(address); }
  std::uintptr_t allocate(int64_t bytes) override { return host->allocate(bytes); }
  void free(std::uintptr_t address) override { host->free(address); }
  void zero(std::uintptr_t address, int64_t bytes, void* stream) override { host->zero(address, bytes, stream); }
  void download(void* to, std::uintptr_t address, int64_t bytes) override {
    largest_download = std::max(largest_download, bytes);
    ++downloads;
    host->download(to, address, bytes);
  }
  void upload(std::uintptr_t address, const void* from, int64_t bytes) override {
    if (uploads == fail_upload) throw std::runtime_error("the planted upload failure");
    largest_upload = std::max(largest_upload, bytes);
    ++uploads;
    host->upload(address, from, bytes);
  }
  bool any_nonfinite(const std::vector<TensorSpan>& spans, void* stream) override { return host->any_nonfinite(spans, stream); }
  double sum_squares(std::uintptr_t values, int64_t count, void* stream) override { return host->sum_squares(values, count, stream); }
  void adam_step(const AdamGroupSettings& adam, int64_t step, DType grad_type, std::uintptr_t grad, std::uintptr_t exp_avg, std::uintptr_t exp_avg_sq,
                 DType param_type, std::uintptr_t param, int64_t count, void* stream) override {
    host->adam_step(adam, step, grad_type, grad, exp_avg, exp_avg_sq, param_type, param, count, stream);
  }
  void copy(std::uintptr_t destination, std::uintptr_t source, int64_t bytes, void* stream) override { host->copy(destination, source, bytes, stream); }
  void accumulate(DType grad_type, std::uintptr_t grad, std::uintptr_t accumulator, int64_t count, void* stream) override {
    host->accumulate(grad_type, grad, accumulator, count, stream);
  }
  void divide(std::uintptr_t values, float divisor, int64_t count, void* stream) override { host->divide(values, divisor, count, stream); }
  void convert(DType from, std::uintptr_t source, DType to, std::uintptr_t destination, int64_t count, void* stream) override {
    host->convert(from, source, to, destination, count, stream);
  }
  void muon_momentum(const MuonGroupSettings& muon, std::uintptr_t gradient, std::uintptr_t momentum, std::uintptr_t update, int64_t count,
                     void* stream) override {
    host->muon_momentum(muon, gradient, momentum, update, count, stream);
  }
  void apply_muon(const MuonGroupSettings& muon, const MatrixPlan& plan, DType param_type, std::uintptr_t param, std::uintptr_t orthogonal, int64_t begin,
                  int64_t end, void* stream) override {
    host->apply_muon(muon, plan, param_type, param, orthogonal, begin, end, stream);
  }
};

std::string file_bytes(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(in), {});
}

// The copies a state takes through a staging buffer of `staging` bytes: each f32 buffer (Muon:
// the momentum; AdamW: both moments) in pieces of at most `staging` bytes.
int64_t staged_copies(const DeviceOptimizer& device, int64_t staging) {
  int64_t copies = 0;
  for (const ParameterInfo& info : device.parameters()) {
    int64_t bytes = 4;
    for (int64_t d : info.shape) bytes *= d;
    copies += (info.muon ? 1 : 2) * ((bytes + staging - 1) / staging);
  }
  return copies;
}

TEST(DeviceOptimizer, StateFileStreamsThroughTheStagingBuffer) {
  std::mt19937 random(23);
  Model model(random);
  const OptimizerSettings settings = settings_for("moonlight", "ref");
  HybridOptimizer hybrid(model.parameters(false), settings);
  auto memory = std::make_shared<CopyRecordingMemory>();
  DeviceOptimizer device(model.parameters(true), settings, memory);
  for (int step = 0; step < 2; ++step) {
    model.new_gradients(random);
    expect_same_report(hybrid.step(), device.step(nullptr), "step " + std::to_string(step));
  }
  EXPECT_THROW(device.set_state_staging_bytes(0), std::invalid_argument);
  // 10 bytes: pieces that split floats, a short last piece in every tensor.
  constexpr int64_t kStaging = 10;
  device.set_state_staging_bytes(kStaging);
  const std::string expected_path = temp_path(random), path = temp_path(random);
  hybrid.save_state(expected_path);
  // The progress: the bytes written in the file's order (so commit reads nothing back for the
  // checksum: no "checksum" phase), ending at the file's data size, then the flush.
  std::vector<std::string> phases;
  uint64_t written = 0, total = 0;
  int64_t write_reports = 0;
  device.save_state(path, [&](const FileProgress& progress) {
    if (phases.empty() || phases.back() != progress.phase) phases.emplace_back(progress.phase);
    if (progress.phase == "write") {
      ++write_reports;
      written = progress.done;
      total = progress.total;
    }
  });
  EXPECT_TRUE(file_bytes(path) == file_bytes(expected_path)) << "the streamed file is not HybridOptimizer's, byte for byte";
  EXPECT_LE(memory->largest_download, kStaging);
  EXPECT_EQ(memory->downloads, staged_copies(device, kStaging));
  EXPECT_EQ(phases, (std::vector<std::string>{"write", "sync"})) << "written out of the file's order: commit re-read it for the checksum";
  EXPECT_EQ(written, SafetensorsReader(path).header().data_bytes);
  EXPECT_EQ(total, written);
  EXPECT_GE(write_reports, memory->downloads + 1) << "not every piece was reported";

  // Loaded through the same small buffer into a fresh optimizer: the saved state exactly.
  auto memory2 = std::make_shared<CopyRecordingMemory>();
  DeviceOptimizer device2(model.parameters(true), settings, memory2);
  device2.set_state_staging_bytes(kStaging);
  phases.clear();
  device2.load_state(path, [&](const FileProgress& progress) {
    if (phases.empty() || phases.back() != progress.phase) phases.emplace_back(progress.phase);
  });
  EXPECT_EQ(phases, (std::vector<std::string>{"checksum", "read"})) << "the whole checksum is verified before the state is read";
  EXPECT_LE(memory2->largest_upload, kStaging);
  EXPECT_EQ(memory2->uploads, staged_copies(device2, kStaging));
  expect_same_bits(model, hybrid, device2, "loaded through a 10-byte buffer");

  // A corrupt file (one bit of the last tensor's data): refused before any byte is uploaded.
  DeviceOptimizer fresh(model.parameters(true), settings, memory2);
  const auto zeros = fresh.state();
  {
    std::fstream file(path, std::ios::in | std::ios::out | std::ios::binary);
    file.seekg(-3, std::ios::end);
    const char byte = static_cast<char>(file.get() ^ 0x10);
    file.seekp(-3, std::ios::end);
    file.put(byte);
  }
  memory2->uploads = 0;
  EXPECT_THROW(fresh.load_state(path), SafetensorsError);
  EXPECT_EQ(memory2->uploads, 0) << "a corrupt file reached the state";
  EXPECT_EQ(fresh.steps_taken(), 0);
  EXPECT_EQ(fresh.state().at("layers.0.attn.o.weight").momentum, zeros.at("layers.0.attn.o.weight").momentum);

  // An upload failing midway: the optimizer says the state is partly loaded and refuses to step
  // or save until a load succeeds.
  hybrid.save_state(path);
  memory2->uploads = 0;
  memory2->fail_upload = 5;
  try {
    fresh.load_state(path);
    ADD_FAILURE() << "a failed upload was not reported";
  } catch (const std::runtime_error& error) {
    EXPECT_NE(std::string(error.what()).find("partly loaded"), std::string::npos) << error.what();
    EXPECT_NE(std::string(error.what()).find("the planted upload failure"), std::string::npos) << error.what();
  }
  EXPECT_THROW(fresh.step(nullptr), InvalidStateError);
  EXPECT_THROW(fresh.save_state(path + ".more"), InvalidStateError);
  EXPECT_FALSE(std::filesystem::exists(path + ".more"));
  memory2->fail_upload = -1;
  fresh.load_state(path);
  model.new_gradients(random);
  expect_same_report(hybrid.step(), fresh.step(nullptr), "after a load that succeeded");
  std::filesystem::remove(path);
  std::filesystem::remove(expected_path);
}

TEST(DeviceOptimizer, EqualBlocksOfDifferentParametersShareOneBatch) {
  // Two QKV projections with heads: 2 x 6 blocks of 4 x 16 rows in one compiled step; more steps
  // with fresh gradients and both momentum forms, still HybridOptimizer's bits.
  std::mt19937 random(7);
  Model model(random);
  for (const char* preset : {"keller", "moonlight"}) {
    OptimizerSettings settings = settings_for(preset, host_backends().back());
    HybridOptimizer hybrid(model.parameters(false), settings);
    DeviceOptimizer device(model.parameters(true), settings, host_memory());
    for (int step = 0; step < 4; ++step) {
      model.new_gradients(random);
      expect_same_report(hybrid.step(), device.step(nullptr), std::string(preset) + " step " + std::to_string(step));
      expect_same_bits(model, hybrid, device, std::string(preset) + " step " + std::to_string(step));
    }
    EXPECT_EQ(device.graph_launches(), 0) << "no CUDA graphs on host memory";
  }
}

TEST(DeviceOptimizer, NamesTheFirstNonFiniteGradientAndChangesNothing) {
  std::mt19937 random(11);
  Model model(random);
  DeviceOptimizer device(model.parameters(true), settings_for("torch", "ref"), host_memory());
  device.step(nullptr);
  const auto before = device.state();
  const auto data_before = model.device_data;
  // A bf16 infinity in the second QKV projection's gradient.
  store_element(DType::BF16, model.grads[1].data(), 100, std::numeric_limits<double>::infinity());
  const StepReport report = device.step(nullptr);
  EXPECT_TRUE(report.skipped);
  EXPECT_EQ(report.reason, "parameter 'layers.1.attn.qkv.weight': gradient element 100 is infinite; the step was skipped and no parameter or state changed");
  EXPECT_EQ(model.device_data, data_before);
  EXPECT_EQ(device.state().at("layers.0.attn.o.weight").momentum, before.at("layers.0.attn.o.weight").momentum);
  EXPECT_EQ(device.steps_taken(), 1);
}

TEST(DeviceOptimizer, QkClipMatchesHybridOptimizer) {
  std::mt19937 random(5);
  Model model(random);
  const OptimizerSettings settings = settings_for("moonlight", "ref");
  HybridOptimizer hybrid(model.parameters(false), settings);
  DeviceOptimizer device(model.parameters(true), settings, host_memory());
  const std::vector<double> s_max = {120, 80, 101, 99, 300, 1};
  hybrid.qk_clip("layers.0.attn.qkv.weight", "layers.1.attn.qkv.weight", 4, s_max, 100);
  device.qk_clip("layers.0.attn.qkv.weight", "layers.1.attn.qkv.weight", 4, s_max, 100);
  expect_same_bits(model, hybrid, device, "qk_clip");
  EXPECT_THROW(device.qk_clip("layers.0.attn.qkv.weight", "layers.1.attn.qkv.weight", 5, s_max, 100), std::invalid_argument);
}

TEST(DeviceOptimizer, ValidatesLikeHybridOptimizer) {
  std::mt19937 random(3);
  Model model(random);
  std::vector<Parameter> parameters = model.parameters(true);
  parameters[0].row_splits = {8, 8};  // sums to 16, not 24
  try {
    DeviceOptimizer device(parameters, settings_for("deepspeed", "ref"), host_memory());
    FAIL() << "an inconsistent split was accepted";
  } catch (const std::invalid_argument& error) {
    EXPECT_NE(std::string(error.what()).find("layers.0.attn.qkv.weight"), std::string::npos) << error.what();
  }
}

TEST(DeviceOptimizer, CudaMemoryWithoutTheBackendSaysWhy) {
  const std::string why = cuda_backend_unavailable_reason();
  if (why.empty()) GTEST_SKIP() << "the cuda backend runs here";
  try {
    cuda_memory();
    FAIL() << "cuda_memory() without the cuda backend";
  } catch (const UsageError& error) {
    EXPECT_NE(std::string(error.what()).find(why), std::string::npos) << error.what();
  }
}

// On a machine with a CUDA device: the same schedule's first steps on device memory against
// HybridOptimizer on the host, within the Newton–Schulz kernels' rounding (the element-wise parts
// are the host's bits, tests/cuda_elementwise_test.cpp and cuda_muon_step_test.cpp).
TEST(DeviceOptimizer, OnCudaMemoryWhenADeviceIsHere) {
  if (!cuda_backend_unavailable_reason().empty()) GTEST_SKIP() << "no CUDA device: " << cuda_backend_unavailable_reason();
  std::mt19937 random(13);
  Model model(random);
  const std::shared_ptr<MemorySpace> cuda = cuda_memory();
  std::vector<Parameter> parameters = model.parameters(true);
  std::vector<std::uintptr_t> data(parameters.size()), grads(parameters.size());
  for (size_t i = 0; i < parameters.size(); ++i) {
    const int64_t bytes = static_cast<int64_t>(model.device_data[i].size()), grad_bytes = static_cast<int64_t>(model.grads[i].size());
    data[i] = cuda->allocate(bytes);
    grads[i] = cuda->allocate(grad_bytes);
    cuda->upload(data[i], model.device_data[i].data(), bytes);
    cuda->upload(grads[i], model.grads[i].data(), grad_bytes);
    parameters[i].data = reinterpret_cast<void*>(data[i]);
    parameters[i].grad = reinterpret_cast<const void*>(grads[i]);
  }
  const OptimizerSettings settings = settings_for("keller", "ref");
  HybridOptimizer hybrid(model.parameters(false), settings);
  {
    DeviceOptimizer device(parameters, settings, cuda);
    for (int step = 0; step < 2; ++step) {
      expect_same_report(hybrid.step(), device.step(nullptr), "cuda step");
    }
    for (size_t i = 0; i < parameters.size(); ++i) {
      std::vector<unsigned char> back(model.device_data[i].size());
      cuda->download(back.data(), data[i], static_cast<int64_t>(back.size()));
      const int64_t count = elements(model.specs[i]);
      double worst = 0;
      for (int64_t k = 0; k < count; ++k)
        worst = std::max(worst, std::abs(load_element(model.specs[i].dtype, back.data(), k) - load_element(model.specs[i].dtype, model.hybrid_data[i].data(), k)));
      EXPECT_LE(worst, 2e-2) << model.specs[i].name;
    }
  }
  for (size_t i = 0; i < parameters.size(); ++i) {
    cuda->free(data[i]);
    cuda->free(grads[i]);
  }
}

}  // namespace
}  // namespace orthojit::runtime
