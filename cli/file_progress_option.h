// The progress of a command that reads or writes a state file (inspect-state, convert-state):
// shown on stderr when it is a terminal, or everywhere with --progress (a log then gets one line
// per phase: what a job script wants when a multi-minute verification is part of it).
#pragma once

#include <memory>
#include <string>

#include "cli/arguments.h"
#include "runtime/muon/progress_line.h"

namespace orthojit::cli {

// The line to report through, or null when neither applies. `label`: "verifying FILE".
std::unique_ptr<runtime::ProgressLine> file_progress_line(const Arguments& arguments, const std::string& label);

// Its callback, or none for a null line.
runtime::FileProgressCallback callback_of(const std::unique_ptr<runtime::ProgressLine>& line);

}  // namespace orthojit::cli
