// A generated CUDA program on the device (see cuda_executable.h).
#include "cuda/cuda_executable.h"

#include <stdexcept>

#include "cuda/hopper_product.h"

namespace orthojit::cuda {
namespace {

int64_t round_up(int64_t value, int64_t multiple) { return (value + multiple - 1) / multiple * multiple; }

// How many CTAs of a persistent launch one SM keeps resident, from the driver's occupancy
// calculator (the kernel's real registers, its shared memory and block size). Zero means the
// kernel cannot run at all with this configuration: refused here, naming why, not at the launch.
int resident_ctas(const DriverApi& api, CUfunction function, const Launch& launch) {
  int resident = 0;
  check(api.cuOccupancyMaxActiveBlocksPerMultiprocessor(&resident, function, launch.block, static_cast<size_t>(launch.dynamic_shared_bytes)),
        "cuOccupancyMaxActiveBlocksPerMultiprocessor(" + launch.kernel + ")");
  if (resident < 1)
    throw std::invalid_argument(launch.kernel + " (" + launch.summary + "): no CTA of " + std::to_string(launch.block) + " threads and " +
                                std::to_string(launch.dynamic_shared_bytes) + " bytes of dynamic shared memory (plus its static shared memory and registers) fits on one SM (the driver's occupancy calculator says 0)");
  return resident;
}

}  // namespace

CudaExecutable::CudaExecutable(CudaProgram program, const NvrtcOutput& compiled) : program_(std::move(program)) {
  const Device& device = Device::get();
  device.make_current();
  const DriverApi& api = device.api();
  std::vector<char> image = compiled.image;
  if (compiled.arch.rfind("compute_", 0) == 0) image.push_back('\0');  // PTX is loaded as a C string
  check(api.cuModuleLoadData(&module_, image.data()), "cuModuleLoadData (" + compiled.arch + " image on " + device.info().describe() + ")");
  for (const Launch& launch : program_.launches) {
    // The hardware's grid limits: x up to 2^31 - 1, y and z up to 65535 (the batch is grid.z in
    // the per-op kernels: larger batches must be split by the caller).
    if (launch.grid[0] < 1 || launch.grid[0] > 2147483647 || launch.grid[1] < 1 || launch.grid[1] > 65535 || launch.grid[2] < 1 || launch.grid[2] > 65535)
      throw std::invalid_argument(launch.kernel + ": grid " + std::to_string(launch.grid[0]) + "x" + std::to_string(launch.grid[1]) + "x" +
                                  std::to_string(launch.grid[2]) + " exceeds the CUDA limits (x < 2^31, y and z <= 65535; a batch above 65535 must be split)");
    CUfunction function = nullptr;
    check(api.cuModuleGetFunction(&function, module_, launch.kernel.c_str()), "cuModuleGetFunction(" + launch.kernel + ")");
    if (launch.dynamic_shared_bytes > 48 * 1024) {
      if (launch.dynamic_shared_bytes > device.info().max_shared_per_block_optin)
        throw std::invalid_argument(launch.kernel + " needs " + std::to_string(launch.dynamic_shared_bytes) + " bytes of shared memory; " +
                                    device.info().name + " allows " + std::to_string(device.info().max_shared_per_block_optin) + " per block");
      check(api.cuFuncSetAttribute(function, CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES, launch.dynamic_shared_bytes),
            "cuFuncSetAttribute(" + launch.kernel + ", max dynamic shared memory)");
    }
    functions_.push_back(function);
    resident_per_sm_.push_back(launch.persistent ? resident_ctas(api, function, launch) : 1);
  }
  int64_t bytes = 0;
  for (int64_t buffer : program_.buffer_bytes) {
    buffer_offsets_.push_back(bytes);
    bytes = round_up(bytes + buffer, 256);
  }
  partials_offset_ = bytes;
  bytes = round_up(bytes + program_.norm_partials_bytes, 256);
  step_args_offset_ = bytes;
  bytes += program_.step_args_bytes;
  workspace_ = DeviceBuffer(bytes);
  for (const Launch& launch : program_.launches) {
    std::vector<EncodedMap> maps;
    for (const Launch::TensorMapArg& argument : launch.tensor_maps) {
      if (argument.slot.kind != Slot::Kind::Buffer || argument.slot.buffer < 0)
        throw std::logic_error(launch.summary + ": a tensor map over something other than a planned buffer");
      const CUdeviceptr base = workspace_.get() + static_cast<CUdeviceptr>(buffer_offsets_.at(static_cast<size_t>(argument.slot.buffer)));
      maps.push_back({encode_tensor_map(argument.request, base)});
    }
    tensor_maps_.push_back(std::move(maps));
  }
}

CudaExecutable::~CudaExecutable() {
  if (!module_) return;
  Device::get().make_current_quietly();
  Device::get().api().cuModuleUnload(module_);
}

void CudaExecutable::run_device(CUdeviceptr input, CUdeviceptr output, CUstream stream) const {
  if (program_.muon_step) throw std::invalid_argument("this CUDA program is a Muon step: run it with run_muon_step");
  launch_all(input, output, stream);
}

void CudaExecutable::run_muon_step(const std::vector<ir::MuonStepMatrix>& matrices, CUstream stream) const {
  upload_step_arguments(matrices, stream);
  launch_all(0, 0, stream);
}

void CudaExecutable::upload_step_arguments(const std::vector<ir::MuonStepMatrix>& matrices, CUstream stream) const {
  if (!program_.muon_step) throw std::invalid_argument("this CUDA program is an orthogonalizer, not a Muon step");
  if (static_cast<int64_t>(matrices.size()) != program_.batch)
    throw std::invalid_argument("run_muon_step: " + std::to_string(matrices.size()) + " matrices for a step compiled for " + std::to_string(program_.batch));
  const Device& device = Device::get();
  device.make_current();
  // From pageable memory the driver stages the copy before returning, so the host words may be
  // rewritten by the next step while this one is still queued.
  const std::vector<uint64_t> words = ir::pack_muon_step_arguments(matrices);
  check(device.api().cuMemcpyHtoDAsync(workspace_.get() + static_cast<CUdeviceptr>(step_args_offset_), words.data(), words.size() * 8, stream),
        "cuMemcpyHtoDAsync (the Muon step's arguments)");
}

void CudaExecutable::launch_all(CUdeviceptr input, CUdeviceptr output, CUstream stream) const {
  const Device& device = Device::get();
  device.make_current();
  std::vector<CUdeviceptr> pointers;
  std::vector<void*> parameters;
  for (size_t index = 0; index < program_.launches.size(); ++index) {
    const Launch& launch = program_.launches[index];
    pointers.clear();
    for (const Slot& slot : launch.args) {
      switch (slot.kind) {
        case Slot::Kind::Input: pointers.push_back(input); break;
        case Slot::Kind::Output: pointers.push_back(output); break;
        case Slot::Kind::NormPartials: pointers.push_back(workspace_.get() + static_cast<CUdeviceptr>(partials_offset_)); break;
        case Slot::Kind::StepArgs: pointers.push_back(workspace_.get() + static_cast<CUdeviceptr>(step_args_offset_)); break;
        case Slot::Kind::Buffer:
          // A missing operand (a product without C) is passed as a null pointer the kernel ignores.
          pointers.push_back(slot.buffer < 0 ? 0 : workspace_.get() + static_cast<CUdeviceptr>(buffer_offsets_.at(static_cast<size_t>(slot.buffer))));
          break;
      }
    }
    parameters.clear();
    for (const EncodedMap& map : tensor_maps_[index]) parameters.push_back(const_cast<CUtensorMap*>(&map.map));
    for (CUdeviceptr& pointer : pointers) parameters.push_back(&pointer);
    check(device.api().cuLaunchKernel(functions_[index], static_cast<unsigned>(launch.ctas(device.info().multiprocessors, resident_per_sm_[index])), static_cast<unsigned>(launch.grid[1]),
                                      static_cast<unsigned>(launch.grid[2]), static_cast<unsigned>(launch.block), 1, 1,
                                      static_cast<unsigned>(launch.dynamic_shared_bytes), stream, parameters.data(), nullptr),
          "cuLaunchKernel(" + launch.summary + ")");
    if (synchronize_each_launch())
      check(device.api().cuStreamSynchronize(stream), "running " + launch.kernel + " (" + launch.summary + "; ORTHOJIT_CUDA_SYNC_LAUNCHES=1 waits for each launch)");
  }
}

void CudaExecutable::run(const float* input, float* output) const {
  if (program_.muon_step) throw std::invalid_argument("this CUDA program is a Muon step: run it with run_muon_step");
  const Device& device = Device::get();
  device.make_current();
  if (host_input_.bytes() != input_bytes()) host_input_ = DeviceBuffer(input_bytes());
  if (host_output_.bytes() != output_bytes()) host_output_ = DeviceBuffer(output_bytes());
  host_input_.upload(input, input_bytes());
  launch_all(host_input_.get(), host_output_.get(), nullptr);
  check(device.api().cuCtxSynchronize(), "running " + std::to_string(program_.launches.size()) + " kernels");
  host_output_.download(output, output_bytes());
}

}  // namespace orthojit::cuda
