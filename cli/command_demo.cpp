// `orthojit demo` (what `make demo` runs): every shipped program on one random matrix, standard
// and gram, with the singular values of the output and the distance to the exact (f64) iteration.
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>

#include "cli/arguments.h"
#include "cli/commands.h"
#include "cpu/build_status.h"
#include "kernels/program_library.h"
#include "reference/random_matrix.h"
#include "reference/singular_values.h"
#include "runtime/orthogonalize.h"

namespace orthojit::cli {

const char* const kDemoHelp = R"(usage: orthojit demo [--shape MxN] [--seed S]

Runs every shipped program on one random Gaussian matrix (default 128x512, seed 1) with the
reference backend, with the standard and the gram strategy, and prints for each output:
  sigma min / max   the singular values of the output (one-sided Jacobi SVD); 1 = orthogonal
  max|sigma-1|      the orthogonality error
  vs f64            relative Frobenius distance to the same iteration run exactly in f64,
                    i.e. what the program's storage precision costs
  cpu vs ref        relative distance of the CPU backend's result (LLVM JIT kernels, f32
                    accumulation) to the reference interpreter's, and the CPU time (after JIT)
)";

namespace {

double relative_distance(const std::vector<double>& x, const std::vector<double>& reference) {
  double difference = 0, norm = 0;
  for (size_t i = 0; i < x.size(); ++i) {
    difference += (x[i] - reference[i]) * (x[i] - reference[i]);
    norm += reference[i] * reference[i];
  }
  return std::sqrt(difference / std::max(norm, 1e-300));
}

}  // namespace

int demo_command(const std::vector<std::string>& args) {
  Arguments arguments(args, {"shape", "seed"}, {});
  const runtime::ParsedShape shape = runtime::parse_shape(arguments.get("shape").value_or("128x512"));
  if (shape.batch != 1) throw runtime::UsageError("demo takes one matrix: --shape MxN");
  const uint64_t seed = parse_seed(arguments.get("seed").value_or("1"));
  const std::vector<double> input = reference::gaussian_values(shape.rows * shape.cols, seed);

  std::printf("orthojit demo: each shipped program on one random %lldx%lld Gaussian matrix (seed %llu),\n",
              static_cast<long long>(shape.rows), static_cast<long long>(shape.cols), static_cast<unsigned long long>(seed));
  std::printf("reference backend (float64 arithmetic, every stored value rounded to the program's storage type).\n");
  std::printf("An exact orthogonalizer gives sigma = 1; Newton-Schulz is deliberately not converged (jordan: about 0.7..1.2).\n");
  const bool have_cpu = cpu::cpu_backend_unavailable_reason().empty();
  if (!have_cpu) std::printf("cpu columns: %s.\n", cpu::cpu_backend_unavailable_reason().c_str());
  std::printf("\n");
  std::printf("%-20s %-7s %-5s %-9s %8s %8s %12s %10s %8s %11s %8s\n", "program", "storage", "steps", "strategy", "sigma min", "sigma max",
              "max|sigma-1|", "vs f64", "ref time", "cpu vs ref", "cpu time");
  for (const auto& shipped : kernels::shipped_programs()) {
    const dsl::Program program = kernels::load_program_by_name_or_path(std::string(shipped.name));
    for (const char* strategy : {"standard", "gram"}) {
      runtime::OrthogonalizeOptions options;
      options.strategy = strategy;
      const auto start = std::chrono::steady_clock::now();
      const auto result = runtime::orthogonalize(program, input, 1, shape.rows, shape.cols, options);
      const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
      options.precision = ScalarType::F64;
      const auto exact = runtime::orthogonalize(program, input, 1, shape.rows, shape.cols, options);
      const auto sigma = reference::singular_values(result.values, shape.rows, shape.cols);
      double worst = 0;
      for (double s : sigma) worst = std::max(worst, std::fabs(s - 1.0));
      std::printf("%-20s %-7s %-5zu %-9s %8.4f %8.4f %12.4f %10.2e %7.2fs", std::string(strategy) == "standard" ? program.name.c_str() : "",
                  std::string(to_string(program.policy.storage)).c_str(), program.steps.size(), strategy, sigma.back(), sigma.front(), worst,
                  relative_distance(result.values, exact.values), seconds);
      if (!have_cpu) {
        std::printf(" %11s %8s\n", "-", "-");
        continue;
      }
      // The same program on the CPU backend (the input as f32, as the backend reads it).
      runtime::OrthogonalizeOptions cpu_options;
      cpu_options.strategy = strategy;
      cpu_options.backend = "cpu";
      auto compiled = runtime::compile_orthogonalizer(program, 1, shape.rows, shape.cols, cpu_options);
      std::vector<float> in(input.begin(), input.end()), out(input.size());
      const auto cpu_start = std::chrono::steady_clock::now();
      compiled->run(in.data(), out.data());
      const double cpu_seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - cpu_start).count();
      const std::vector<double> cpu_values(out.begin(), out.end());
      std::printf(" %11.2e %6.1fms\n", relative_distance(cpu_values, result.values), cpu_seconds * 1e3);
    }
  }
  std::printf("\nstandard and gram compute the same polynomial: in f64 they agree to ~1e-12 (see the tests); in 16-bit\n");
  std::printf("storage they differ by their rounding, and the CPU backend differs from the reference by f32 accumulation.\n");
  std::printf("Time a real shape: `orthojit bench --program jordan_ns5 --shape 1024x4096` (docs/cpu-backend.md).\n");
  std::printf("See the IR: `orthojit compile --program jordan_ns5 --shape 128x512 --emit ir`.\n");
  return 0;
}

}  // namespace orthojit::cli
