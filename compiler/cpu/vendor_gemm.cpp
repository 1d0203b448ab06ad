// OpenBLAS products for the vendor-library engine.
#include "cpu/vendor_gemm.h"

#include <cblas.h>

#include <stdexcept>
#include <vector>

#include "cpu/aligned_buffer.h"
#include "cpu/element_types.h"
#include "support/host_cpu.h"

extern "C" char* openblas_get_corename(void);
extern "C" void openblas_set_num_threads(int threads);

namespace orthojit::cpu {
namespace {

// A contiguous f32 copy of a view (row-major), or the view itself when it already is one; returns
// the pointer, its leading dimension and whether it is stored transposed (a transposed view of a
// row-major f32 matrix is passed to BLAS with CblasTrans, without a copy).
struct BlasOperand {
  const float* data = nullptr;
  int64_t ld = 0;
  bool transposed = false;
};

BlasOperand as_blas_operand(const MatrixView& view, std::vector<float>& scratch) {
  if (view.type == ScalarType::F32 && view.col_stride == 1) return {static_cast<const float*>(view.data), view.row_stride, false};
  if (view.type == ScalarType::F32 && view.row_stride == 1) return {static_cast<const float*>(view.data), view.col_stride, true};
  scratch.resize(static_cast<size_t>(view.rows * view.cols));
  dispatch_storage_type(view.type, [&](auto tag) {
    using T = decltype(tag);
    const T* base = static_cast<const T*>(view.data);
    for (int64_t i = 0; i < view.rows; ++i)
      for (int64_t j = 0; j < view.cols; ++j) scratch[static_cast<size_t>(i * view.cols + j)] = to_float(base[i * view.row_stride + j * view.col_stride]);
  });
  return {scratch.data(), view.cols, false};
}

}  // namespace

const char* to_string(ProductEngine engine) { return engine == ProductEngine::Jit ? "jit" : "openblas"; }

const char* openblas_kernel_name() { return openblas_get_corename(); }

std::string openblas_kernel_warning() {
  const std::string name = openblas_kernel_name();
  const bool avx512_kernel = name == "SkylakeX" || name == "Cooperlake" || name == "SapphireRapids";
  const bool avx2_kernel = avx512_kernel || name == "Haswell" || name == "Zen";
  const HostCpu& cpu = host_cpu();
  if ((cpu.avx512f && !avx512_kernel) || (cpu.avx2 && cpu.fma && !avx2_kernel))
    return "OpenBLAS runs its " + name + " kernel on this " + (cpu.avx512f ? "AVX-512" : "AVX2") +
           " CPU, so the vendor baseline is slower than it can be; for a fair comparison run with OPENBLAS_CORETYPE=" +
           (cpu.avx512f ? "SkylakeX" : "Haswell") + " (and OPENBLAS_L2_SIZE unset)";
  return "";
}

void run_openblas_product(const GemmProblem& problem, int threads) {
  const int64_t m = problem.a.rows, k = problem.a.cols, n = problem.b.cols;
  if (problem.b.rows != k || problem.d.rows != m || problem.d.cols != n) throw std::logic_error("openblas product: operand shapes disagree");
  openblas_set_num_threads(threads);
  std::vector<float> a_copy, b_copy;
  const BlasOperand a = as_blas_operand(problem.a, a_copy), b = as_blas_operand(problem.b, b_copy);
  thread_local AlignedBuffer accumulator_scratch;
  float* accumulator = accumulator_scratch.floats(m * n);
  const bool gram_of_a = problem.triangular && problem.a.data == problem.b.data && problem.a.type == problem.b.type &&
                         problem.a.row_stride == problem.b.col_stride && problem.a.col_stride == problem.b.row_stride;
  if (gram_of_a) {
    // A·Aᵀ (or Aᵀ·A when A is stored transposed): the upper triangle, then mirrored below.
    cblas_ssyrk(CblasRowMajor, CblasUpper, a.transposed ? CblasTrans : CblasNoTrans, static_cast<int>(m), static_cast<int>(k), 1.0f, a.data,
                static_cast<int>(a.ld), 0.0f, accumulator, static_cast<int>(n));
    for (int64_t i = 0; i < m; ++i)
      for (int64_t j = 0; j < i; ++j) accumulator[i * n + j] = accumulator[j * n + i];
  } else {
    cblas_sgemm(CblasRowMajor, a.transposed ? CblasTrans : CblasNoTrans, b.transposed ? CblasTrans : CblasNoTrans, static_cast<int>(m),
                static_cast<int>(n), static_cast<int>(k), 1.0f, a.data, static_cast<int>(a.ld), b.data, static_cast<int>(b.ld), 0.0f, accumulator,
                static_cast<int>(n));
  }
  // The epilogue, as the JIT's: α·acc + β·C + γ·I in f32, rounded once to D's type.
  dispatch_storage_type(problem.d.type, [&](auto d_tag) {
    using TD = decltype(d_tag);
    TD* d = static_cast<TD*>(problem.d.data);
    for (int64_t i = 0; i < m; ++i)
      for (int64_t j = 0; j < n; ++j) {
        float value = problem.alpha * accumulator[i * n + j];
        if (problem.c) {
          const MatrixView& c = *problem.c;
          dispatch_storage_type(c.type, [&](auto c_tag) {
            using TC = decltype(c_tag);
            value = value + problem.beta * to_float(static_cast<const TC*>(c.data)[i * c.row_stride + j * c.col_stride]);
          });
        }
        if (i == j) value = value + problem.gamma;
        d[i * problem.d.row_stride + j * problem.d.col_stride] = from_float<TD>(value);
      }
  });
}

}  // namespace orthojit::cpu
