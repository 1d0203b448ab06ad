// What the generated product kernels become in machine code, checked in the SASS of NVRTC's
// cubins (cuobjdump -sass; the tool comes with the CUDA toolkit or from PyPI's
// nvidia-cuda-cuobjdump and nvidia-cuda-nvdisasm wheels, which scripts/install-deps.sh installs
// for /usr/bin/python3). No GPU is needed. For every product kernel of a standard and a Gram
// schedule, on sm_80 and sm_90:
//   * tensor-core MMAs (HMMA.16816) and no local memory (LDL/STL: spills or arrays behind pointers);
//   * a kernel whose description has an operand that is not k-contiguous (read by ldmatrix.trans) has the transposing LDSM
//     (LDSM.16.MT88) and, when its operands move in 16-byte chunks, no 16-bit shared stores
//     (STS.U16: the transposing stores it replaced) in its main loop; a triangular product's
//     shared-memory mirror has its 16-bit transposing stores after the last MMA, and 16-byte
//     global stores;
//   * a kernel staged through cp.async has LDGSTS and its wait (DEPBAR), and no register staging.
// Without cuobjdump the test is skipped, saying where it looked.
#include <gtest/gtest.h>
#include <unistd.h>

#include <array>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <map>
#include <sstream>

#include "cuda/cuda_codegen.h"
#include "cuda/nvrtc_compiler.h"
#include "kernels/cuda_device_headers.h"
#include "kernels/program_library.h"
#include "passes/pipeline.h"
#include "cuda_binutils.h"

namespace orthojit::cuda {
namespace {

// The description a product kernel instantiates orthojit_mma_product.cuh with (the generated
// `struct <kernel>_product { ... };`), or "" when there is none.
std::string product_description(const std::string& source, const std::string& name) {
  const size_t begin = source.find("struct " + name + "_product {");
  if (begin == std::string::npos) return "";
  const size_t end = source.find("\n};\n", begin);
  return source.substr(begin, end == std::string::npos ? std::string::npos : end - begin);
}

TEST(CudaSass, ProductKernelsUseTensorCoresLdmatrixAndCpAsyncWithoutLocalMemory) {
  std::string looked;
  const std::string folder = binutils(looked);
  if (folder.empty()) GTEST_SKIP() << "cuobjdump and nvdisasm not found in:" << looked << " (scripts/install-deps.sh installs them from PyPI)";
  struct Case {
    const char* program;
    int64_t rows, cols;
    ir::StrategyKind strategy;
  };
  int ldmatrix_kernels = 0, pipelined_kernels = 0, products = 0, mirror_kernels = 0;
  for (const Case& c : {Case{"jordan_ns5", 1024, 4096, ir::StrategyKind::Standard}, Case{"gram_polar_express5", 512, 2048, ir::StrategyKind::Gram},
                        Case{"jordan_ns5", 129, 517, ir::StrategyKind::Standard}}) {
    passes::CompileOptions options;
    options.rows = c.rows;
    options.cols = c.cols;
    options.strategy = c.strategy;
    const CudaProgram program = generate_cuda(passes::compile_program(kernels::load_program_by_name_or_path(c.program), options));
    for (const char* arch : {"sm_80", "sm_90"}) {
      const NvrtcOutput compiled = compile_cuda(program.source, kernels::cuda_device_headers(), arch);
      const auto sass = sass_by_function(folder, compiled);
      ASSERT_FALSE(sass.empty()) << "cuobjdump printed no functions";
      for (const Launch& launch : program.launches) {
        if (launch.kernel.rfind("gemm_", 0) != 0) continue;
        SCOPED_TRACE(std::string(c.program) + " " + arch + ": " + launch.summary);
        const auto found = sass.find(launch.kernel);
        ASSERT_NE(found, sass.end());
        const std::string& code = found->second;
        const std::string description = product_description(program.source, launch.kernel);
        ASSERT_FALSE(description.empty()) << "no product description";
        ++products;
        EXPECT_NE(code.find("HMMA.16816.F32"), std::string::npos);
        EXPECT_EQ(code.find("LDL"), std::string::npos) << "local memory loads";
        EXPECT_EQ(code.find("STL"), std::string::npos) << "local memory stores";
        // An operand that is not k-contiguous is read by ldmatrix.trans.
        if (description.find("A_K_CONTIGUOUS = false") != std::string::npos || description.find("B_K_CONTIGUOUS = false") != std::string::npos) {
          ++ldmatrix_kernels;
          EXPECT_NE(code.find("LDSM.16.MT88"), std::string::npos) << "no transposing ldmatrix";
          // With 16-byte chunks of both operands (cp.async, or uint4 registers) every shared store
          // is 16 bytes; a 16-bit one would be a transposing store left behind. (Odd shapes move
          // single elements and store them one by one, along the rows: not transposing.)
          const bool wide = launch.summary.find("cp.async") != std::string::npos ||
                            description.find("VA = 8, VB = 8,") != std::string::npos;
          if (wide) {
            // The shared-memory mirror of a triangular product writes the rounded tile transposed,
            // 16 bits at a time, in the epilogue: after the main loop's last MMA. None before it.
            const size_t last_mma = code.rfind("HMMA.16816.F32");
            const size_t first_narrow_store = code.find("STS.U16");
            if (launch.summary.find("shared-memory mirror") != std::string::npos) {
              ++mirror_kernels;
              EXPECT_NE(first_narrow_store, std::string::npos) << "the mirror tile's stores are missing";
              EXPECT_GT(first_narrow_store, last_mma) << "16-bit shared stores (transposing stores) in the main loop";
              EXPECT_NE(code.find("STG.E.128"), std::string::npos) << "no 16-byte global stores";
            } else {
              EXPECT_EQ(first_narrow_store, std::string::npos) << "16-bit shared stores (transposing stores) remain";
            }
          }
        }
        if (launch.summary.find("cp.async") != std::string::npos) {
          ++pipelined_kernels;
          EXPECT_NE(code.find("LDGSTS"), std::string::npos) << "no cp.async";
          EXPECT_NE(code.find("DEPBAR"), std::string::npos) << "no cp.async wait";
        }
      }
    }
  }
  // The cases must exercise both paths (n-contiguous B products, 16-byte-aligned shapes).
  EXPECT_GT(ldmatrix_kernels, 0);
  EXPECT_GT(pipelined_kernels, 0);
  EXPECT_GT(products, pipelined_kernels);  // 129 x 517 is register-staged
  EXPECT_GT(mirror_kernels, 0);  // A·A of the standard step: n-contiguous B, the shared-memory mirror
}

}  // namespace
}  // namespace orthojit::cuda
