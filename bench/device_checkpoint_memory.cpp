// What a checkpoint of the device-resident optimizer (DeviceOptimizer, the C API's memory = cuda)
// costs in host memory, measured on the host memory space: a model of f32 parameters (an R x 1024
// AdamW embedding, --embedding-rows R, and L Muon matrices of 1024 x 1024, --muon-layers L, as
// bench/checkpoint_memory.cpp), then save_state and load_state of one file, against the
// whole-state path DeviceOptimizer took before it streamed (the state copied to the host by
// state(), then write_state_file; read_state_file into a host copy, which load_state then
// uploaded). For each: the resident memory it added at its peak and the time, medians of
// --repeats runs. On a GPU the host copy is what the whole-state path needs on top of the
// device's state; the streamed path stages DeviceOptimizer::state_staging_bytes() at a time.
//
//   MALLOC_MMAP_THRESHOLD_=1048576 build/bin/orthojit_device_checkpoint_bench
//       [--embedding-rows R] [--muon-layers L] [--repeats N] [--path FILE]
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <functional>
#include <random>
#include <string>
#include <vector>

#include "bench/resident_memory.h"
#include "runtime/muon/device_optimizer.h"
#include "runtime/muon/state_format.h"

namespace {

using namespace orthojit::runtime;

struct Measure {
  double added_mib = 0, seconds = 0;
};

// Medians over `repeats` calls.
Measure measure(int repeats, const std::function<void()>& call) {
  std::vector<double> added, seconds;
  for (int i = 0; i < repeats; ++i) {
    const long before = orthojit::bench::status_kib("VmRSS");
    orthojit::bench::reset_peak();
    const auto started = std::chrono::steady_clock::now();
    call();
    seconds.push_back(std::chrono::duration<double>(std::chrono::steady_clock::now() - started).count());
    added.push_back(static_cast<double>(orthojit::bench::status_kib("VmHWM") - before) / 1024.0);
  }
  auto median = [](std::vector<double> values) {
    std::sort(values.begin(), values.end());
    return values[values.size() / 2];
  };
  return {median(added), median(seconds)};
}

}  // namespace

int main(int argc, char** argv) {
  int64_t embedding_rows = 32768, muon_layers = 8;
  int repeats = 5;
  std::string path = "/tmp/orthojit-device-checkpoint-bench.safetensors";
  for (int i = 1; i < argc; i += 2) {
    const std::string flag = argv[i];
    if (i + 1 >= argc) {
      std::fprintf(stderr, "%s needs a value\n", flag.c_str());
      return 2;
    }
    if (flag == "--embedding-rows") embedding_rows = std::atoll(argv[i + 1]);
    else if (flag == "--muon-layers") muon_layers = std::atoll(argv[i + 1]);
    else if (flag == "--repeats") repeats = std::atoi(argv[i + 1]);
    else if (flag == "--path") path = argv[i + 1];
    else {
      std::fprintf(stderr, "unknown flag %s; expected --embedding-rows R, --muon-layers L, --repeats N, --path FILE\n", flag.c_str());
      return 2;
    }
  }
  if (embedding_rows < 1 || muon_layers < 0 || repeats < 1) {
    std::fprintf(stderr, "--embedding-rows must be >= 1, --muon-layers >= 0, --repeats >= 1\n");
    return 2;
  }
  std::vector<std::vector<float>> data;
  std::vector<Parameter> parameters;
  std::mt19937 random(7);
  std::normal_distribution<float> normal(0.0f, 0.02f);
  int64_t elements = 0;
  for (int64_t i = 0; i <= muon_layers; ++i) {
    const int64_t rows = i == 0 ? embedding_rows : 1024;
    data.emplace_back(static_cast<size_t>(rows * 1024));
    for (float& v : data.back()) v = normal(random);
    Parameter p;
    p.name = i == 0 ? "embed.weight" : "layer." + std::to_string(i - 1) + ".weight";
    p.shape = {rows, 1024};
    p.data = data.back().data();
    p.use_muon = i != 0;
    parameters.push_back(p);
    elements += rows * 1024;
  }
  const OptimizerSettings settings = preset_settings("keller");
  DeviceOptimizer optimizer(parameters, settings, host_memory());
  std::vector<StateOwner> owners;
  for (const ParameterInfo& info : optimizer.parameters()) owners.push_back({info.name, info.shape, info.muon});

  const Measure streamed_save = measure(repeats, [&] { optimizer.save_state(path); });
  const Measure streamed_load = measure(repeats, [&] { optimizer.load_state(path); });
  const Measure whole_save = measure(repeats, [&] { write_state_file(path, owners, optimizer.state(), settings, optimizer.steps_taken()); });
  const Measure whole_load = measure(repeats, [&] {
    int64_t steps = 0;
    const auto loaded = read_state_file(path, owners, settings, steps);
    if (loaded.size() != owners.size()) std::abort();
  });
  std::remove(path.c_str());
  const double state_mib = static_cast<double>(optimizer.state_bytes().total()) / (1 << 20);
  std::printf("%.1fM f32 elements (%lld AdamW rows + %lld Muon 1024^2), %.1f MiB of state, staging %.0f MiB; medians of %d\n"
              "path          save: MiB added  s      load: MiB added  s\n",
              static_cast<double>(elements) / 1e6, static_cast<long long>(embedding_rows), static_cast<long long>(muon_layers), state_mib,
              static_cast<double>(optimizer.state_staging_bytes()) / (1 << 20), repeats);
  std::printf("whole state   %15.1f  %5.2f  %15.1f  %5.2f\n", whole_save.added_mib, whole_save.seconds, whole_load.added_mib, whole_load.seconds);
  std::printf("streamed      %15.1f  %5.2f  %15.1f  %5.2f\n", streamed_save.added_mib, streamed_save.seconds, streamed_load.added_mib,
              streamed_load.seconds);
  return 0;
}
