// Runs a generated CUDA program on the CPU (see cuda_host_emulator.h).
#include "cuda_host_emulator.h"

#include <dlfcn.h>

#include <cstdlib>
#include <cstring>
#include <fstream>
#include <set>
#include <sstream>
#include <stdexcept>

#include "emulated_device_headers.h"

namespace orthojit::cuda::emulation {
namespace {

constexpr int64_t kAlignment = 256;  // CudaExecutable's buffer alignment
constexpr int64_t kRedZone = 4096;   // poisoned bytes after each allocation
constexpr unsigned char kPoison = 0xff;

int64_t round_up(int64_t value, int64_t multiple) { return (value + multiple - 1) / multiple * multiple; }

// `bytes` usable bytes, 256-byte aligned, followed by a red zone; all poisoned.
struct Allocation {
  std::unique_ptr<unsigned char, decltype(&std::free)> data{nullptr, &std::free};
  int64_t bytes = 0;
  explicit Allocation(int64_t size) : bytes(size) {
    const int64_t total = round_up(size + kRedZone, kAlignment);
    data.reset(static_cast<unsigned char*>(std::aligned_alloc(static_cast<size_t>(kAlignment), static_cast<size_t>(total))));
    if (!data) throw std::bad_alloc();
    std::memset(data.get(), kPoison, static_cast<size_t>(total));
  }
  unsigned char* get() const { return data.get(); }
};

// Describes the bytes in [begin, end) of `base` that are no longer poison ("" when none).
std::string written(const unsigned char* base, int64_t begin, int64_t end, const std::string& what) {
  int64_t first = -1, count = 0;
  for (int64_t at = begin; at < end; ++at)
    if (base[at] != kPoison) {
      if (first < 0) first = at;
      ++count;
    }
  if (count == 0) return "";
  return what + ": " + std::to_string(count) + " byte(s) written, the first at byte " + std::to_string(first - begin) + " of it\n";
}

std::string shell_quote(const std::string& text) {
  std::string quoted = "'";
  for (char c : text) quoted += c == '\'' ? std::string("'\\''") : std::string(1, c);
  return quoted + "'";
}

using Trampoline = int (*)(void* const* args, int count, const unsigned* grid, unsigned block);

}  // namespace

struct HostEmulator::Memory {
  Allocation input, output, workspace;
  std::vector<int64_t> buffer_offsets;  // into the workspace, per planned buffer
  int64_t partials_offset = 0;
  Memory(int64_t input_bytes, int64_t output_bytes, int64_t workspace_bytes) : input(input_bytes), output(output_bytes), workspace(workspace_bytes) {}
};

bool host_compiler_available() { return std::system("command -v c++ > /dev/null 2>&1") == 0; }

HostEmulator::HostEmulator(CudaProgram program, std::filesystem::path directory) : program_(std::move(program)), directory_(std::move(directory)) {
  std::filesystem::create_directories(directory_);
  // The generated source includes "orthojit_device.cuh" (and the product tiles' headers): the real
  // headers over the emulated primitives. The fused kernel's only shared memory is `extern __shared__`.
  write_emulated_device_headers(directory_, program_.source.find("extern __shared__") != std::string::npos);
  std::ofstream(directory_ / "kernel.cu") << program_.source;
  // Products on the sm_90a tile get a function that fills an emulated tensor map.
  const bool hopper = program_.source.find("orthojit_hopper_product.cuh") != std::string::npos;
  std::ostringstream trampolines;
  trampolines << (hopper ? "#include <new>\n" : "") << "#include \"kernel.cu\"\n\n";
  if (hopper)
    trampolines << "extern \"C\" __attribute__((visibility(\"default\"))) unsigned oj_emu_tensor_map_size() { return sizeof(oj::hopper::TensorMap); }\n"
                << "extern \"C\" __attribute__((visibility(\"default\"))) void oj_emu_tensor_map(void* storage, const void* base, unsigned long long inner,\n"
                << "    unsigned long long outer, unsigned long long matrices, unsigned long long row_bytes, unsigned long long matrix_bytes,\n"
                << "    unsigned box_inner, unsigned box_outer, unsigned element_bytes) {\n"
                << "  auto* map = new (storage) oj::hopper::TensorMap;\n"
                << "  map->base = static_cast<unsigned char*>(const_cast<void*>(base));\n  map->element_bytes = element_bytes;\n"
                << "  map->inner = inner;\n  map->outer = outer;\n"
                << "  map->row_elements = row_bytes / element_bytes;\n  map->matrices = matrices;\n  map->matrix_elements = matrix_bytes / element_bytes;\n"
                << "  map->box_inner = box_inner;\n  map->box_outer = box_outer;\n}\n\n";
  std::set<std::string> kernels;
  for (const Launch& launch : program_.launches)
    if (kernels.insert(launch.kernel).second)
      trampolines << "extern \"C\" __attribute__((visibility(\"default\"))) int oj_emu_launch_" << launch.kernel
                  << "(void* const* args, int count, const unsigned* grid, unsigned block) {\n  return oj_emu::launch(&" << launch.kernel
                  << ", args, count, grid, block);\n}\n";
  std::ofstream(directory_ / "trampolines.cpp") << trampolines.str();
  // -O1: fast enough to build, and threads stay cheap. -fno-strict-aliasing: the kernels move
  // 16-bit values as u32 and uint4 (fine in CUDA, type punning in C++). -ffp-contract=off: the
  // same f32 arithmetic on every host. Hidden visibility (the trampolines excepted): each
  // program's library keeps its own emulation state (gridDim, the barriers are local symbols, not
  // shared between libraries loaded side by side) and its calls bind to its own kernels.
  const std::string command = "cd " + shell_quote(directory_.string()) +
                              " && c++ -std=c++20 -O1 -fPIC -shared -pthread -w -fno-strict-aliasing -ffp-contract=off -fvisibility=hidden"
                              " -I. -o kernels.so trampolines.cpp > build.log 2>&1";
  if (std::system(command.c_str()) != 0) {
    std::ifstream log(directory_ / "build.log");
    std::ostringstream text;
    text << log.rdbuf();
    throw std::runtime_error("host emulation: compiling the generated source failed (kept in " + directory_.string() + "):\n" + text.str().substr(0, 8000));
  }
  library_ = dlopen((directory_ / "kernels.so").c_str(), RTLD_NOW | RTLD_LOCAL);
  if (!library_) throw std::runtime_error(std::string("host emulation: dlopen: ") + dlerror());
  if (hopper) {
    void* size = dlsym(library_, "oj_emu_tensor_map_size");
    void* fill = dlsym(library_, "oj_emu_tensor_map");
    if (!size || !fill) throw std::runtime_error("host emulation: no tensor map functions in the library");
    std::memcpy(&tensor_map_size_, &size, sizeof size);  // dlsym's object pointers to the functions they name
    std::memcpy(&tensor_map_fill_, &fill, sizeof fill);
    if (tensor_map_size_() > sizeof(TensorMapStorage)) throw std::runtime_error("host emulation: the emulated tensor map is larger than 128 bytes");
  }
  for (const Launch& launch : program_.launches) {
    void* symbol = dlsym(library_, ("oj_emu_launch_" + launch.kernel).c_str());
    if (!symbol) throw std::runtime_error("host emulation: no trampoline for " + launch.kernel);
    trampolines_.push_back(symbol);
  }
}

HostEmulator::~HostEmulator() {
  if (library_) dlclose(library_);
  std::error_code ignored;
  std::filesystem::remove_all(directory_, ignored);
}

void* HostEmulator::address(const Slot& slot) const {
  if (!memory_) return nullptr;
  switch (slot.kind) {
    case Slot::Kind::Input: return memory_->input.get();
    case Slot::Kind::Output: return memory_->output.get();
    case Slot::Kind::NormPartials: return memory_->workspace.get() + memory_->partials_offset;
    case Slot::Kind::StepArgs: return const_cast<uint64_t*>(step_words_.data());
    case Slot::Kind::Buffer:
      return slot.buffer < 0 ? nullptr : memory_->workspace.get() + memory_->buffer_offsets.at(static_cast<size_t>(slot.buffer));
  }
  return nullptr;
}

HostEmulator::Result HostEmulator::run(const std::vector<float>& input, const Hook& before, const Hook& after) {
  const int64_t input_bytes = program_.batch * program_.input_elements * 4, output_bytes = program_.batch * program_.output_elements * 4;
  if (static_cast<int64_t>(input.size()) * 4 != input_bytes) throw std::invalid_argument("host emulation: the input has the wrong size");
  // The workspace as CudaExecutable allocates it: buffers at 256-byte aligned offsets, then the partials.
  std::vector<int64_t> offsets;
  int64_t bytes = 0;
  for (int64_t buffer : program_.buffer_bytes) {
    offsets.push_back(bytes);
    bytes = round_up(bytes + buffer, kAlignment);
  }
  const int64_t partials_offset = bytes;
  bytes += program_.norm_partials_bytes;
  memory_ = std::make_unique<Memory>(input_bytes, output_bytes, bytes);
  memory_->buffer_offsets = offsets;
  memory_->partials_offset = partials_offset;
  std::memcpy(memory_->input.get(), input.data(), static_cast<size_t>(input_bytes));

  std::vector<void*> args;
  for (size_t index = 0; index < program_.launches.size(); ++index) {
    const Launch& launch = program_.launches[index];
    if (before) before(index);
    args.clear();
    // The tensor maps first (the kernel takes them by value: the trampoline copies them from here),
    // encoded over the slots' addresses as CudaExecutable encodes them on the device.
    std::vector<std::unique_ptr<TensorMapStorage>> maps;
    for (const Launch::TensorMapArg& map : launch.tensor_maps) {
      if (!tensor_map_fill_) throw std::runtime_error("host emulation: " + launch.kernel + " takes tensor maps, but the source has no sm_90a tile");
      maps.push_back(std::make_unique<TensorMapStorage>());
      tensor_map_fill_(maps.back()->bytes, address(map.slot), map.request.dims[0], map.request.dims[1], map.request.dims[2], map.request.row_bytes, map.request.matrix_bytes,
           map.request.box[0], map.request.box[1], map.request.element_bytes);
      args.push_back(maps.back()->bytes);
    }
    for (const Slot& slot : launch.args) args.push_back(address(slot));
    // A persistent kernel runs as kEmulatedMultiprocessors CTAs (fewer than its work items, so each
    // CTA carries its pipeline's phases from one item into the next, as on a device).
    const unsigned grid[3] = {static_cast<unsigned>(launch.ctas(kEmulatedMultiprocessors)), static_cast<unsigned>(launch.grid[1]),
                              static_cast<unsigned>(launch.grid[2])};
    Trampoline trampoline = nullptr;
    static_assert(sizeof trampoline == sizeof trampolines_[index]);
    std::memcpy(&trampoline, &trampolines_[index], sizeof trampoline);  // dlsym's object pointer to the function it names
    if (trampoline(args.data(), static_cast<int>(args.size()), grid, static_cast<unsigned>(launch.block)) != 0)
      throw std::runtime_error("host emulation: " + launch.kernel + " takes a different number of arguments than its launch passes (" +
                               std::to_string(args.size()) + ")");
    if (after) after(index);
  }

  Result result;
  result.output.resize(static_cast<size_t>(program_.batch * program_.output_elements));
  if (output_bytes > 0) std::memcpy(result.output.data(), memory_->output.get(), static_cast<size_t>(output_bytes));
  std::string& errors = result.memory_errors;
  errors += written(memory_->input.get(), input_bytes, input_bytes + kRedZone, "the red zone after the input");
  errors += written(memory_->output.get(), output_bytes, output_bytes + kRedZone, "the red zone after the output");
  errors += written(memory_->workspace.get(), bytes, bytes + kRedZone, "the red zone after the workspace");
  for (size_t b = 0; b < offsets.size(); ++b) {
    const int64_t end = offsets[b] + program_.buffer_bytes[b], next = b + 1 < offsets.size() ? offsets[b + 1] : partials_offset;
    errors += written(memory_->workspace.get(), end, next, "the alignment gap after buf" + std::to_string(b));
  }
  return result;
}

}  // namespace orthojit::cuda::emulation
