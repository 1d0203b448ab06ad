// The NCCL engine of the distributed optimizer on one rank (ctest label gpu; scripts/gpu-check's
// nccl phase). One process bootstraps NCCL over the LocalCommunicator (world 1: no MPI needed,
// which the GPU machines do not have), then:
//   * every collective of the Communicator interface moves exactly the bytes it should, on device
//     buffers and on host buffers (which the engine stages through the device); buffers are
//     poisoned first so a collective that writes nothing cannot pass;
//   * the distributed optimizer over NCCL, every ZeRO stage and both orthogonalization modes, gives
//     parameters bit-identical to the single-rank optimizer after several steps (on one rank the
//     reductions are copies, so any difference is the engine's);
//   * the same on CUDA memory (the optimizer on PyTorch's CUDA tensors) against the single-rank
//     DeviceOptimizer: every buffer on the device, every collective on device buffers.
// Standalone (no GoogleTest: the GPU machines have none). Without libnccl or a device it prints
// why and exits 77 (ctest: skipped). Exit 1 on a failed check.
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <memory>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "cuda/cuda_driver.h"
#include "runtime/muon/device_optimizer.h"
#include "runtime/muon/hybrid_optimizer.h"
#include "runtime/muon/memory_space.h"
#include "runtime/orthogonalize.h"
#include "runtime/zero/communicator.h"
#include "runtime/zero/distributed_optimizer.h"
#include "runtime/zero/nccl_communicator.h"

namespace {

using namespace orthojit;
using namespace orthojit::runtime;

int checks = 0, failures = 0;

void check(bool ok, const std::string& what) {
  ++checks;
  if (!ok) {
    ++failures;
    std::printf("FAIL %s\n", what.c_str());
  }
}

std::vector<float> pattern(size_t count, float offset) {
  std::vector<float> values(count);
  for (size_t i = 0; i < count; ++i) values[i] = offset + 0.25f * static_cast<float>(i % 97) - static_cast<float>(i % 7);
  return values;
}

bool same(const std::vector<float>& a, const std::vector<float>& b) { return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * 4) == 0; }

// Host buffers: the staged path.
void host_collectives(Communicator& nccl) {
  const size_t count = 1000;
  const std::vector<float> input = pattern(count, 1.5f);
  std::vector<float> data = input;
  nccl.all_reduce_sum(data.data(), static_cast<int64_t>(count));
  check(same(data, input), "host all_reduce_sum on one rank leaves the values");
  std::vector<float> received(count, -7.0f);
  nccl.reduce_scatter_sum(input.data(), received.data(), static_cast<int64_t>(count));
  check(same(received, input), "host reduce_scatter_sum on one rank copies its block");
  std::fill(received.begin(), received.end(), -7.0f);
  nccl.all_gather(input.data(), static_cast<int64_t>(count * 4), received.data());
  check(same(received, input), "host all_gather on one rank copies");
  data = input;
  nccl.broadcast(data.data(), static_cast<int64_t>(count * 4), 0);
  check(same(data, input), "host broadcast from rank 0 keeps the root's values");
  check(nccl.bytes_sent() == 0, "one rank sends no bytes (ring formulas: (N-1)/N of the data)");
}

// Device buffers: NCCL's own path.
void device_collectives(Communicator& nccl) {
  const size_t count = 4096;
  const std::vector<float> input = pattern(count, -3.0f);
  cuda::DeviceBuffer send(static_cast<int64_t>(count * 4)), receive(static_cast<int64_t>(count * 4));
  const std::vector<float> poison(count, -7.0f);
  send.upload(input.data(), static_cast<int64_t>(count * 4));
  auto device_result = [&](const cuda::DeviceBuffer& buffer) {
    std::vector<float> host(count);
    cuda::check(cuda::Device::get().api().cuCtxSynchronize(), "synchronizing after a collective");
    buffer.download(host.data(), static_cast<int64_t>(count * 4));
    return host;
  };
  float* send_pointer = reinterpret_cast<float*>(send.get());
  float* receive_pointer = reinterpret_cast<float*>(receive.get());
  nccl.all_reduce_sum(send_pointer, static_cast<int64_t>(count));
  check(same(device_result(send), input), "device all_reduce_sum on one rank leaves the values");
  receive.upload(poison.data(), static_cast<int64_t>(count * 4));
  nccl.reduce_scatter_sum(send_pointer, receive_pointer, static_cast<int64_t>(count));
  check(same(device_result(receive), input), "device reduce_scatter_sum on one rank copies its block");
  receive.upload(poison.data(), static_cast<int64_t>(count * 4));
  nccl.all_gather(send_pointer, static_cast<int64_t>(count * 4), receive_pointer);
  check(same(device_result(receive), input), "device all_gather on one rank copies");
  nccl.broadcast(send_pointer, static_cast<int64_t>(count * 4), 0);
  check(same(device_result(send), input), "device broadcast from rank 0 keeps the root's values");
}

struct Model {
  std::vector<std::string> names;
  std::vector<std::vector<int64_t>> shapes;
  std::vector<std::vector<float>> data, grad;
  std::vector<Parameter> parameters() {
    std::vector<Parameter> result;
    for (size_t i = 0; i < names.size(); ++i) {
      Parameter p;
      p.name = names[i];
      p.shape = shapes[i];
      p.data = data[i].data();
      p.grad = grad[i].data();
      p.use_muon = shapes[i].size() >= 2;
      if (shapes[i].size() == 3) p.layout = MatrixLayout::Batch;
      result.push_back(p);
    }
    return result;
  }
};

// Matrices of awkward sizes (partition boundaries cut through them at stages 2 and 3 with
// alignment > 1), a 3-D expert tensor, a bias.
Model model_of(uint32_t seed) {
  std::mt19937 random(seed);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  Model model;
  model.names = {"embed.weight", "layer0.weight", "layer0.bias", "layer1.experts", "head.weight"};
  model.shapes = {{11, 7}, {13, 9}, {13}, {2, 5, 6}, {3, 13}};
  for (const auto& shape : model.shapes) {
    int64_t elements = 1;
    for (int64_t extent : shape) elements *= extent;
    std::vector<float> values(static_cast<size_t>(elements));
    for (float& v : values) v = normal(random);
    model.data.push_back(values);
    model.grad.emplace_back(values.size(), 0.0f);
  }
  return model;
}

OptimizerSettings settings() {
  OptimizerSettings result = preset_settings("keller");
  result.muon.backend = "ref";  // the host state's orthogonalization; the engine moves the bytes
  result.muon.precision = ScalarType::F32;
  result.muon.weight_decay = 0.01;
  result.adam.weight_decay = 0.01;
  return result;
}

void optimizer_over_nccl(Communicator& nccl) {
  for (int stage : {1, 2, 3})
    for (OrthogonalizationMode mode : {OrthogonalizationMode::DeepSpeed, OrthogonalizationMode::Balanced}) {
      const std::string label = "stage " + std::to_string(stage) + ", " + to_string(mode) + " mode";
      Model distributed = model_of(7), single = model_of(7);
      DistributedSettings zero;
      zero.stage = stage;
      zero.mode = mode;
      zero.alignment = 3;
      DistributedOptimizer optimizer(distributed.parameters(), settings(), zero, nccl);
      HybridOptimizer reference(single.parameters(), settings());
      std::mt19937 random(11);
      std::normal_distribution<float> normal(0.0f, 1.0f);
      for (int step = 0; step < 3; ++step) {
        for (size_t t = 0; t < single.grad.size(); ++t) {
          for (float& v : single.grad[t]) v = normal(random);
          distributed.grad[t] = single.grad[t];
        }
        const StepReport report = optimizer.step();
        check(!report.skipped, label + ": step " + std::to_string(step) + " was not skipped (" + report.reason + ")");
        if (stage == 3) optimizer.gather_parameters();
        reference.step();
        for (size_t t = 0; t < single.data.size(); ++t)
          check(same(distributed.data[t], single.data[t]), label + ": " + single.names[t] + " after step " + std::to_string(step) +
                                                                   " is bit-identical to the single-rank optimizer");
      }
    }
}

// The distributed optimizer on CUDA memory (parameters, gradients, state and buffers on the
// device; collectives on device buffers) against the single-rank DeviceOptimizer on CUDA memory,
// iterating in bf16 (the cuda backend stores 16-bit values; it refuses f32). deepspeed mode runs
// the same compiled Muon steps: bit-identical. balanced mode splits the momentum from the
// iteration: the same formulas, the bf16 roundings in other places, so each step's update
// (-lr·scale·O - lr·wd·p, the second term equal on both sides) is compared relatively:
// ||Δa - Δb||_F / ||Δb||_F < 3e-2, the bound tests/cpu_backend_test.cpp argues for two 16-bit
// iterations with the same rounding points; one element of O lost in a matrix of k elements is
// about 1/sqrt(k) of its norm, far above for these sizes.
void optimizer_on_device_memory(Communicator& nccl) {
  const std::shared_ptr<MemorySpace> memory = cuda_memory();
  OptimizerSettings on_device = settings();
  on_device.muon.backend = "cuda";
  on_device.muon.precision = ScalarType::BF16;
  for (int stage : {1, 2, 3})
    for (OrthogonalizationMode mode : {OrthogonalizationMode::DeepSpeed, OrthogonalizationMode::Balanced}) {
      const std::string label = "CUDA memory, stage " + std::to_string(stage) + ", " + to_string(mode) + " mode";
      Model host = model_of(5);
      // Two device copies of every parameter and one of every gradient.
      std::vector<cuda::DeviceBuffer> distributed_data, single_data, grads;
      std::vector<Parameter> distributed_parameters = host.parameters(), single_parameters = host.parameters();
      for (size_t t = 0; t < host.data.size(); ++t) {
        const int64_t bytes = static_cast<int64_t>(host.data[t].size() * 4);
        distributed_data.emplace_back(bytes), single_data.emplace_back(bytes), grads.emplace_back(bytes);
        distributed_data.back().upload(host.data[t].data(), bytes);
        single_data.back().upload(host.data[t].data(), bytes);
        distributed_parameters[t].data = reinterpret_cast<void*>(distributed_data.back().get());
        single_parameters[t].data = reinterpret_cast<void*>(single_data.back().get());
        distributed_parameters[t].grad = single_parameters[t].grad = reinterpret_cast<const void*>(grads.back().get());
      }
      DistributedSettings zero;
      zero.stage = stage;
      zero.mode = mode;
      zero.alignment = 3;
      DistributedOptimizer optimizer(distributed_parameters, on_device, zero, nccl, memory);
      DeviceOptimizer reference(single_parameters, on_device, memory);
      std::mt19937 random(13);
      std::normal_distribution<float> normal(0.0f, 1.0f);
      for (int step = 0; step < 3; ++step) {
        for (size_t t = 0; t < host.grad.size(); ++t) {
          for (float& v : host.grad[t]) v = normal(random);
          grads[t].upload(host.grad[t].data(), static_cast<int64_t>(host.grad[t].size() * 4));
        }
        std::vector<std::vector<float>> a_before(host.data.size()), b_before(host.data.size());
        for (size_t t = 0; t < host.data.size(); ++t) {
          a_before[t].resize(host.data[t].size()), b_before[t].resize(host.data[t].size());
          distributed_data[t].download(a_before[t].data(), static_cast<int64_t>(a_before[t].size() * 4));
          single_data[t].download(b_before[t].data(), static_cast<int64_t>(b_before[t].size() * 4));
        }
        const StepReport report = optimizer.step(nullptr);
        check(!report.skipped, label + ": step " + std::to_string(step) + " was not skipped (" + report.reason + ")");
        if (stage == 3) optimizer.gather_parameters(nullptr);
        reference.step(nullptr);
        cuda::check(cuda::Device::get().api().cuCtxSynchronize(), "synchronizing after the steps");
        for (size_t t = 0; t < host.data.size(); ++t) {
          std::vector<float> a(host.data[t].size()), b(host.data[t].size());
          distributed_data[t].download(a.data(), static_cast<int64_t>(a.size() * 4));
          single_data[t].download(b.data(), static_cast<int64_t>(b.size() * 4));
          double difference = 0, norm = 0;
          for (size_t i = 0; i < a.size(); ++i) {
            const double da = static_cast<double>(a[i]) - a_before[t][i], db = static_cast<double>(b[i]) - b_before[t][i];
            difference += (da - db) * (da - db);
            norm += db * db;
          }
          const double relative = std::sqrt(difference / std::max(norm, 1e-300));
          const std::string where = label + ": " + host.names[t] + " after step " + std::to_string(step);
          if (mode == OrthogonalizationMode::DeepSpeed) check(same(a, b), where + " is bit-identical to DeviceOptimizer's");
          else check(same(a, b) || relative < 3e-2, where + "'s update is within a relative 3e-2 of DeviceOptimizer's (" + std::to_string(relative) + ")");
        }
      }
    }
}

}  // namespace

int main() {
  if (const std::string why = NcclCommunicator::unavailable_reason(); !why.empty()) {
    std::printf("SKIP: %s\n", why.c_str());
    return 77;
  }
  if (const std::string why = cuda_backend_unavailable_reason(); !why.empty()) {
    std::printf("SKIP: no CUDA device: %s\n", why.c_str());
    return 77;
  }
  LocalCommunicator local;
  try {
    const auto nccl = NcclCommunicator::create(local);
    std::printf("engine: %s on %s\n", nccl->describe().c_str(), cuda::Device::get().info().describe().c_str());
    host_collectives(*nccl);
    device_collectives(*nccl);
    optimizer_over_nccl(*nccl);
    optimizer_on_device_memory(*nccl);
  } catch (const std::exception& error) {
    ++failures;
    std::printf("FAIL: %s\n", error.what());
  }
  std::printf("nccl_one_rank_test: %d checks, %d failed\n", checks, failures);
  return failures == 0 ? 0 : 1;
}
