// Newton–Schulz as cuBLASLt matmuls (see cublaslt_newton_schulz.h). API facts from NVIDIA's
// cuBLAS documentation, cuBLASLt API section: cublasLtMatmul computes D = α·op(A)·op(B) + β·C
// with separate C and D (in place only as C == D with the same layout; D must not alias A or B);
// a matrix layout describes the stored matrix (before op), column-major by default, with its
// leading dimension, CUBLASLT_MATRIX_LAYOUT_BATCH_COUNT and ..._STRIDED_BATCH_OFFSET (elements);
// cublasLtMatmulAlgoGetHeuristic returns algorithms ordered by increasing estimated compute
// time, each with the workspace it needs, filtered by the preference's maximum workspace and the
// minimum alignments of A, B, C and D.
#include "cuda/cublaslt_newton_schulz.h"

#include <cublasLt.h>
#include <dlfcn.h>

#include <algorithm>
#include <cstdlib>
#include <map>
#include <mutex>
#include <stdexcept>

#include "cuda/baseline_kernels.h"

namespace orthojit::cuda {
namespace {

#define ORTHOJIT_STRINGIFY_EXPANDED(x) ORTHOJIT_STRINGIFY(x)
#define ORTHOJIT_STRINGIFY(x) #x

#define ORTHOJIT_CUBLASLT_FUNCTIONS(X)  \
  X(cublasLtCreate)                     \
  X(cublasLtDestroy)                    \
  X(cublasLtGetVersion)                 \
  X(cublasLtGetStatusString)            \
  X(cublasLtMatmulDescCreate)           \
  X(cublasLtMatmulDescDestroy)          \
  X(cublasLtMatmulDescSetAttribute)     \
  X(cublasLtMatrixLayoutCreate)         \
  X(cublasLtMatrixLayoutDestroy)        \
  X(cublasLtMatrixLayoutSetAttribute)   \
  X(cublasLtMatmulPreferenceCreate)     \
  X(cublasLtMatmulPreferenceDestroy)    \
  X(cublasLtMatmulPreferenceSetAttribute) \
  X(cublasLtMatmulAlgoGetHeuristic)     \
  X(cublasLtMatmulAlgoConfigGetAttribute) \
  X(cublasLtMatmul)

struct LtApi {
#define ORTHOJIT_DECLARE_POINTER(name) decltype(&::name) name = nullptr;
  ORTHOJIT_CUBLASLT_FUNCTIONS(ORTHOJIT_DECLARE_POINTER)
#undef ORTHOJIT_DECLARE_POINTER
  std::string reason;  // empty when loaded
};

// dlopen's message for each failed candidate, or the handle of the first that opened.
void* open_first(const std::vector<std::string>& candidates, std::string* failures) {
  for (const std::string& name : candidates) {
    if (void* handle = dlopen(name.c_str(), RTLD_NOW | RTLD_LOCAL)) return handle;
    const char* error = dlerror();
    *failures += std::string(failures->empty() ? "" : "; ") + (error ? error : name + ": not loadable");
  }
  return nullptr;
}

std::string not_found_reason(const std::vector<std::string>& candidates, const std::string& failures) {
  std::string tried;
  for (const std::string& name : candidates) tried += (tried.empty() ? "" : ", ") + name;
  return "libcublasLt could not be loaded: tried " + tried + " (" + failures +
         "); install the CUDA toolkit's cuBLAS or the pip wheel nvidia-cublas (site-packages/nvidia/cu13/lib) and add its folder to "
         "LD_LIBRARY_PATH, or set ORTHOJIT_CUBLASLT_LIBRARY to the library's path";
}

const LtApi& lt() {
  static const LtApi api = [] {
    LtApi loaded;
    const std::vector<std::string> candidates = CublasLtNewtonSchulz::library_candidates();
    std::string failures;
    void* handle = open_first(candidates, &failures);
    if (!handle) {
      loaded.reason = not_found_reason(candidates, failures);
      return loaded;
    }
    std::string missing;
#define ORTHOJIT_LOAD_SYMBOL(name)                                                                         \
  loaded.name = reinterpret_cast<decltype(loaded.name)>(dlsym(handle, ORTHOJIT_STRINGIFY_EXPANDED(name))); \
  if (!loaded.name) missing += std::string(missing.empty() ? "" : ", ") + ORTHOJIT_STRINGIFY_EXPANDED(name);
    ORTHOJIT_CUBLASLT_FUNCTIONS(ORTHOJIT_LOAD_SYMBOL)
#undef ORTHOJIT_LOAD_SYMBOL
    if (!missing.empty()) loaded.reason = "the libcublasLt that was loaded lacks " + missing + " (cuBLAS 12 or newer is needed)";
    return loaded;
  }();
  return api;
}

void check_lt(cublasStatus_t status, const std::string& what) {
  if (status == CUBLAS_STATUS_SUCCESS) return;
  throw std::runtime_error(what + ": " + lt().cublasLtGetStatusString(status));
}

// The largest power of two (<= 256) dividing `bytes`: the alignment every matrix of a strided
// batch has when the base pointer is 256-byte aligned (cuMemAlloc's).
uint32_t alignment_of(int64_t bytes) {
  uint32_t alignment = 256;
  while (alignment > 2 && bytes % alignment != 0) alignment /= 2;
  return alignment;
}

struct Layout {
  cublasLtMatrixLayout_t handle = nullptr;
  uint32_t alignment = 256;
};

// A column-major rows x cols layout, `batch` matrices `rows·cols` elements apart.
Layout make_layout(cudaDataType type, const LtBuffer& buffer, int64_t batch) {
  Layout layout;
  check_lt(lt().cublasLtMatrixLayoutCreate(&layout.handle, type, static_cast<uint64_t>(buffer.rows), static_cast<uint64_t>(buffer.cols), buffer.rows),
           "cublasLtMatrixLayoutCreate(" + buffer.name + ")");
  const int32_t count = static_cast<int32_t>(batch);
  const int64_t stride = buffer.rows * buffer.cols;
  check_lt(lt().cublasLtMatrixLayoutSetAttribute(layout.handle, CUBLASLT_MATRIX_LAYOUT_BATCH_COUNT, &count, sizeof count), "BATCH_COUNT");
  check_lt(lt().cublasLtMatrixLayoutSetAttribute(layout.handle, CUBLASLT_MATRIX_LAYOUT_STRIDED_BATCH_OFFSET, &stride, sizeof stride), "STRIDED_BATCH_OFFSET");
  layout.alignment = batch > 1 ? alignment_of(stride * 2) : 256;
  return layout;
}

// The heuristic's choice per (shape, transposition, type, C present, alignment, batch, device),
// queried once per process.
std::mutex algorithm_mutex;
std::map<std::string, cublasLtMatmulHeuristicResult_t>& algorithm_cache() {
  static std::map<std::string, cublasLtMatmulHeuristicResult_t> cache;
  return cache;
}

constexpr uint64_t kWorkspaceBytes = 32ull << 20;  // NVIDIA's recommendation for Hopper (cuBLAS documentation, cublasSetWorkspace)

}  // namespace

struct CublasLtNewtonSchulz::State {
  int64_t batch = 1, rows = 0, cols = 0;
  ScalarType storage = ScalarType::BF16;
  LtSchedule schedule;
  dsl::Normalization normalization;
  NamedSources headers;
  cublasLtHandle_t handle = nullptr;
  std::vector<DeviceBuffer> buffers;
  DeviceBuffer workspace, sums, staging_input, staging_output;
  struct Prepared {
    cublasLtMatmulDesc_t desc = nullptr;
    Layout a, b, c, d;
    cublasLtMatmulHeuristicResult_t choice{};
    float alpha = 1.0f, beta = 0.0f;
  };
  std::vector<Prepared> prepared;  // per op (AddIdentity: unused)
};

std::vector<std::string> CublasLtNewtonSchulz::library_candidates() {
  std::vector<std::string> candidates;
  if (const char* path = std::getenv("ORTHOJIT_CUBLASLT_LIBRARY"); path && *path) candidates.push_back(path);
  for (const char* name : {"libcublasLt.so.13", "libcublasLt.so.12", "libcublasLt.so"}) candidates.push_back(name);
#ifdef ORTHOJIT_CUDA_LIBRARY_DIR
  for (const char* name : {"libcublasLt.so.13", "libcublasLt.so.12"}) candidates.push_back(std::string(ORTHOJIT_CUDA_LIBRARY_DIR) + "/" + name);
#endif
  return candidates;
}

std::string CublasLtNewtonSchulz::probe_library(const std::vector<std::string>& candidates) {
  std::string failures;
  void* handle = open_first(candidates, &failures);
  if (!handle) return not_found_reason(candidates, failures);
  dlclose(handle);
  return "";
}

std::string CublasLtNewtonSchulz::library_reason() { return lt().reason; }

size_t CublasLtNewtonSchulz::library_version() { return lt().reason.empty() ? lt().cublasLtGetVersion() : 0; }

std::string CublasLtNewtonSchulz::unavailable_reason() {
  if (!lt().reason.empty()) return lt().reason;
  std::string reason;
  if (!driver(&reason)) return "cuBLASLt is loaded but there is no usable CUDA device: " + reason;
  try {
    Device::get();
  } catch (const std::exception& error) {
    return std::string("cuBLASLt is loaded but the CUDA device is unusable: ") + error.what();
  }
  return "";
}

CublasLtNewtonSchulz::CublasLtNewtonSchulz(int64_t batch, int64_t rows, int64_t cols, ScalarType storage, LtSchedule schedule,
                                           dsl::Normalization normalization, const NamedSources& device_headers)
    : state_(std::make_unique<State>()) {
  if (storage != ScalarType::BF16 && storage != ScalarType::F16)
    throw std::invalid_argument("the cuBLASLt Newton–Schulz baseline runs bf16 or f16 storage, not " + std::string(to_string(storage)));
  if (batch < 1 || rows < 1 || cols < 1) throw std::invalid_argument("the cuBLASLt Newton–Schulz baseline needs a positive batch and shape");
  if (schedule.m != std::min(rows, cols) || schedule.n != std::max(rows, cols) || schedule.transpose != (rows > cols))
    throw std::invalid_argument("the cuBLASLt schedule was built for another shape");
  if (const std::string reason = unavailable_reason(); !reason.empty()) throw std::runtime_error(reason);
  State& s = *state_;
  s.batch = batch;
  s.rows = rows;
  s.cols = cols;
  s.storage = storage;
  s.schedule = std::move(schedule);
  s.normalization = normalization;
  s.headers = device_headers;
  const Device& device = Device::get();
  device.make_current();
  const LtApi& api = lt();
  check_lt(api.cublasLtCreate(&s.handle), "cublasLtCreate");
  for (const LtBuffer& buffer : s.schedule.buffers) s.buffers.emplace_back(batch * buffer.rows * buffer.cols * 2);
  for (size_t i = 0; i < s.schedule.buffers.size(); ++i)
    if (s.schedule.buffers[i].identity) {
      const int64_t m = s.schedule.buffers[i].rows;
      // 1.0 is 0x3F80 in bf16 and 0x3C00 in f16.
      std::vector<unsigned short> identity(static_cast<size_t>(batch * m * m), 0);
      for (int64_t z = 0; z < batch; ++z)
        for (int64_t d = 0; d < m; ++d) identity[static_cast<size_t>(z * m * m + d * m + d)] = storage == ScalarType::F16 ? 0x3C00 : 0x3F80;
      s.buffers[i].upload(identity.data(), batch * m * m * 2);
    }
  for (size_t i = 0; i < s.schedule.buffers.size(); ++i)
    if (!s.schedule.buffers[i].identity)
      check(device.api().cuMemsetD8Async(s.buffers[i].get(), 0, static_cast<size_t>(s.buffers[i].bytes()), nullptr), "cuMemsetD8Async");
  s.workspace = DeviceBuffer(static_cast<int64_t>(kWorkspaceBytes));
  auto pointer = [&](int buffer) { return reinterpret_cast<void*>(s.buffers[static_cast<size_t>(buffer)].get()); };
  s.sums = DeviceBuffer(baseline_norm_scratch_bytes(batch));
  const cudaDataType type = storage == ScalarType::F16 ? CUDA_R_16F : CUDA_R_16BF;
  cublasLtMatmulPreference_t preference = nullptr;
  check_lt(api.cublasLtMatmulPreferenceCreate(&preference), "cublasLtMatmulPreferenceCreate");
  check_lt(api.cublasLtMatmulPreferenceSetAttribute(preference, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &kWorkspaceBytes, sizeof kWorkspaceBytes),
           "MAX_WORKSPACE_BYTES");
  try {
    for (const LtOp& op : s.schedule.ops) {
      State::Prepared prepared;
      if (op.kind == LtOp::Kind::Matmul) {
        const cublasOperation_t transa = op.transa ? CUBLAS_OP_T : CUBLAS_OP_N, transb = op.transb ? CUBLAS_OP_T : CUBLAS_OP_N;
        check_lt(api.cublasLtMatmulDescCreate(&prepared.desc, CUBLAS_COMPUTE_32F, CUDA_R_32F), "cublasLtMatmulDescCreate");
        check_lt(api.cublasLtMatmulDescSetAttribute(prepared.desc, CUBLASLT_MATMUL_DESC_TRANSA, &transa, sizeof transa), "TRANSA");
        check_lt(api.cublasLtMatmulDescSetAttribute(prepared.desc, CUBLASLT_MATMUL_DESC_TRANSB, &transb, sizeof transb), "TRANSB");
        const cublasLtEpilogue_t epilogue = CUBLASLT_EPILOGUE_DEFAULT;
        check_lt(api.cublasLtMatmulDescSetAttribute(prepared.desc, CUBLASLT_MATMUL_DESC_EPILOGUE, &epilogue, sizeof epilogue), "EPILOGUE");
        const auto& buffers = s.schedule.buffers;
        prepared.a = make_layout(type, buffers[static_cast<size_t>(op.a)], batch);
        prepared.b = make_layout(type, buffers[static_cast<size_t>(op.b)], batch);
        prepared.d = make_layout(type, buffers[static_cast<size_t>(op.d)], batch);
        prepared.c = make_layout(type, buffers[static_cast<size_t>(op.c >= 0 ? op.c : op.d)], batch);
        prepared.alpha = static_cast<float>(op.alpha);
        prepared.beta = static_cast<float>(op.beta);
        const std::string key = std::to_string(device.info().ordinal) + " " + std::to_string(type) + " " + (op.transa ? "T" : "N") + (op.transb ? "T" : "N") +
                                " " + std::to_string(op.m) + "x" + std::to_string(op.n) + "x" + std::to_string(op.k) + " b" + std::to_string(batch) +
                                (op.c >= 0 ? " C" : " -") + " align " + std::to_string(std::min({prepared.a.alignment, prepared.b.alignment, prepared.c.alignment, prepared.d.alignment}));
        std::lock_guard<std::mutex> lock(algorithm_mutex);
        auto found = algorithm_cache().find(key);
        if (found == algorithm_cache().end()) {
          const uint32_t alignments[4] = {prepared.a.alignment, prepared.b.alignment, prepared.c.alignment, prepared.d.alignment};
          const cublasLtMatmulPreferenceAttributes_t which[4] = {CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES,
                                                                 CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES};
          for (int i = 0; i < 4; ++i)
            check_lt(api.cublasLtMatmulPreferenceSetAttribute(preference, which[i], &alignments[i], sizeof alignments[i]), "MIN_ALIGNMENT");
          cublasLtMatmulHeuristicResult_t results[8] = {};
          int returned = 0;
          check_lt(api.cublasLtMatmulAlgoGetHeuristic(s.handle, prepared.desc, prepared.a.handle, prepared.b.handle, prepared.c.handle, prepared.d.handle,
                                                      preference, 8, results, &returned),
                   "cublasLtMatmulAlgoGetHeuristic (" + op.what + ")");
          std::vector<cublasLtMatmulHeuristicResult_t> usable;
          for (int i = 0; i < returned; ++i)
            if (results[i].state == CUBLAS_STATUS_SUCCESS && results[i].workspaceSize <= kWorkspaceBytes) usable.push_back(results[i]);
          if (usable.empty()) throw std::runtime_error("cublasLtMatmulAlgoGetHeuristic offers no algorithm for " + op.what + " (" + key + ")");
          // The best of the returned ones: the heuristic's order, unless timing them on this
          // product (its buffers, zeroed above) finds a faster one; ORTHOJIT_CUBLASLT_ALGO=heuristic
          // takes the heuristic's first without timing.
          size_t chosen = 0;
          const char* mode = std::getenv("ORTHOJIT_CUBLASLT_ALGO");
          if (usable.size() > 1 && !(mode && std::string(mode) == "heuristic")) {
            EventTimer timer;
            float best_ms = 0;
            bool timed = false;
            for (size_t candidate = 0; candidate < usable.size(); ++candidate) {
              auto launch = [&] {
                return api.cublasLtMatmul(s.handle, prepared.desc, &prepared.alpha, pointer(op.a), prepared.a.handle, pointer(op.b), prepared.b.handle,
                                          &prepared.beta, pointer(op.c >= 0 ? op.c : op.d), prepared.c.handle, pointer(op.d), prepared.d.handle,
                                          &usable[candidate].algo, reinterpret_cast<void*>(s.workspace.get()), kWorkspaceBytes, nullptr);
              };
              if (launch() != CUBLAS_STATUS_SUCCESS) continue;  // warm-up; an algorithm that refuses to run is skipped
              float fastest = 0;
              for (int repeat = 0; repeat < 3; ++repeat) {
                timer.start(nullptr);
                launch();
                const float ms = timer.stop(nullptr);
                fastest = repeat == 0 ? ms : std::min(fastest, ms);
              }
              // Ties (within 3%) go to the earlier in the heuristic's order.
              if (!timed || fastest < best_ms * 0.97f) {
                chosen = candidate;
                best_ms = fastest;
                timed = true;
              }
            }
          }
          found = algorithm_cache().emplace(key, usable[chosen]).first;
        }
        prepared.choice = found->second;
      }
      s.prepared.push_back(prepared);
    }
  } catch (...) {
    api.cublasLtMatmulPreferenceDestroy(preference);
    throw;
  }
  api.cublasLtMatmulPreferenceDestroy(preference);
  baseline_kernels(s.headers);
}

CublasLtNewtonSchulz::~CublasLtNewtonSchulz() {
  if (!state_) return;
  Device::get().make_current_quietly();
  const LtApi& api = lt();
  for (State::Prepared& prepared : state_->prepared) {
    if (prepared.desc) api.cublasLtMatmulDescDestroy(prepared.desc);
    for (Layout* layout : {&prepared.a, &prepared.b, &prepared.c, &prepared.d})
      if (layout->handle) api.cublasLtMatrixLayoutDestroy(layout->handle);
  }
  if (state_->handle) api.cublasLtDestroy(state_->handle);
}

const LtSchedule& CublasLtNewtonSchulz::schedule() const { return state_->schedule; }

std::string CublasLtNewtonSchulz::algorithms() const {
  const State& s = *state_;
  std::string text;
  for (size_t i = 0; i < s.schedule.ops.size(); ++i) {
    if (s.schedule.ops[i].kind != LtOp::Kind::Matmul) continue;
    const cublasLtMatmulAlgo_t& algo = s.prepared[i].choice.algo;
    int32_t id = -1, tile = -1, stages = -1;
    size_t written = 0;
    lt().cublasLtMatmulAlgoConfigGetAttribute(&algo, CUBLASLT_ALGO_CONFIG_ID, &id, sizeof id, &written);
    lt().cublasLtMatmulAlgoConfigGetAttribute(&algo, CUBLASLT_ALGO_CONFIG_TILE_ID, &tile, sizeof tile, &written);
    lt().cublasLtMatmulAlgoConfigGetAttribute(&algo, CUBLASLT_ALGO_CONFIG_STAGES_ID, &stages, sizeof stages, &written);
    text += s.schedule.ops[i].what + ": algo " + std::to_string(id) + " tile " + std::to_string(tile) + " stages " + std::to_string(stages) + " ws " +
            std::to_string(s.prepared[i].choice.workspaceSize) + " B\n";
  }
  return text;
}

void CublasLtNewtonSchulz::run_device(CUdeviceptr input, CUdeviceptr output, CUstream stream) const {
  const State& s = *state_;
  const Device& device = Device::get();
  device.make_current();
  const BaselineKernels& kernels = baseline_kernels(s.headers);
  const bool f16 = s.storage == ScalarType::F16;
  const LtSchedule& schedule = s.schedule;
  auto pointer = [&](int buffer) { return reinterpret_cast<void*>(s.buffers[static_cast<size_t>(buffer)].get()); };
  enqueue_baseline_normalize(kernels, input, s.batch, s.rows, s.cols, f16, s.normalization, s.sums.get(), s.buffers[static_cast<size_t>(schedule.input)].get(),
                             stream);
  for (size_t i = 0; i < schedule.ops.size(); ++i) {
    const LtOp& op = schedule.ops[i];
    if (op.kind == LtOp::Kind::AddIdentity) {
      enqueue_baseline_add_identity(kernels, s.buffers[static_cast<size_t>(op.d)].get(), s.batch, op.m, op.gamma, f16, stream);
      continue;
    }
    const State::Prepared& p = s.prepared[i];
    check_lt(lt().cublasLtMatmul(s.handle, p.desc, &p.alpha, pointer(op.a), p.a.handle, pointer(op.b), p.b.handle, &p.beta, pointer(op.c >= 0 ? op.c : op.d),
                                 p.c.handle, pointer(op.d), p.d.handle, &p.choice.algo, reinterpret_cast<void*>(s.workspace.get()), kWorkspaceBytes,
                                 reinterpret_cast<cudaStream_t>(stream)),
             "cublasLtMatmul (" + op.what + ")");
  }
  enqueue_baseline_output(kernels, s.buffers[static_cast<size_t>(schedule.output)].get(), s.batch, s.rows, s.cols, f16, output, stream);
}

void CublasLtNewtonSchulz::run(const float* input, float* output) const {
  State& s = *state_;
  const int64_t bytes = s.batch * s.rows * s.cols * 4;
  if (s.staging_input.bytes() != bytes) s.staging_input = DeviceBuffer(bytes);
  if (s.staging_output.bytes() != bytes) s.staging_output = DeviceBuffer(bytes);
  s.staging_input.upload(input, bytes);
  run_device(s.staging_input.get(), s.staging_output.get(), nullptr);
  check(Device::get().api().cuCtxSynchronize(), "cuBLASLt Newton–Schulz");
  s.staging_output.download(output, bytes);
}

}  // namespace orthojit::cuda
