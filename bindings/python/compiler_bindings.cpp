// (being written)
#include "bindings/python/bindings.h"

namespace orthojit::python {
void register_compiler(nanobind::module_&) {}
}  // namespace orthojit::python
