// The progress of tests/cuda_device_test (cuda_device_case_log.h).
#include "cuda_device_case_log.h"

#include <unistd.h>

#include <cmath>
#include <cstdio>
#include <fstream>

#include "bench/json_text.h"

namespace orthojit::device_test {

using bench::json_string;

std::string json_number(double value) {
  if (!std::isfinite(value)) return "null";
  char text[32];
  std::snprintf(text, sizeof text, "%.6g", value);
  return text;
}

CaseLog::CaseLog(std::string json_path, double case_timeout_seconds)
    : json_path_(std::move(json_path)), watchdog_(case_timeout_seconds, [this](const std::string& name, double seconds) { return record_hung(name, seconds); }) {}

CaseLog::~CaseLog() = default;

void CaseLog::set_header(std::string fields) {
  std::lock_guard<std::mutex> lock(mutex_);
  header_ = std::move(fields);
  write_json_locked();
}

void CaseLog::announce(const std::string& what) {
  std::printf("RUN %s\n", what.c_str());
  std::fflush(stdout);
}

void CaseLog::begin(const std::string& name) {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    running_ = name;
    std::printf("RUN %s\n", name.c_str());
    std::fflush(stdout);
    write_json_locked();
  }
  watchdog_.begin(name);
}

void CaseLog::add_locked(CaseRecord record) {
  (record.ok ? passed_ : failed_) += 1;
  records_.push_back(std::move(record));
}

void CaseLog::add(CaseRecord record) {
  std::lock_guard<std::mutex> lock(mutex_);
  add_locked(std::move(record));
}

void CaseLog::finish(CaseRecord record) {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    add_locked(std::move(record));
    running_.clear();
    write_json_locked();
  }
  watchdog_.idle();
}

void CaseLog::set_not_applicable(int count) {
  std::lock_guard<std::mutex> lock(mutex_);
  not_applicable_ = count;
}

void CaseLog::stop_if_sticky(const std::string& name, const std::string& sticky_error) {
  if (sticky_error.empty()) return;
  std::lock_guard<std::mutex> lock(mutex_);
  for (auto record = records_.rbegin(); record != records_.rend(); ++record)
    if (record->name == name) {
      record->sticky = true;
      break;
    }
  running_.clear();
  stopped_ = "sticky: " + name + ": " + sticky_error;
  std::printf("STICKY %s: %s\n", name.c_str(), sticky_error.c_str());
  std::printf("(the CUDA context is unusable after this error: every later call in this process would fail with it; the cases after this one were not run)\n");
  std::fflush(stdout);
  write_json_locked();
  // No static destructors or atexit handlers: they would call into the poisoned context.
  _exit(kExitSticky);
}

void CaseLog::complete() {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    running_.clear();
    finished_ = true;
    write_json_locked();
  }
  watchdog_.idle();
}

int CaseLog::passed() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return passed_;
}

int CaseLog::failed() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return failed_;
}

void CaseLog::write_json_locked() const {
  if (json_path_.empty()) return;
  const std::string temporary = json_path_ + ".tmp";
  {
    std::ofstream json(temporary, std::ios::trunc);
    json << "{\n" << (header_.empty() ? "" : "  " + header_ + ",\n") << "  \"finished\": " << (finished_ ? "true" : "false")
         << ", \"stopped\": " << json_string(stopped_) << ", \"running\": " << json_string(running_) << ",\n  \"passed\": " << passed_ << ", \"failed\": " << failed_
         << ", \"not_applicable\": " << not_applicable_ << ",\n  \"cases\": [\n";
    for (size_t index = 0; index < records_.size(); ++index) {
      const CaseRecord& record = records_[index];
      json << (index ? ",\n" : "") << "    {\"case\": " << json_string(record.name) << ", \"ok\": " << (record.ok ? "true" : "false") << record.fields
           << (record.sticky ? ", \"sticky\": true" : "") << ", \"message\": " << json_string(record.message) << "}";
    }
    json << "\n  ]\n}\n";
    if (!json) {
      std::fprintf(stderr, "cuda_device_test: could not write %s\n", temporary.c_str());
      return;
    }
  }
  if (std::rename(temporary.c_str(), json_path_.c_str()) != 0) std::fprintf(stderr, "cuda_device_test: could not rename %s to %s\n", temporary.c_str(), json_path_.c_str());
}

bool CaseLog::record_hung(const std::string& name, double seconds) {
  std::lock_guard<std::mutex> lock(mutex_);
  if (running_ != name) return false;  // it finished as the watchdog looked
  // The case never returns (a kernel that does not finish keeps cuCtxSynchronize waiting): the
  // record says so, and the process ends from the watchdog's thread, the main thread still
  // blocked in the driver.
  char message[160];
  std::snprintf(message, sizeof message, "hung: no result after %.0f s (--case-timeout %.0f)", seconds, watchdog_.limit_seconds());
  add_locked({name, false, message, ", \"hung\": true"});
  running_.clear();
  stopped_ = "hung: " + name;
  bench::HangWatchdog::print_hung(name, seconds);
  write_json_locked();
  return true;
}

}  // namespace orthojit::device_test
