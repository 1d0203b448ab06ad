// Structural checks of the IR, run after every pass: operands precede users, shapes agree with
// the op, exactly one input and one output, facts (symmetry, buffers) are consistent.
#pragma once

#include <string>

#include "ir/function.h"

namespace orthojit::ir {

// The shape an op produces from its operands' shapes (the rule the verifier checks against).
Shape result_shape(const Function& function, const Node& node);

// Recomputes every node's shape from the input shape (used after a pass changes orientation).
void infer_shapes(Function& function);

// Throws std::logic_error("IR verification failed after <context>: ...") on the first violation.
void verify_function(const Function& function, const std::string& context);

}  // namespace orthojit::ir
