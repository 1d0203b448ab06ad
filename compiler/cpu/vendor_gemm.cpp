// OpenBLAS products for the vendor-library engine (see vendor_gemm.h).
#include "cpu/vendor_gemm.h"

#include <stdexcept>

#include "cpu/aligned_buffer.h"
#include "cpu/openblas_library.h"
#include "cpu/thread_pool.h"
#include "cpu/vendor_host_loops.h"
#include "support/host_cpu.h"

namespace orthojit::cpu {

const char* openblas_kernel_name() { return openblas_core_name(); }

std::string openblas_kernel_warning() {
  if (!openblas_unavailable_reason().empty()) return "";
  // A choice this CPU cannot run was replaced (the kernel is then the best one): the user is told
  // the variable was not followed.
  if (openblas_user_coretype_replaced()) return openblas_coretype_origin();
  const std::string name = openblas_kernel_name();
  const bool avx512_kernel = name == "SkylakeX" || name == "Cooperlake" || name == "SapphireRapids";
  const bool avx2_kernel = avx512_kernel || name == "Haswell" || name == "Zen";
  const HostCpu& cpu = host_cpu();
  if ((cpu.avx512f && !avx512_kernel) || (cpu.avx2 && cpu.fma && !avx2_kernel))
    return "OpenBLAS runs its " + name + " kernel on this " + (cpu.avx512f ? "AVX-512" : "AVX2") + " CPU (" + openblas_coretype_origin() +
           "), so the vendor baseline is slower than it can be; unset OPENBLAS_CORETYPE to let orthojit choose " + openblas_coretype_for_host() +
           "'s kernels";
  return "";
}

void run_openblas_product(const GemmProblem& problem, ThreadPool* pool) {
  const int64_t m = problem.a.rows, k = problem.a.cols, n = problem.b.cols;
  if (problem.b.rows != k || problem.d.rows != m || problem.d.cols != n) throw std::logic_error("openblas product: operand shapes disagree");
  const ScopedOpenBlasThreads threads(pool ? pool->size() : 1);  // the call's own; the caller's count is put back
  thread_local AlignedBuffer a_scratch, b_scratch, accumulator_scratch;
  const bool gram_of_a = problem.triangular && m == n && problem.a.data == problem.b.data && problem.a.type == problem.b.type &&
                         problem.a.row_stride == problem.b.col_stride && problem.a.col_stride == problem.b.row_stride;
  const F32Operand a = f32_operand(problem.a, a_scratch, pool);
  const F32Operand b = gram_of_a ? F32Operand{} : f32_operand(problem.b, b_scratch, pool);
  // An f32 row-major D is the call's output: C (converted, for ssyrk its upper triangle only) is
  // copied in and β scales it inside the call, as a BLAS user writes D = αAB + βC; γ follows.
  // Otherwise the product goes to an f32 accumulator and one pass applies α, β·C and γ and rounds
  // to D's type once (two roundings would not be the program's semantics).
  const bool direct = problem.d.type == ScalarType::F32 && problem.d.col_stride == 1;
  float* accumulator = direct ? static_cast<float*>(problem.d.data) : accumulator_scratch.floats(m * n);
  const int64_t ld = direct ? problem.d.row_stride : n;
  float alpha = 1.0f, beta = 0.0f;
  if (direct) {
    alpha = problem.alpha;
    if (problem.c && problem.beta != 0.0f) {
      copy_to_f32(*problem.c, accumulator, ld, gram_of_a, pool);
      beta = problem.beta;
    }
  }
  if (gram_of_a) {
    // A·Aᵀ (or Aᵀ·A when A is stored transposed): the upper triangle, then mirrored below.
    openblas_ssyrk(a.transposed, static_cast<int>(m), static_cast<int>(k), alpha, a.data, static_cast<int>(a.ld), beta, accumulator,
                   static_cast<int>(ld));
    mirror_upper_to_lower(accumulator, m, ld, pool);
  } else {
    openblas_sgemm(a.transposed, b.transposed, static_cast<int>(m), static_cast<int>(n), static_cast<int>(k), alpha, a.data, static_cast<int>(a.ld),
                   b.data, static_cast<int>(b.ld), beta, accumulator, static_cast<int>(ld));
  }
  if (direct) add_to_diagonal(problem.d, problem.gamma);
  else store_epilogue(accumulator, ld, problem, pool);
}

}  // namespace orthojit::cpu
