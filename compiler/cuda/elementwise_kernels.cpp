// Compiling, loading and launching the element-wise kernels (see elementwise_kernels.h).
#include "cuda/elementwise_kernels.h"

#include <algorithm>
#include <vector>

#include "cuda/program_cache.h"

namespace orthojit::cuda {

ElementwiseKernels::~ElementwiseKernels() {
  // Modules stay loaded for the process when this is the process default (destroyed after the
  // driver at exit otherwise); an owned instance unloads them.
  if (!loaded_.empty()) Device::get().make_current_quietly();
  for (auto& [source, loaded] : loaded_)
    if (loaded.first) Device::get().api().cuModuleUnload(loaded.first);
}

ElementwiseKernels& ElementwiseKernels::process_default(const NamedSources& headers) {
  static ElementwiseKernels* instance = new ElementwiseKernels(headers);  // never destroyed, as the Device
  return *instance;
}

CUfunction ElementwiseKernels::function(const std::string& source, const char* name) {
  std::lock_guard<std::mutex> lock(mutex_);
  if (auto it = loaded_.find(source); it != loaded_.end()) return it->second.second;
  const Device& device = Device::get();
  device.make_current();
  const ProgramCache::Result compiled = ProgramCache::process_default().get_or_compile(source, headers_, device.compile_target());
  std::vector<char> image = compiled.output.image;
  if (compiled.output.arch.rfind("compute_", 0) == 0) image.push_back('\0');  // PTX is loaded as a C string
  CUmodule module = nullptr;
  CUfunction function = nullptr;
  check(device.api().cuModuleLoadData(&module, image.data()), std::string("cuModuleLoadData (") + name + ")");
  check(device.api().cuModuleGetFunction(&function, module, name), std::string("cuModuleGetFunction(") + name + ")");
  loaded_.emplace(source, std::make_pair(module, function));
  return function;
}

namespace {
// Memory-bound: 256 threads, enough CTAs to fill the device a few times over, the rest looped.
constexpr int64_t kThreads = 256;
int64_t most_blocks() { return std::max<int64_t>(1, static_cast<int64_t>(Device::get().info().multiprocessors) * 8); }
}  // namespace

int64_t ElementwiseKernels::most_threads() const { return most_blocks() * kThreads; }

int64_t ElementwiseKernels::launch(CUfunction function, int64_t count, void** arguments, CUstream stream) {
  if (count <= 0) return 0;
  const Device& device = Device::get();
  device.make_current();
  const int64_t wanted = (count + kThreads - 1) / kThreads;
  const unsigned blocks = static_cast<unsigned>(std::min(wanted, most_blocks()));
  check(device.api().cuLaunchKernel(function, blocks, 1, 1, static_cast<unsigned>(kThreads), 1, 1, 0, stream, arguments, nullptr),
        "cuLaunchKernel(element-wise)");
  return static_cast<int64_t>(blocks) * kThreads;
}

void ElementwiseKernels::muon_momentum(const MuonMomentumKernel& kernel, CUdeviceptr g, CUdeviceptr m, CUdeviceptr u, double beta, int64_t count,
                                       CUstream stream) {
  CUfunction f = function(generate_muon_momentum(kernel), "oj_muon_momentum");
  long long n = count;
  void* arguments[] = {&g, &m, &u, &beta, &n};
  launch(f, count, arguments, stream);
}

void ElementwiseKernels::muon_apply(const MuonApplyKernel& kernel, CUdeviceptr p, CUdeviceptr o, CUdeviceptr row_step, double step, double decay,
                                    int64_t rows, int64_t cols, int64_t first, int64_t count, CUstream stream) {
  CUfunction f = function(generate_muon_apply(kernel), "oj_muon_apply");
  long long r = rows, c = cols, f0 = first, n = count;
  void* arguments[] = {&p, &o, &row_step, &step, &decay, &r, &c, &f0, &n};
  launch(f, count, arguments, stream);
}

void ElementwiseKernels::accumulate(ScalarType grad, CUdeviceptr g, CUdeviceptr acc, int64_t count, CUstream stream) {
  CUfunction f = function(generate_accumulate(grad), "oj_accumulate");
  long long n = count;
  void* arguments[] = {&g, &acc, &n};
  launch(f, count, arguments, stream);
}

void ElementwiseKernels::divide(CUdeviceptr x, float divisor, int64_t count, CUstream stream) {
  CUfunction f = function(generate_divide(), "oj_divide");
  long long n = count;
  void* arguments[] = {&x, &divisor, &n};
  launch(f, count, arguments, stream);
}

void ElementwiseKernels::convert(ScalarType from, CUdeviceptr s, ScalarType to, CUdeviceptr d, int64_t count, CUstream stream) {
  CUfunction f = function(generate_convert(from, to), "oj_convert");
  long long n = count;
  void* arguments[] = {&s, &d, &n};
  launch(f, count, arguments, stream);
}

void ElementwiseKernels::adamw(const AdamWKernel& kernel, CUdeviceptr g, CUdeviceptr m, CUdeviceptr v, CUdeviceptr p, double beta1, double beta2,
                               double lr, double bias1, double bias2, double eps, double scale, double decay, int64_t count, CUstream stream) {
  CUfunction f = function(generate_adamw(kernel), "oj_adamw");
  long long n = count;
  void* arguments[] = {&g, &m, &v, &p, &beta1, &beta2, &lr, &bias1, &bias2, &eps, &scale, &decay, &n};
  launch(f, count, arguments, stream);
}

double ElementwiseKernels::sum_squares(CUdeviceptr x, int64_t count, CUstream stream) {
  if (count <= 0) return 0.0;
  CUfunction f = function(generate_sum_squares(), "oj_sum_squares");
  const Device& device = Device::get();
  {
    std::lock_guard<std::mutex> lock(mutex_);
    if (!partials_) check(device.api().cuMemAlloc(&partials_, static_cast<size_t>(most_threads()) * sizeof(double)), "cuMemAlloc(sum of squares partials)");
  }
  long long n = count;
  CUdeviceptr partials = partials_;
  void* arguments[] = {&x, &partials, &n};
  const int64_t threads = launch(f, count, arguments, stream);
  std::vector<double> host(static_cast<size_t>(threads));
  check(device.api().cuMemcpyDtoHAsync(host.data(), partials, host.size() * sizeof(double), stream), "cuMemcpyDtoHAsync(sum of squares)");
  check(device.api().cuStreamSynchronize(stream), "cuStreamSynchronize");
  double sum = 0.0;
  for (double partial : host) sum += partial;
  return sum;
}

void ElementwiseKernels::nonfinite(ScalarType grad, CUdeviceptr g, CUdeviceptr flag, int64_t count, CUstream stream) {
  CUfunction f = function(generate_nonfinite_check(grad), "oj_nonfinite");
  long long n = count;
  void* arguments[] = {&g, &flag, &n};
  launch(f, count, arguments, stream);
}

}  // namespace orthojit::cuda
