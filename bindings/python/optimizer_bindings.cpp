// (being written)
#include "bindings/python/bindings.h"

namespace orthojit::python {
void register_optimizer(nanobind::module_&) {}
}  // namespace orthojit::python
