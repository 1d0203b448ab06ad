// `orthojit run`: a program on a .npy matrix or batch.
#include <chrono>
#include <cstdio>

#include "cli/arguments.h"
#include "cli/commands.h"
#include "kernels/program_library.h"
#include "runtime/npy_file.h"
#include "runtime/input_check.h"
#include "runtime/orthogonalize.h"

namespace orthojit::cli {

const char* const kRunHelp = R"(usage: orthojit run --program NAME|FILE --input X.npy --output Y.npy [options]

Orthogonalizes the matrix in X.npy (2-D, m x n) or each matrix of a batch (3-D, batch x m x n) and
writes the result to Y.npy with the input's element type. Inputs: float32 or float64, C order.

options:
  --program NAME|FILE   a shipped program (see `orthojit info`) or a .oj file
  --input X.npy         the input
  --output Y.npy        where to write the result (written atomically)
  --strategy S          auto (default), standard or gram
  --restarts LIST       gram restart steps, e.g. 2 or 2,4 ('' for none); default: the program's
  --precision P         override the storage type: bf16, f16, f32 or f64 (f64 = the exact iteration)
  --backend B           auto (the default: ref for f64 storage, e.g. --precision f64; cpu otherwise)
                        or ref (the float64 reference interpreter, emulating the storage rounding)
                        or cpu (LLVM JIT-compiled kernels; bf16, f16 and f32 policies; the tuning
                        records' winners run here)
                        or cuda (NVRTC-compiled tensor-core kernels; bf16 and f16 storage)
  --isa I               cpu: generic, avx2, avx512f, avx512bf16 or amx (default: amx where usable,
                        else the best this CPU runs; `orthojit info` says which and why)
  --kernel K            cpu, bf16 products: fma (widened to f32), bf16dot (vdpbf16ps, avx512bf16 path)
                        or amx (AMX tiles); default: the tuning record's, else the path's default
  --threads T           cpu: worker threads, 1 to 1024 (default: one per logical core)
  --variant V           cuda: generated (default), 'generated BMxBNxBK/WMxWN', 'generated hopper' (sm_90a tile, CC 9.0), fused-small, cublas, cublaslt
  --verbose             print the strategy chosen and the time taken

exit codes: 0 ok, 2 bad input or usage, 1 internal error
)";

int run_command(const std::vector<std::string>& args) {
  Arguments arguments(args, {"program", "input", "output", "strategy", "restarts", "precision", "backend", "isa", "kernel", "threads", "variant"}, {"verbose"});
  const dsl::Program program = kernels::load_program_by_name_or_path(arguments.require("program"));
  const std::string input_path = arguments.require("input");
  const std::string output_path = arguments.require("output");
  const runtime::OrthogonalizeOptions options = orthogonalize_options(arguments);

  runtime::NpyArray input = runtime::read_npy(input_path);
  const bool batched = input.shape.size() == 3;
  const int64_t batch = batched ? input.shape[0] : 1;
  const int64_t rows = input.shape[batched ? 1 : 0], cols = input.shape[batched ? 2 : 1];
  // The ref backend reads f64; the others f32 (auto: ref only for f64 storage).
  const bool reads_f32 = options.backend != "ref" && !(options.backend == "auto" && options.precision == ScalarType::F64);
  runtime::require_finite_input(input.values.data(), batch, rows, cols, reads_f32, input_path);
  const auto start = std::chrono::steady_clock::now();
  runtime::OrthogonalizeResult result = runtime::orthogonalize(program, input.values, batch, rows, cols, options);
  const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  runtime::NpyArray output{input.shape, input.is_f64, std::move(result.values)};
  runtime::write_npy(output_path, output);
  if (arguments.has("verbose"))
    std::fprintf(stderr, "orthojit run: %s on %lldx%lld (batch %lld), %s, backend %s, %.3f s (JIT %.3f s) -> %s\n", program.name.c_str(),
                 static_cast<long long>(rows), static_cast<long long>(cols), static_cast<long long>(batch), result.strategy_reason.c_str(),
                 result.backend.c_str(), seconds, result.jit_seconds, output_path.c_str());
  return 0;
}

}  // namespace orthojit::cli
