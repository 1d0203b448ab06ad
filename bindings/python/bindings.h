// The pieces of the orthojit._orthojit extension module, one registration function per file.
#pragma once

#include <nanobind/nanobind.h>

#include <string>

#include "runtime/muon/file_progress.h"
#include "runtime/muon/optimizer_settings.h"

namespace orthojit::python {

// One optimizer setting from Python (a number, bool or string; muon.coefficients a triple):
// runtime::apply_setting's keys plus the experts' muon.precision = f64, muon.square_precision and
// muon.coefficients, and a cuda backend checked for. orthojit.Muon and orthojit.DistributedMuon
// read their settings through this one function (optimizer_bindings.cpp).
void apply_python_setting(runtime::OptimizerSettings& settings, const std::string& key, nanobind::handle value);
// The settings an orthojit._orthojit.MuonSettings object holds (a TypeError for anything else):
// DistributedMuon.from_deepspeed_config hands the config's settings to the distributed step.
const runtime::OptimizerSettings& settings_of(nanobind::handle muon_settings);

// A Python callable progress(phase, done, total) as a state file's progress callback (none for
// None). It is called with the GIL taken, from a transfer that released it; what it raises
// (KeyboardInterrupt at Ctrl-C, which Python delivers only while Python code runs) ends the
// transfer as a failed write or read does, and reaches the caller as itself.
runtime::FileProgressCallback python_progress(nanobind::handle progress);

void register_compiler(nanobind::module_& module);   // compiler_bindings.cpp: orthogonalize, compile, programs, tune, bench, info
void register_optimizer(nanobind::module_& module);  // optimizer_bindings.cpp: the Muon + AdamW update rules on tensors
void register_zero(nanobind::module_& module);       // zero_bindings.cpp: the ZeRO planner and the distributed step
void register_state_file(nanobind::module_& module); // state_file_bindings.cpp: the optimizer state file's tensors

}  // namespace orthojit::python
