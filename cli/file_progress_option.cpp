#include "cli/file_progress_option.h"

namespace orthojit::cli {

std::unique_ptr<runtime::ProgressLine> file_progress_line(const Arguments& arguments, const std::string& label) {
  const bool terminal = runtime::stderr_is_terminal();
  if (!terminal && !arguments.has("progress")) return nullptr;
  return std::make_unique<runtime::ProgressLine>(label, terminal, runtime::stderr_sink());
}

runtime::FileProgressCallback callback_of(const std::unique_ptr<runtime::ProgressLine>& line) {
  if (!line) return {};
  return line->callback();
}

}  // namespace orthojit::cli
