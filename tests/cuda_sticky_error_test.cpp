// Which driver errors poison the CUDA context (cuda/sticky_error.h), without a GPU: exactly the
// nine that leave every later call failing, and the exceptions that carry one. What
// tests/cuda_device_test and bench/gpu_bench stop on instead of reporting every later case as
// failed.
#include <gtest/gtest.h>

#include <set>
#include <stdexcept>

#include "cuda/cuda_driver.h"
#include "cuda/sticky_error.h"

namespace orthojit::cuda {
namespace {

TEST(CudaStickyError, ExactlyTheErrorsThatPoisonTheContext) {
  // By number too: the values the driver documents (cuda.h), so a renamed enumerator cannot
  // quietly change the list.
  const std::set<int> sticky = {700, 702, 710, 714, 715, 716, 717, 718, 719};
  EXPECT_EQ(CUDA_ERROR_ILLEGAL_ADDRESS, 700);
  EXPECT_EQ(CUDA_ERROR_LAUNCH_TIMEOUT, 702);
  EXPECT_EQ(CUDA_ERROR_ASSERT, 710);
  EXPECT_EQ(CUDA_ERROR_HARDWARE_STACK_ERROR, 714);
  EXPECT_EQ(CUDA_ERROR_ILLEGAL_INSTRUCTION, 715);
  EXPECT_EQ(CUDA_ERROR_MISALIGNED_ADDRESS, 716);
  EXPECT_EQ(CUDA_ERROR_INVALID_ADDRESS_SPACE, 717);
  EXPECT_EQ(CUDA_ERROR_INVALID_PC, 718);
  EXPECT_EQ(CUDA_ERROR_LAUNCH_FAILED, 719);
  for (int code = 0; code < 1100; ++code) EXPECT_EQ(is_sticky_error(static_cast<CUresult>(code)), sticky.count(code) > 0) << "CUresult " << code;
  // The errors a call reports and the context survives, named.
  for (CUresult survivable : {CUDA_SUCCESS, CUDA_ERROR_INVALID_VALUE, CUDA_ERROR_OUT_OF_MEMORY, CUDA_ERROR_NO_DEVICE, CUDA_ERROR_INVALID_PTX,
                              CUDA_ERROR_INVALID_HANDLE, CUDA_ERROR_NOT_READY, CUDA_ERROR_LAUNCH_OUT_OF_RESOURCES, CUDA_ERROR_UNKNOWN})
    EXPECT_FALSE(is_sticky_error(survivable)) << survivable;
}

TEST(CudaStickyError, TheExceptionsThatCarryOne) {
  EXPECT_EQ(sticky_error_of(CudaError("running x: CUDA_ERROR_ILLEGAL_ADDRESS", CUDA_ERROR_ILLEGAL_ADDRESS)), CUDA_ERROR_ILLEGAL_ADDRESS);
  EXPECT_EQ(sticky_error_of(CudaError("cuCtxSynchronize: CUDA_ERROR_LAUNCH_FAILED", CUDA_ERROR_LAUNCH_FAILED)), CUDA_ERROR_LAUNCH_FAILED);
  EXPECT_EQ(sticky_error_of(CudaError("cuMemAlloc: CUDA_ERROR_OUT_OF_MEMORY", CUDA_ERROR_OUT_OF_MEMORY)), std::nullopt);
  // Not a driver error (a cuBLAS status, a wrong result): the context has to be asked.
  EXPECT_EQ(sticky_error_of(std::runtime_error("cublasGemmStridedBatchedEx: CUBLAS_STATUS_EXECUTION_FAILED")), std::nullopt);
  const std::exception& as_base = CudaError("x", CUDA_ERROR_MISALIGNED_ADDRESS);
  EXPECT_EQ(sticky_error_of(as_base), CUDA_ERROR_MISALIGNED_ADDRESS);
}

TEST(CudaStickyError, AHealthyContextHasNone) {
  std::string reason;
  if (!driver(&reason)) GTEST_SKIP() << "no CUDA device: " << reason;
  try {
    Device::get();
  } catch (const std::exception& error) {
    GTEST_SKIP() << error.what();
  }
  EXPECT_EQ(poisoned_context_reason(), "");
  EXPECT_EQ(sticky_error_after(std::runtime_error("a wrong result")), "");
  // An exception carrying a sticky code is taken at its word (its own message).
  EXPECT_EQ(sticky_error_after(CudaError("running x: CUDA_ERROR_ILLEGAL_ADDRESS", CUDA_ERROR_ILLEGAL_ADDRESS)), "running x: CUDA_ERROR_ILLEGAL_ADDRESS");
}

}  // namespace
}  // namespace orthojit::cuda
