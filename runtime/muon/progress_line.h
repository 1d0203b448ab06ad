// A state-file transfer's progress (runtime/muon/file_progress.h) as text: on a terminal one
// line rewritten in place at most ten times a second,
//   saving state.safetensors: write 12.0 GiB of 36.0 GiB (33%), 1.2 GiB/s
// and in a log (not a terminal) one line per phase when it ends, so that a log stays short and a
// job killed in the middle still shows the phases it finished:
//   saving state.safetensors: write 36.0 GiB in 31.2 s (1.2 GiB/s)
// The CLI writes it to stderr; orthojit.Muon's progress=True writes it to sys.stderr (the sink).
#pragma once

#include <cstdint>
#include <functional>
#include <string>

#include "runtime/muon/file_progress.h"

namespace orthojit::runtime {

// "944 bytes", "12.5 KiB", "288.0 MiB", "56.3 GiB", "1.2 TiB".
std::string byte_size_text(uint64_t bytes);

class ProgressLine {
 public:
  using Sink = std::function<void(const std::string& text)>;
  using Clock = std::function<double()>;  // seconds, monotonic

  // `interactive`: the sink is a terminal (lines rewritten in place with '\r'); otherwise a log.
  // `clock`: the steady clock unless a test gives its own.
  ProgressLine(std::string label, bool interactive, Sink sink, Clock clock = {});
  ~ProgressLine();
  ProgressLine(const ProgressLine&) = delete;
  ProgressLine& operator=(const ProgressLine&) = delete;

  void update(const FileProgress& progress);
  // The end of the transfer (also when it failed): a log gets the unfinished phase's line, a
  // terminal's line is cleared. Called by the destructor when not called before.
  void finish();
  // update() as a FileProgressCallback; the callback must not outlive this object.
  FileProgressCallback callback();

 private:
  void end_phase(double now);
  void draw(double now);
  std::string label_;
  bool interactive_;
  Sink sink_;
  Clock clock_;
  std::string phase_;
  uint64_t first_done_ = 0, done_ = 0, total_ = 0;
  double phase_start_ = 0, last_drawn_ = -1;
  bool phase_ended_ = true, finished_ = false;
  size_t drawn_width_ = 0;  // of the terminal line now shown, to blank what a shorter one leaves
};

// The sink and the test for the process's stderr (the CLI's).
ProgressLine::Sink stderr_sink();
bool stderr_is_terminal();

}  // namespace orthojit::runtime
