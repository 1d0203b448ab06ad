// The published coefficient sets a program may name (sources: docs/dsl.md §5).
#pragma once

#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "dsl/ast.h"

namespace orthojit::dsl {

struct NamedCoefficientSet {
  std::string_view name;
  std::string_view source;     // where the numbers come from
  std::vector<Triple> triples;  // one triple (repeatable) or one per step
};

const std::vector<NamedCoefficientSet>& named_coefficient_sets();
const NamedCoefficientSet* find_coefficient_set(std::string_view name);

// Safety scaling of a triple by s: (a/s, b/s^3, c/s^5), so that p(x/s)·... keeps the fixed point
// below 1 when the normalization underestimates the spectral norm.
Triple scale_for_safety(const Triple& triple, double safety);

}  // namespace orthojit::dsl
