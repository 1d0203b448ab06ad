// The progress of tests/cuda_device_test, kept so that a run that dies still tells what it did and
// where it stopped. The device cases run kernels that have never run before (the sm_90a tile's
// wgmma/TMA/mbarrier kernels above all), and the two ways they fail worst end the process or
// everything after them:
//   - a kernel that hangs: "RUN <case>" is printed and flushed before each case, so a run killed
//     from outside names the case in flight; the JSON names it too ("running"). The watchdog
//     (--case-timeout) ends the run itself when one case takes too long: "HUNG <case> after N s",
//     the JSON with that case marked hung, exit code 3 (kExitHung).
//   - a fault that poisons the CUDA context (cuda/sticky_error.h): every later call in the process
//     would fail with the same error, hiding which kernels work. The case's own line, then
//     "STICKY <case>: <error>", the JSON, exit code 4 (kExitSticky).
// The JSON (--json FILE) is rewritten when a case starts and after it ends (FILE.tmp, then
// renamed over FILE, so a reader never sees half of one), "finished": false until the run's end.
#pragma once

#include <mutex>
#include <string>
#include <vector>

#include "bench/hang_watchdog.h"

namespace orthojit::device_test {

constexpr int kExitHung = bench::kExitHung;  // a case ran longer than --case-timeout
constexpr int kExitSticky = 4;  // a case's failure poisoned the CUDA context

struct CaseRecord {
  std::string name;
  bool ok = false;
  std::string message;
  // More members of the case's JSON object, rendered and each led by a comma:
  // ", \"tile_error\": 0.001, \"tile_tolerance\": 0.01".
  std::string fields;
  bool sticky = false;  // its failure poisoned the context (the run stopped after it)
};

// A JSON number (null for NaN and infinities, which JSON has no literal for).
std::string json_number(double value);

class CaseLog {
 public:
  // json_path: "" writes no file. case_timeout_seconds: the watchdog's limit per case (0: none).
  CaseLog(std::string json_path, double case_timeout_seconds);
  ~CaseLog();
  CaseLog(const CaseLog&) = delete;
  CaseLog& operator=(const CaseLog&) = delete;

  // The run's description in the JSON, written first: members rendered, comma-separated, without
  // a leading comma ("\"device\": \"NVIDIA H200 ...\", \"mode\": \"device\"").
  void set_header(std::string fields);
  // "RUN <what>", flushed: a phase that is not a case (not timed by the watchdog).
  void announce(const std::string& what);
  // "RUN <name>", flushed; the case is in flight (the JSON's "running") and timed from now.
  void begin(const std::string& name);
  // The case's result (printed by the caller): counted, in the JSON, no longer in flight.
  void finish(CaseRecord record);
  // Adds a result without writing the JSON (a batch of results, then one finish or complete()).
  void add(CaseRecord record);
  void set_not_applicable(int count);
  // After a failed case: when `sticky_error` is not empty, "STICKY <name>: <error>", the JSON with
  // the case marked and the run stopped, and exit code 4 without returning.
  void stop_if_sticky(const std::string& name, const std::string& sticky_error);
  // The end of the run: "finished": true.
  void complete();
  int passed() const;
  int failed() const;

 private:
  void add_locked(CaseRecord record);
  void write_json_locked() const;
  // The watchdog's callback: the case still in flight is recorded as hung (false when it is not).
  bool record_hung(const std::string& name, double seconds);

  const std::string json_path_;
  mutable std::mutex mutex_;
  std::string header_;
  std::vector<CaseRecord> records_;
  int passed_ = 0, failed_ = 0, not_applicable_ = 0;
  std::string running_;  // the case in flight, "" between cases
  std::string stopped_;  // why the run stopped before its end ("hung: ...", "sticky: ...")
  bool finished_ = false;
  // Last: its thread calls record_hung, so it stops before the members above are destroyed. Never
  // called with mutex_ held (record_hung takes mutex_ on the watchdog's thread).
  bench::HangWatchdog watchdog_;
};

}  // namespace orthojit::device_test
