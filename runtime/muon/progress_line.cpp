#include "runtime/muon/progress_line.h"

#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <utility>

namespace orthojit::runtime {

namespace {

constexpr double kRedrawSeconds = 0.1;  // a terminal line is redrawn at most ten times a second

double steady_seconds() { return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count(); }

std::string rate_text(uint64_t bytes, double seconds) {
  if (!(seconds > 0)) return "";
  return byte_size_text(static_cast<uint64_t>(static_cast<double>(bytes) / seconds)) + "/s";
}

std::string seconds_text(double seconds) {
  char text[32];
  std::snprintf(text, sizeof text, "%.1f s", seconds);
  return text;
}

}  // namespace

std::string byte_size_text(uint64_t bytes) {
  if (bytes < 1024) return std::to_string(bytes) + " bytes";
  const char* units[] = {"KiB", "MiB", "GiB", "TiB"};
  double value = static_cast<double>(bytes) / 1024;
  int unit = 0;
  while (value >= 1024 && unit < 3) {
    value /= 1024;
    ++unit;
  }
  char text[32];
  std::snprintf(text, sizeof text, "%.1f %s", value, units[unit]);
  return text;
}

ProgressLine::ProgressLine(std::string label, bool interactive, Sink sink, Clock clock)
    : label_(std::move(label)), interactive_(interactive), sink_(std::move(sink)), clock_(clock ? std::move(clock) : Clock(steady_seconds)) {}

ProgressLine::~ProgressLine() {
  try {
    finish();
  } catch (...) {  // a sink that fails at the end (a closed stream) loses only the last line
  }
}

FileProgressCallback ProgressLine::callback() {
  return [this](const FileProgress& progress) { update(progress); };
}

void ProgressLine::update(const FileProgress& progress) {
  const double now = clock_();
  if (progress.phase != phase_ || phase_ended_) {
    // A new phase (or the same one again after it ended: a second read after the checksum).
    if (!phase_ended_) end_phase(now);
    phase_ = std::string(progress.phase);
    first_done_ = progress.done;
    phase_start_ = now;
    phase_ended_ = false;
    last_drawn_ = -1;
  }
  done_ = progress.done;
  total_ = progress.total;
  if (done_ >= total_) {
    end_phase(now);
    return;
  }
  if (interactive_ && (last_drawn_ < 0 || now - last_drawn_ >= kRedrawSeconds)) draw(now);
}

void ProgressLine::draw(double now) {
  std::string text = label_ + ": " + phase_;
  if (phase_ == "sync") {
    text += " (flushing to the disk)";
  } else {
    text += " " + byte_size_text(done_) + " of " + byte_size_text(total_);
    if (total_ > 0) text += " (" + std::to_string(done_ * 100 / total_) + "%)";
    const std::string rate = rate_text(done_ - std::min(done_, first_done_), now - phase_start_);
    if (!rate.empty()) text += ", " + rate;
  }
  const size_t width = text.size();
  if (width < drawn_width_) text += std::string(drawn_width_ - width, ' ');
  drawn_width_ = width;
  sink_("\r" + text);
  last_drawn_ = now;
}

void ProgressLine::end_phase(double now) {
  phase_ended_ = true;
  const double seconds = now - phase_start_;
  if (interactive_) {
    draw(now);  // the phase at its end, until the next phase (or finish) replaces it
    return;
  }
  const uint64_t moved = done_ - std::min(done_, first_done_);
  std::string text = label_ + ": " + phase_;
  if (phase_ != "sync") text += " " + byte_size_text(moved);
  text += " in " + seconds_text(seconds);
  const std::string rate = phase_ == "sync" ? "" : rate_text(moved, seconds);
  if (!rate.empty()) text += " (" + rate + ")";
  sink_(text + "\n");
}

void ProgressLine::finish() {
  if (finished_) return;
  finished_ = true;
  if (!phase_ended_) end_phase(clock_());
  if (interactive_ && drawn_width_ > 0) sink_("\r" + std::string(drawn_width_, ' ') + "\r");
}

ProgressLine::Sink stderr_sink() {
  return [](const std::string& text) {
    std::fputs(text.c_str(), stderr);
    std::fflush(stderr);
  };
}

bool stderr_is_terminal() { return ::isatty(::fileno(stderr)) != 0; }

}  // namespace orthojit::runtime
