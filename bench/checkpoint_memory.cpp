// What a checkpoint of the distributed optimizer costs each rank: under mpirun, a model of f32
// parameters (an R x 1024 AdamW embedding, --embedding-rows R, and L Muon matrices of 1024 x 1024,
// --muon-layers L, as bench/distributed_memory.py), ZeRO stage 2, one step, then
// DistributedOptimizer::save_state and load_state of one file. For each, on every rank: the
// resident memory it added at its peak (VmHWM after the call, with the high-water mark reset
// before it through /proc/self/clear_refs, less VmRSS before) and the time.
//
//   MALLOC_MMAP_THRESHOLD_=1048576 mpirun -n 2 build/bin/orthojit_checkpoint_bench
//       [--embedding-rows R] [--muon-layers L] [--path FILE]
//
// MALLOC_MMAP_THRESHOLD_ makes glibc map every large block and unmap it when freed, so that the
// resident memory measures what is live. The file goes to /tmp (the page cache: the time is the
// optimizer's, not the disk's) unless --path names another.
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <random>
#include <stdexcept>
#include <string>
#include <vector>

#include "bench/resident_memory.h"
#include "runtime/zero/distributed_optimizer.h"
#include "runtime/zero/mpi_communicator.h"

#pragma GCC diagnostic ignored "-Wold-style-cast"  // MPI's C macros
#ifndef OMPI_SKIP_MPICXX
#define OMPI_SKIP_MPICXX 1
#endif
#include <mpi.h>

namespace {

using namespace orthojit::runtime;

using orthojit::bench::reset_peak;
using orthojit::bench::status_kib;

struct Measure {
  double added_mib, seconds;
};

template <class Call>
Measure measure(Communicator& communicator, Call call) {
  float nothing = 0;
  communicator.all_reduce_sum(&nothing, 1);
  const long before = status_kib("VmRSS");
  reset_peak();
  const auto started = std::chrono::steady_clock::now();
  call();
  communicator.all_reduce_sum(&nothing, 1);
  const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - started).count();
  return {static_cast<double>(status_kib("VmHWM") - before) / 1024.0, seconds};
}

}  // namespace

int main(int argc, char** argv) {
  MPI_Init(&argc, &argv);
  int64_t embedding_rows = 32768, muon_layers = 8;
  std::string path = "/tmp/orthojit-checkpoint-bench.safetensors";
  for (int i = 1; i + 1 < argc; i += 2) {
    const std::string flag = argv[i];
    if (flag == "--embedding-rows") embedding_rows = std::atoll(argv[i + 1]);
    else if (flag == "--muon-layers") muon_layers = std::atoll(argv[i + 1]);
    else if (flag == "--path") path = argv[i + 1];
    else {
      std::fprintf(stderr, "unknown flag %s; expected --embedding-rows R, --muon-layers L, --path FILE\n", flag.c_str());
      MPI_Abort(MPI_COMM_WORLD, 2);
    }
  }
  {
    auto communicator = MpiCommunicator::on_world();
    const int rank = communicator->rank();
    std::vector<std::vector<float>> data, grad;
    std::vector<Parameter> parameters;
    std::mt19937 random(7);
    std::normal_distribution<float> normal(0.0f, 0.02f);
    auto add = [&](int64_t rows) {
      data.emplace_back(static_cast<size_t>(rows * 1024));
      grad.emplace_back(static_cast<size_t>(rows * 1024));
      for (float& v : data.back()) v = normal(random);
      for (float& v : grad.back()) v = normal(random) * 0.05f;
    };
    add(embedding_rows);
    for (int64_t i = 0; i < muon_layers; ++i) add(1024);
    int64_t elements = 0;
    for (size_t i = 0; i < data.size(); ++i) {
      Parameter p;
      p.name = i == 0 ? "embed.weight" : "layer." + std::to_string(i - 1) + ".weight";
      p.shape = {static_cast<int64_t>(data[i].size() / 1024), 1024};
      p.data = data[i].data();
      p.grad = grad[i].data();
      p.use_muon = i != 0;
      parameters.push_back(p);
      elements += static_cast<int64_t>(data[i].size());
    }
    DistributedSettings settings;
    settings.stage = 2;
    DistributedOptimizer optimizer(parameters, preset_settings("keller"), settings, *communicator);
    optimizer.step();
    const Measure saved = measure(*communicator, [&] { optimizer.save_state(path); });
    const Measure loaded = measure(*communicator, [&] { optimizer.load_state(path); });
    const double state_mib = static_cast<double>(optimizer.state_bytes().muon + optimizer.state_bytes().adam) / (1 << 20);
    for (int r = 0; r < communicator->world(); ++r) {
      if (r == rank) {
        if (r == 0)
          std::printf("%.1fM f32 elements (%lld AdamW rows + %lld Muon 1024^2), %d ranks, stage 2; MiB added at the peak, seconds\n"
                      "rank  own state  save: peak  time   load: peak  time\n",
                      static_cast<double>(elements) / 1e6, static_cast<long long>(embedding_rows), static_cast<long long>(muon_layers), communicator->world());
        std::printf("%4d  %9.1f  %10.1f  %5.2f  %11.1f  %5.2f\n", r, state_mib, saved.added_mib, saved.seconds, loaded.added_mib, loaded.seconds);
        std::fflush(stdout);
      }
      float nothing = 0;
      communicator->all_reduce_sum(&nothing, 1);
    }
    if (rank == 0) std::remove(path.c_str());
  }
  MPI_Finalize();
  return 0;
}
