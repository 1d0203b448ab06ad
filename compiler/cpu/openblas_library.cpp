// OpenBLAS opened with dlopen after choosing its kernel (see openblas_library.h).
#include "cpu/openblas_library.h"

#include <cblas.h>
#include <dlfcn.h>

#include <cpuid.h>
#include <cstdlib>
#include <cstring>
#include <strings.h>
#include <mutex>

#include "cpu/build_status.h"

extern "C" char* openblas_get_corename(void);
extern "C" void openblas_set_num_threads(int threads);
extern "C" int openblas_get_num_threads(void);

namespace orthojit::cpu {
namespace {

// The configured library first (the one the build found), then its usual soname, so a machine
// with the runtime package only (no libopenblas.so development link) still opens it.
constexpr const char* kLibraryPaths[] = {ORTHOJIT_OPENBLAS_LIBRARY, "libopenblas.so.0"};

struct Library {
  std::string unavailable, origin;
  bool user_choice_replaced = false;
  // Typed from cblas.h's own declarations, so a signature mismatch is a compile error.
  decltype(&cblas_sgemm) sgemm = nullptr;
  decltype(&cblas_ssyrk) ssyrk = nullptr;
  decltype(&cblas_dgemm) dgemm = nullptr;
  decltype(&openblas_set_num_threads) set_num_threads = nullptr;
  decltype(&openblas_get_num_threads) get_num_threads = nullptr;
  decltype(&openblas_get_corename) get_corename = nullptr;
};

bool cpu_is_amd() {
  unsigned eax = 0, ebx = 0, ecx = 0, edx = 0;
  if (!__get_cpuid(0, &eax, &ebx, &ecx, &edx)) return false;
  char vendor[13] = {};
  std::memcpy(vendor, &ebx, 4);
  std::memcpy(vendor + 4, &edx, 4);
  std::memcpy(vendor + 8, &ecx, 4);
  return std::strcmp(vendor, "AuthenticAMD") == 0;
}

Library open_library() {
  Library library;
  // Already in the process (a program that links OpenBLAS itself, such as bench/'s baselines):
  // its constructor has run and its kernel stands; dlopen below returns the same handle.
  bool already_loaded = false;
  for (const char* path : kLibraryPaths)
    if (void* handle = ::dlopen(path, RTLD_NOW | RTLD_NOLOAD)) {
      already_loaded = true;
      ::dlclose(handle);
    }
  // A copy: setenv below may free the string getenv returned.
  const char* user_variable = std::getenv("OPENBLAS_CORETYPE");
  const std::string user_choice = user_variable ? user_variable : "";
  const std::string ours = openblas_coretype_for_host();
  // What OPENBLAS_CORETYPE holds while the library's constructor reads it; put back afterwards.
  enum class During { AsIs, Ours } during = During::AsIs;
  if (already_loaded) {
    // By the program itself, or by a library it loaded first (Debian's PyTorch links OpenBLAS;
    // orthojit's Python package chooses the kernel before it imports torch: openblas_before_torch.py).
    library.origin = "OpenBLAS was already loaded in this process, with the kernel chosen then";
  } else if (!user_choice.empty()) {
    const std::string missing = openblas_coretype_missing_isa(user_choice, host_cpu());
    if (missing.empty()) {
      library.origin = "OPENBLAS_CORETYPE=" + user_choice + " set by the user";
    } else {
      during = During::Ours;
      library.user_choice_replaced = true;
      library.origin = "OPENBLAS_CORETYPE=" + user_choice + " set by the user needs " + missing +
                       ", which this CPU lacks (OpenBLAS would stop the process with SIGILL); orthojit chose " +
                       (ours.empty() ? std::string("OpenBLAS's own detection") : ours) + " instead";
    }
  } else if (!ours.empty()) {
    during = During::Ours;
    library.origin = "OPENBLAS_CORETYPE=" + ours + " set by orthojit for this CPU";
  } else {
    library.origin = "OpenBLAS's own detection";
  }
  // Read by the library's constructor during dlopen, then put back as the user had it, so child
  // processes and later readers of the environment see what they would have.
  if (during == During::Ours) {
    if (ours.empty()) ::unsetenv("OPENBLAS_CORETYPE");
    else ::setenv("OPENBLAS_CORETYPE", ours.c_str(), 1);
  }
  void* handle = nullptr;
  std::string errors;
  for (const char* path : kLibraryPaths) {
    if ((handle = ::dlopen(path, RTLD_NOW | RTLD_LOCAL))) break;
    const char* error = ::dlerror();
    errors += std::string(errors.empty() ? "" : "; ") + (error ? error : path);
  }
  if (during == During::Ours) {
    if (user_choice.empty()) ::unsetenv("OPENBLAS_CORETYPE");
    else ::setenv("OPENBLAS_CORETYPE", user_choice.c_str(), 1);
  }
  if (!handle) {
    library.unavailable = "OpenBLAS could not be opened (" + errors + "): the tuner's openblas candidates and the OpenBLAS baselines are left out";
    return library;
  }
  auto resolve = [&](auto& pointer, const char* name) {
    pointer = reinterpret_cast<std::remove_reference_t<decltype(pointer)>>(::dlsym(handle, name));
    if (!pointer && library.unavailable.empty()) library.unavailable = std::string("the opened OpenBLAS has no ") + name + ": the openblas engine is left out";
  };
  resolve(library.sgemm, "cblas_sgemm");
  resolve(library.ssyrk, "cblas_ssyrk");
  resolve(library.dgemm, "cblas_dgemm");
  resolve(library.set_num_threads, "openblas_set_num_threads");
  resolve(library.get_num_threads, "openblas_get_num_threads");
  resolve(library.get_corename, "openblas_get_corename");
  return library;  // the handle stays open for the process's lifetime
}

const Library& library() {
  static const Library opened = [] {
    const std::string& built = vendor_blas_unavailable_reason();
    if (!built.empty()) {
      Library absent;
      absent.unavailable = built;
      return absent;
    }
    return open_library();
  }();
  return opened;
}

const Library& usable_library() {
  const Library& opened = library();
  if (!opened.unavailable.empty()) throw PartNotBuilt(opened.unavailable);
  return opened;
}

CBLAS_TRANSPOSE transpose_flag(bool trans) { return trans ? CblasTrans : CblasNoTrans; }

}  // namespace

std::string openblas_coretype_for(const HostCpu& cpu, bool amd) {
  if (cpu.avx512f) return "SkylakeX";
  if (cpu.avx2 && cpu.fma) return amd ? "Zen" : "Haswell";
  return "";
}

std::string openblas_coretype_for_host() { return openblas_coretype_for(host_cpu(), cpu_is_amd()); }

std::string openblas_coretype_missing_isa(const std::string& coretype, const HostCpu& cpu) {
  auto named = [&](const char* name) { return ::strcasecmp(coretype.c_str(), name) == 0; };
  // OpenBLAS's AVX-512 types: SkylakeX's sgemm/dgemm kernels, plus the bf16 routines (AVX512-BF16)
  // that Cooperlake and SapphireRapids add.
  if (named("SkylakeX") || named("Cooperlake") || named("SapphireRapids")) {
    if (!cpu.avx512f) return "AVX-512F";
    if (!named("SkylakeX") && !cpu.avx512bf16) return "AVX512-BF16";
    return "";
  }
  if ((named("Haswell") || named("Zen")) && !(cpu.avx2 && cpu.fma)) return "AVX2 and FMA";
  return "";
}

const std::string& openblas_unavailable_reason() { return library().unavailable; }

const std::string& openblas_coretype_origin() { return library().origin; }

bool openblas_user_coretype_replaced() { return library().user_choice_replaced; }

void openblas_sgemm(bool trans_a, bool trans_b, int m, int n, int k, float alpha, const float* a, int lda, const float* b, int ldb, float beta,
                    float* c, int ldc) {
  usable_library().sgemm(CblasRowMajor, transpose_flag(trans_a), transpose_flag(trans_b), m, n, k, alpha, a, lda, b, ldb, beta, c, ldc);
}

void openblas_ssyrk(bool trans, int n, int k, float alpha, const float* a, int lda, float beta, float* c, int ldc) {
  usable_library().ssyrk(CblasRowMajor, CblasUpper, transpose_flag(trans), n, k, alpha, a, lda, beta, c, ldc);
}

void openblas_dgemm_nt(int m, int n, int k, const double* a, const double* b, double* c) {
  usable_library().dgemm(CblasRowMajor, CblasNoTrans, CblasTrans, m, n, k, 1.0, a, k, b, k, 0.0, c, n);
}

void openblas_set_threads(int threads) { usable_library().set_num_threads(threads); }

int openblas_threads() { return usable_library().get_num_threads(); }

ScopedOpenBlasThreads::ScopedOpenBlasThreads(int threads) : previous_(openblas_threads()) {
  if (threads != previous_) openblas_set_threads(threads);
}

ScopedOpenBlasThreads::~ScopedOpenBlasThreads() {
  if (openblas_threads() != previous_) openblas_set_threads(previous_);
}

const char* openblas_core_name() {
  const Library& opened = library();
  return opened.unavailable.empty() ? opened.get_corename() : "(unavailable)";
}

}  // namespace orthojit::cpu
