// oneDNN products for the vendor-library engine `onednn` (see vendor_gemm.h).
//
// One matmul primitive per product shape (oneDNN's matmul: dst = src·weights with optional output
// scales and post-ops, https://oneapi-src.github.io/oneDNN/v2.6/dev_guide_matmul.html). 16-bit
// operands are passed in place, with their strides, where oneDNN has an optimized matmul for that
// type on this CPU (bf16 from AVX512-BF16/AMX machines on, emulated on AVX512_CORE; f16 on
// AVX512-FP16); elsewhere they are widened to f32 and the f32 matmul runs, as with OpenBLAS.
// Accumulation is f32 either way. The result is f32: an f32 row-major D directly (C copied in and
// added by a sum post-op with scale β, α as the output scale,
// https://oneapi-src.github.io/oneDNN/v2.6/dev_guide_attributes_post_ops.html#sum-post-op),
// otherwise an f32 accumulator followed by the epilogue pass that rounds once to D's type: a bf16
// dst with β and γ applied by oneDNN would round twice, which is not the program's semantics.
#include <dlfcn.h>

#include <array>
#include <cstring>
#include <map>
#include <oneapi/dnnl/dnnl.hpp>
#include <stdexcept>

#include "cpu/aligned_buffer.h"
#include "cpu/build_status.h"
#include "cpu/thread_pool.h"
#include "cpu/vendor_gemm.h"
#include "cpu/vendor_host_loops.h"

namespace orthojit::cpu {
namespace {

using dt = dnnl::memory::data_type;

dt onednn_type(ScalarType type) {
  switch (type) {
    case ScalarType::F32: return dt::f32;
    case ScalarType::BF16: return dt::bf16;
    case ScalarType::F16: return dt::f16;
    case ScalarType::F64: break;
  }
  throw std::logic_error("onednn product: f64 operands are not supported");
}

const dnnl::engine& cpu_engine() {
  static const dnnl::engine engine(dnnl::engine::kind::cpu, 0);
  return engine;
}

// Debian's oneDNN runs on OpenMP (DNNL_CPU_RUNTIME_OMP): the thread count is the calling thread's
// omp_get_max_threads(). libgomp is loaded with libdnnl; looked up at run time so orthojit does not
// link it (and a oneDNN built on another runtime simply keeps its default).
void set_onednn_threads(int threads) {
  using SetThreads = void (*)(int);
  static const auto set = reinterpret_cast<SetThreads>(::dlsym(RTLD_DEFAULT, "omp_set_num_threads"));
  if (set) set(threads);
}

dnnl::memory::desc matrix_desc(int64_t rows, int64_t cols, dt type, int64_t row_stride, int64_t col_stride) {
  return dnnl::memory::desc({rows, cols}, type, {row_stride, col_stride});
}

// The implementation oneDNN picks for a 256³ matmul of `type` operands and f32 output, or "" when it
// has none on this CPU or only its reference loops ("ref:any": scalar code, far slower than
// widening to f32), which do not represent the library.
std::string optimized_matmul(dt type) {
  try {
    const auto md = matrix_desc(256, 256, type, 256, 1), out = matrix_desc(256, 256, dt::f32, 256, 1);
    const dnnl::matmul::primitive_desc pd(dnnl::matmul::desc(md, md, out), cpu_engine());
    const std::string impl = pd.impl_info_str();
    return impl.rfind("ref", 0) == 0 ? "" : impl;
  } catch (const dnnl::error&) {
    return "";
  }
}

const std::string& native_matmul(ScalarType type) {
  static const std::string bf16 = optimized_matmul(dt::bf16), f16 = optimized_matmul(dt::f16), f32 = optimized_matmul(dt::f32);
  return type == ScalarType::BF16 ? bf16 : type == ScalarType::F16 ? f16 : f32;
}

struct Operand {
  void* data = nullptr;
  dnnl::memory::desc desc;
  dt type = dt::f32;
  int64_t row_stride = 0, col_stride = 0;
};

Operand operand_of(const MatrixView& view, bool in_place, AlignedBuffer& scratch, ThreadPool* pool) {
  if (in_place)
    return {view.data, matrix_desc(view.rows, view.cols, onednn_type(view.type), view.row_stride, view.col_stride), onednn_type(view.type), view.row_stride,
            view.col_stride};
  const F32Operand widened = f32_operand(view, scratch, pool);
  const int64_t rs = widened.transposed ? 1 : widened.ld, cs = widened.transposed ? widened.ld : 1;
  return {const_cast<float*>(widened.data), matrix_desc(view.rows, view.cols, dt::f32, rs, cs), dt::f32, rs, cs};
}

using PrimitiveKey = std::array<int64_t, 13>;

int64_t float_bits(float value) {
  int32_t bits = 0;
  std::memcpy(&bits, &value, sizeof bits);
  return bits;
}

// Primitives per thread (a primitive may be executed from several threads, but creating one is
// not free and the map needs no lock this way); bounded, since a tuning run meets many shapes.
dnnl::matmul& cached_matmul(const Operand& a, const Operand& b, int64_t m, int64_t n, int64_t k, int64_t ld, float alpha, bool sum, float beta) {
  thread_local std::map<PrimitiveKey, dnnl::matmul> cache;
  const PrimitiveKey key = {m,           n,           k,           static_cast<int64_t>(a.type), a.row_stride, a.col_stride, static_cast<int64_t>(b.type),
                            b.row_stride, b.col_stride, ld,          float_bits(alpha),            sum,          float_bits(beta)};
  if (auto found = cache.find(key); found != cache.end()) return found->second;
  if (cache.size() >= 64) cache.clear();
  dnnl::primitive_attr attr;
  if (alpha != 1.0f) attr.set_output_scales(0, {alpha});
  if (sum) {
    dnnl::post_ops post;
    post.append_sum(beta);
    attr.set_post_ops(post);
  }
  const dnnl::matmul::desc desc(a.desc, b.desc, matrix_desc(m, n, dt::f32, ld, 1));
  return cache.emplace(key, dnnl::matmul(dnnl::matmul::primitive_desc(desc, attr, cpu_engine()))).first->second;
}

std::string onednn_version() {
  const dnnl::version_t* version = dnnl::version();
  return std::to_string(version->major) + "." + std::to_string(version->minor) + "." + std::to_string(version->patch);
}

}  // namespace

std::string onednn_unavailable_reason(ScalarType storage) {
  if (storage == ScalarType::F16 && native_matmul(ScalarType::F16).empty())
    return "oneDNN " + onednn_version() + " has no optimized f16 matmul on this CPU; widened to f32 it would be the openblas candidate's computation";
  if (storage == ScalarType::F32 || storage == ScalarType::F64) return "the onednn candidate is the bf16/f16 vendor baseline; f32 programs have openblas";
  return "";
}

std::string onednn_description() {
  std::string text = "oneDNN " + onednn_version();
  const std::string& bf16 = native_matmul(ScalarType::BF16);
  text += bf16.empty() ? ", bf16 widened to f32 (no optimized bf16 matmul on this CPU)" : ", bf16 matmul " + bf16;
  if (const std::string& f16 = native_matmul(ScalarType::F16); !f16.empty()) text += ", f16 matmul " + f16;
  return text + ", f32 matmul " + native_matmul(ScalarType::F32);
}

void run_onednn_product(const GemmProblem& problem, ThreadPool* pool) {
  const int64_t m = problem.a.rows, k = problem.a.cols, n = problem.b.cols;
  if (problem.b.rows != k || problem.d.rows != m || problem.d.cols != n) throw std::logic_error("onednn product: operand shapes disagree");
  set_onednn_threads(pool ? pool->size() : 1);
  thread_local AlignedBuffer a_scratch, b_scratch, accumulator_scratch;
  // Both operands of one 16-bit type with a native matmul: in place. Anything else (mixed types,
  // f32, no native matmul) runs the f32 matmul on widened copies: exact, so the semantics hold.
  const bool in_place = problem.a.type == problem.b.type && problem.a.type != ScalarType::F32 && !native_matmul(problem.a.type).empty();
  const Operand a = operand_of(problem.a, in_place, a_scratch, pool);
  // B = Aᵀ (the products X·Xᵀ): the widened copy of A serves as B with its strides swapped,
  // instead of widening the same matrix twice.
  const bool b_is_a_transposed = problem.a.data == problem.b.data && problem.a.type == problem.b.type && problem.a.row_stride == problem.b.col_stride &&
                                 problem.a.col_stride == problem.b.row_stride;
  const Operand b = b_is_a_transposed ? Operand{a.data, matrix_desc(k, n, a.type, a.col_stride, a.row_stride), a.type, a.col_stride, a.row_stride}
                                      : operand_of(problem.b, in_place, b_scratch, pool);
  const bool direct = problem.d.type == ScalarType::F32 && problem.d.col_stride == 1;
  float* accumulator = direct ? static_cast<float*>(problem.d.data) : accumulator_scratch.floats(m * n);
  const int64_t ld = direct ? problem.d.row_stride : n;
  const bool sum = direct && problem.c && problem.beta != 0.0f;
  if (sum) copy_to_f32(*problem.c, accumulator, ld, false, pool);
  dnnl::matmul& matmul = cached_matmul(a, b, m, n, k, ld, direct ? problem.alpha : 1.0f, sum, sum ? problem.beta : 0.0f);
  const dnnl::engine& engine = cpu_engine();
  thread_local dnnl::stream stream(engine);
  dnnl::memory src(a.desc, engine, a.data), weights(b.desc, engine, b.data), dst(matrix_desc(m, n, dt::f32, ld, 1), engine, accumulator);
  matmul.execute(stream, {{DNNL_ARG_SRC, src}, {DNNL_ARG_WEIGHTS, weights}, {DNNL_ARG_DST, dst}});
  stream.wait();
  if (direct) add_to_diagonal(problem.d, problem.gamma);
  else store_epilogue(accumulator, ld, problem, pool);
}

}  // namespace orthojit::cpu
