// orthojit._orthojit: the C++ core for Python (the package orthojit wraps it; see docs/python.md).
#include "bindings/python/bindings.h"

NB_MODULE(_orthojit, module) {
  module.doc() = "orthojit's C++ core: JIT-compiled orthogonalizers, the autotuner, the Muon runtime and ZeRO planning.";
  module.attr("__version__") = ORTHOJIT_VERSION;
  orthojit::python::register_compiler(module);
  orthojit::python::register_optimizer(module);
  orthojit::python::register_zero(module);
  orthojit::python::register_state_file(module);
}
