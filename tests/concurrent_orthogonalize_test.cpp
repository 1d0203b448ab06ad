// Many threads orthogonalizing different shapes at once through one process (issue 18, item 3):
// the compile caches (the JIT kernel cache, the compiled-program cache of orthogonalize) and the
// CPU thread pool are shared by every call, and under contention each result must still be the
// one the float64 reference interpreter computes for that input alone.
#include <gtest/gtest.h>

#include <atomic>
#include <cmath>
#include <string>
#include <thread>
#include <vector>

#include "kernels/program_library.h"
#include "reference/random_matrix.h"
#include "runtime/orthogonalize.h"
#include "test_support.h"

namespace orthojit {
namespace {

struct Job {
  std::string program;
  const char* strategy;
  int64_t batch, rows, cols;
};

// The reference interpreter on the same f32-rounded input and precision policy (the program's),
// single-threaded, before any contention.
std::vector<double> reference_result(const dsl::Program& program, const std::vector<double>& input, const Job& job) {
  runtime::OrthogonalizeOptions options;
  options.backend = "ref";
  options.strategy = job.strategy;
  options.use_tuning_records = false;
  return runtime::orthogonalize(program, input, job.batch, job.rows, job.cols, options).values;
}

TEST(ConcurrentOrthogonalize, ManyThreadsManyShapesMatchTheReference) {
  // Distinct shapes (tall, wide, square, batched, a remainder in every blocking dimension) and both
  // strategies, so no two threads share a compiled program; then every thread runs the same jobs
  // again in another order, hitting the caches others filled while they are being filled.
  const std::vector<Job> jobs = {
      {"polar_express5_f32", "standard", 1, 48, 160}, {"polar_express5_f32", "gram", 1, 40, 200},  {"jordan_ns5_f32", "standard", 1, 96, 72},
      {"jordan_ns5_f32", "gram", 2, 24, 100},         {"polar_express5_f32", "standard", 3, 17, 33}, {"deepseek_v4_f32", "standard", 1, 64, 64},
      {"jordan_ns5_f32", "standard", 1, 130, 30},     {"deepseek_v4_f32", "gram", 1, 20, 260},
  };
  std::vector<dsl::Program> programs;
  std::vector<std::vector<double>> inputs, expected;
  for (size_t i = 0; i < jobs.size(); ++i) {
    const Job& job = jobs[i];
    programs.push_back(kernels::load_program_by_name_or_path(job.program));
    std::vector<double> input = reference::gaussian_values(job.batch * job.rows * job.cols, 1000 + i);
    for (double& v : input) v = static_cast<float>(v);  // the cpu backend reads f32; both sides see the same values
    expected.push_back(reference_result(programs.back(), input, job));
    inputs.push_back(std::move(input));
  }

  constexpr int kThreads = 8;  // four times the cores of the CI machine: calls interleave
  constexpr int kRounds = 3;
  std::vector<std::vector<std::string>> problems(kThreads);
  std::atomic<int> ready{0};
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&, t] {
      ready.fetch_add(1);
      while (ready.load() < kThreads) std::this_thread::yield();  // start together
      for (int round = 0; round < kRounds; ++round) {
        // Thread t starts at job t and walks the list: in each round every job runs on some thread.
        for (size_t k = 0; k < jobs.size(); k += 2) {
          const size_t i = (static_cast<size_t>(t) + k + static_cast<size_t>(round)) % jobs.size();
          const Job& job = jobs[i];
          runtime::OrthogonalizeOptions options;
          options.backend = "cpu";
          options.strategy = job.strategy;
          options.threads = 1 + (t % 2);  // one or two pool workers: the pool is shared and contended
          options.use_tuning_records = false;
          try {
            const auto result = runtime::orthogonalize(programs[i], inputs[i], job.batch, job.rows, job.cols, options).values;
            // f32 arithmetic against the f64-emulated f32 policy: the same operations with another
            // summation order (blocked GEMM, threads), 5e-4 relative as tests/cpu_backend_test.cpp
            // argues; a result computed from another thread's input or buffers is O(1) off.
            const double error = testing::relative_error(result, expected[i]);
            if (!(error < 5e-4))
              problems[t].push_back(job.program + " " + job.strategy + " " + std::to_string(job.batch) + "x" + std::to_string(job.rows) + "x" +
                                    std::to_string(job.cols) + ": relative error " + std::to_string(error));
          } catch (const std::exception& error) {
            problems[t].push_back(job.program + ": " + error.what());
          }
        }
      }
    });
  }
  for (auto& thread : threads) thread.join();
  for (int t = 0; t < kThreads; ++t)
    for (const auto& problem : problems[t]) ADD_FAILURE() << "thread " << t << ": " << problem;
}

}  // namespace
}  // namespace orthojit
