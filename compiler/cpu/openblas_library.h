// OpenBLAS, opened at run time (dlopen) after choosing its kernel for this CPU.
//
// OpenBLAS (a DYNAMIC_ARCH build such as Debian's) picks its kernel once, in the library's
// constructor, from CPUID or from the environment variable OPENBLAS_CORETYPE. Debian's 0.3.21 does
// not know recent Xeons and falls back to its Prescott (SSE3) kernels there, a quarter or less of
// what the CPU can do, which made every "vs OpenBLAS" figure orthojit printed flatter it. A library
// linked at build time is loaded (and has chosen) before main runs, so orthojit does not link it:
// the first call here sets OPENBLAS_CORETYPE to the best kernel for this CPU (unless the user set
// it), opens the library, and restores the environment. Every OpenBLAS call of orthojit (the
// vendor engine, the f64 products of the tuner's reference checks) goes through this file.
//
// OPENBLAS_L2_SIZE, if set, still overrides the cache size OpenBLAS blocks for; it is left as the
// user set it (docs/autotuning.md).
#pragma once

#include <string>

#include "support/host_cpu.h"

namespace orthojit::cpu {

// The OPENBLAS_CORETYPE orthojit sets for a CPU: "SkylakeX" with AVX-512F (OpenBLAS's AVX-512
// sgemm/dgemm kernels; its Cooperlake and SapphireRapids types add only bf16 routines orthojit
// does not call), "Zen" for an AMD CPU with AVX2+FMA and "Haswell" for another one (the same AVX2
// kernels; Zen has AMD's cache parameters), "" where OpenBLAS's own choice is as good (no AVX2).
std::string openblas_coretype_for(const HostCpu& cpu, bool amd);

// The same for the CPU this process runs on (AMD or not read from CPUID).
std::string openblas_coretype_for_host();

// What the kernels of an OPENBLAS_CORETYPE execute that `cpu` lacks: "AVX-512F", "AVX512-BF16",
// "AVX2 and FMA"; "" when the CPU runs them, or for a name this table does not know (it is then
// left to OpenBLAS). OpenBLAS 0.3.21 takes a forced type as given, and its first product on a CPU
// without those instructions stops the process with SIGILL: orthojit replaces such a choice by
// its own (openblas_coretype_origin() says so) instead of crashing. Names compare as OpenBLAS
// compares them, ignoring case.
std::string openblas_coretype_missing_isa(const std::string& coretype, const HostCpu& cpu);

// Why OpenBLAS cannot be used in this process ("" when it can): a build without OpenBLAS, or the
// library failing to open at run time. Opens the library on first use.
const std::string& openblas_unavailable_reason();

// How the kernel was chosen, for `orthojit info` and the records: "OPENBLAS_CORETYPE=Zen set by
// orthojit", "OPENBLAS_CORETYPE=Haswell set by the user", a user's choice this CPU cannot run and
// what replaced it, "OpenBLAS's own detection", or that the library was already loaded by the
// process (then its choice stands).
const std::string& openblas_coretype_origin();

// True when the user's OPENBLAS_CORETYPE named kernels this CPU cannot run and orthojit replaced it.
bool openblas_user_coretype_replaced();

// Row-major products on the opened library (each opens it on first use; they throw PartNotBuilt
// with openblas_unavailable_reason() when it cannot be opened).
// C = alpha·op(A)·op(B) + beta·C, op(X) = Xᵀ when trans_x (cblas_sgemm, CblasRowMajor).
void openblas_sgemm(bool trans_a, bool trans_b, int m, int n, int k, float alpha, const float* a, int lda, const float* b, int ldb, float beta,
                    float* c, int ldc);
// The upper triangle of C = alpha·op(A)·op(A)ᵀ + beta·C, op(A) n×k (cblas_ssyrk, CblasUpper).
void openblas_ssyrk(bool trans, int n, int k, float alpha, const float* a, int lda, float beta, float* c, int ldc);
// C = A·Bᵀ in f64, A m×k and B n×k row-major (cblas_dgemm).
void openblas_dgemm_nt(int m, int n, int k, const double* a, const double* b, double* c);
void openblas_set_threads(int threads);
int openblas_threads();  // openblas_get_num_threads

// OpenBLAS's thread count is process-wide, and the library is shared with whatever else loaded it:
// Debian's python3-torch runs its f32 matmuls on this same OpenBLAS. A product sets the count it
// runs on for its own call and puts back what it found, so that tuning or a product on the openblas
// engine inside a PyTorch process leaves PyTorch's matmuls on the threads they had.
class ScopedOpenBlasThreads {
 public:
  explicit ScopedOpenBlasThreads(int threads);
  ~ScopedOpenBlasThreads();
  ScopedOpenBlasThreads(const ScopedOpenBlasThreads&) = delete;
  ScopedOpenBlasThreads& operator=(const ScopedOpenBlasThreads&) = delete;

 private:
  int previous_;
};
// The kernel OpenBLAS runs ("SkylakeX", "Haswell", "Zen", "Prescott", ...), "(unavailable)" when
// the library cannot be opened.
const char* openblas_core_name();

}  // namespace orthojit::cpu
