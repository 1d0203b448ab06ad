// Pass: symbolic m, n -> concrete sizes.
#include <string>

#include "ir/verifier.h"
#include "passes/passes.h"

namespace orthojit::passes {

void specialize_shapes(ir::Function& function, int64_t rows, int64_t cols, int64_t batch) {
  if (rows < 1 || cols < 1 || batch < 1)
    throw CompileError({}, "invalid shape " + std::to_string(rows) + "x" + std::to_string(cols) + "x" + std::to_string(batch) +
                               ": rows, columns and batch must all be at least 1");
  constexpr int64_t kMaxElements = int64_t{1} << 34;
  if (rows * cols > kMaxElements / batch)
    throw CompileError({}, "shape " + std::to_string(rows) + "x" + std::to_string(cols) + "x" + std::to_string(batch) + " is too large");
  auto concrete = [&](ir::Dim dim) {
    if (dim.is_known()) return dim;
    return ir::Dim::of(dim.symbol == 'm' ? rows : cols);
  };
  function.input_shape = {concrete(function.input_shape.rows), concrete(function.input_shape.cols)};
  function.batch = batch;
  for (auto& node : function.nodes) node.shape = {concrete(node.shape.rows), concrete(node.shape.cols)};
}

}  // namespace orthojit::passes
