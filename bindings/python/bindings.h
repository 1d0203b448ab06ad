// The pieces of the orthojit._orthojit extension module, one registration function per file.
#pragma once

#include <nanobind/nanobind.h>

namespace orthojit::python {

void register_compiler(nanobind::module_& module);   // compiler_bindings.cpp: orthogonalize, compile, programs, tune, bench, info
void register_optimizer(nanobind::module_& module);  // optimizer_bindings.cpp: the Muon + AdamW update rules on tensors
void register_zero(nanobind::module_& module);       // zero_bindings.cpp: the ZeRO planner and the distributed step

}  // namespace orthojit::python
