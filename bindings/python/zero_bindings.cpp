// (being written)
#include "bindings/python/bindings.h"

namespace orthojit::python {
void register_zero(nanobind::module_&) {}
}  // namespace orthojit::python
