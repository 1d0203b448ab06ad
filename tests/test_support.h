// Helpers shared by the tests: compile a program for a shape, run the reference interpreter,
// compare arrays.
#pragma once

#include <algorithm>
#include <cmath>
#include <optional>
#include <string>
#include <vector>

#include "dsl/ast.h"
#include "ir/function.h"
#include "ir/lower_program.h"
#include "passes/pipeline.h"
#include "reference/interpreter.h"

namespace orthojit::testing {

inline ir::Function compile(const dsl::Program& program, int64_t rows, int64_t cols, ir::StrategyKind strategy = ir::StrategyKind::Standard,
                            std::optional<ScalarType> precision = std::nullopt, int64_t batch = 1) {
  passes::CompileOptions options;
  options.rows = rows;
  options.cols = cols;
  options.batch = batch;
  options.strategy = strategy;
  options.precision = precision;
  return passes::compile_program(program, options);
}

inline std::vector<double> run(const dsl::Program& program, const std::vector<double>& input, int64_t rows, int64_t cols,
                               ir::StrategyKind strategy = ir::StrategyKind::Standard, std::optional<ScalarType> precision = std::nullopt,
                               int64_t batch = 1) {
  return reference::interpret(compile(program, rows, cols, strategy, precision, batch), input);
}

// ‖x − y‖_F / ‖y‖_F
inline double relative_error(const std::vector<double>& x, const std::vector<double>& y) {
  double difference = 0, norm = 0;
  for (size_t i = 0; i < x.size(); ++i) {
    difference += (x[i] - y[i]) * (x[i] - y[i]);
    norm += y[i] * y[i];
  }
  return std::sqrt(difference / std::max(norm, 1e-300));
}

inline std::vector<double> transpose(const std::vector<double>& x, int64_t rows, int64_t cols) {
  std::vector<double> t(x.size());
  for (int64_t i = 0; i < rows; ++i)
    for (int64_t j = 0; j < cols; ++j) t[static_cast<size_t>(j * rows + i)] = x[static_cast<size_t>(i * cols + j)];
  return t;
}

inline int count_kind(const ir::Function& function, ir::OpKind kind) {
  return static_cast<int>(std::count_if(function.nodes.begin(), function.nodes.end(), [kind](const ir::Node& n) { return n.kind == kind; }));
}

}  // namespace orthojit::testing
