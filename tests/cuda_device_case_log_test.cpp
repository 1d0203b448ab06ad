// tests/cuda_device_test's progress log (cuda_device_case_log.h) without a GPU: the RUN lines, the
// JSON rewritten after every case (and naming the case in flight), the watchdog's HUNG and exit
// code 3, the STICKY stop and exit code 4, each leaving the JSON of everything done so far.
#include <gtest/gtest.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <limits>
#include <nlohmann/json.hpp>
#include <sstream>
#include <thread>

#include "cuda_device_case_log.h"

namespace orthojit::device_test {
namespace {

namespace fs = std::filesystem;

class CudaDeviceCaseLog : public ::testing::Test {
 protected:
  void SetUp() override {
    directory_ = fs::temp_directory_path() / ("cuda_device_case_log_test." + std::to_string(::getpid()) + "." +
                                              ::testing::UnitTest::GetInstance()->current_test_info()->name());
    fs::remove_all(directory_);
    fs::create_directories(directory_);
    json_ = (directory_ / "correctness.json").string();
  }
  void TearDown() override { fs::remove_all(directory_); }
  nlohmann::json read_json() const {
    std::ifstream file(json_);
    std::stringstream text;
    text << file.rdbuf();
    return nlohmann::json::parse(text.str());
  }
  fs::path directory_;
  std::string json_;
};

TEST_F(CudaDeviceCaseLog, TheJsonFollowsEveryCase) {
  CaseLog log(json_, 0);
  log.set_header("\"device\": \"test\", \"mode\": \"device\"");
  log.set_not_applicable(2);
  ::testing::internal::CaptureStdout();
  log.begin("case one");
  const std::string announced = ::testing::internal::GetCapturedStdout();
  EXPECT_EQ(announced, "RUN case one\n");
  nlohmann::json json = read_json();
  EXPECT_EQ(json.at("device"), "test");
  EXPECT_EQ(json.at("running"), "case one");
  EXPECT_EQ(json.at("finished"), false);
  EXPECT_TRUE(json.at("cases").empty());

  log.finish({"case one", true, "", ", \"tile_error\": " + json_number(1e-3) + ", \"tolerance\": " + json_number(std::numeric_limits<double>::infinity())});
  json = read_json();
  EXPECT_EQ(json.at("running"), "");
  ASSERT_EQ(json.at("cases").size(), 1u);
  EXPECT_EQ(json.at("cases")[0].at("case"), "case one");
  EXPECT_EQ(json.at("cases")[0].at("ok"), true);
  EXPECT_DOUBLE_EQ(json.at("cases")[0].at("tile_error").get<double>(), 1e-3);
  EXPECT_TRUE(json.at("cases")[0].at("tolerance").is_null()) << "an infinity is not JSON";

  log.begin("case two");
  log.finish({"case two", false, "line one\nline \"two\"", ""});
  json = read_json();
  EXPECT_EQ(json.at("passed"), 1);
  EXPECT_EQ(json.at("failed"), 1);
  EXPECT_EQ(json.at("not_applicable"), 2);
  EXPECT_EQ(json.at("cases")[1].at("message"), "line one\nline \"two\"");
  EXPECT_FALSE(fs::exists(json_ + ".tmp")) << "written aside, then renamed";
  log.complete();
  EXPECT_EQ(read_json().at("finished"), true);
  EXPECT_EQ(log.passed(), 1);
  EXPECT_EQ(log.failed(), 1);
}

TEST_F(CudaDeviceCaseLog, AHungCaseEndsTheRunWithItsName) {
  EXPECT_EXIT(
      {
        CaseLog log(json_, 0.5);
        log.begin("fast case");
        log.finish({"fast case", true, "", ""});
        std::fprintf(stderr, "started\n");
        log.begin("hanging case");
        std::this_thread::sleep_for(std::chrono::seconds(30));
      },
      ::testing::ExitedWithCode(kExitHung), "started");
  const nlohmann::json json = read_json();
  EXPECT_EQ(json.at("finished"), false);
  EXPECT_EQ(json.at("stopped"), "hung: hanging case");
  ASSERT_EQ(json.at("cases").size(), 2u);
  EXPECT_EQ(json.at("cases")[1].at("case"), "hanging case");
  EXPECT_EQ(json.at("cases")[1].at("hung"), true);
  EXPECT_EQ(json.at("cases")[1].at("ok"), false);
  EXPECT_EQ(json.at("failed"), 1);
}

TEST_F(CudaDeviceCaseLog, AStickyErrorEndsTheRunAfterItsCase) {
  EXPECT_EXIT(
      {
        CaseLog log(json_, 60);
        log.begin("faulting case");
        log.finish({"faulting case", false, "running x: CUDA_ERROR_ILLEGAL_ADDRESS", ""});
        log.stop_if_sticky("faulting case", "");  // the context survived: nothing happens
        std::fprintf(stderr, "survived\n");
        log.stop_if_sticky("faulting case", "running x: CUDA_ERROR_ILLEGAL_ADDRESS");
        std::fprintf(stderr, "returned\n");
      },
      ::testing::ExitedWithCode(kExitSticky), "survived\n$");
  const nlohmann::json json = read_json();
  EXPECT_EQ(json.at("finished"), false);
  EXPECT_EQ(json.at("stopped"), "sticky: faulting case: running x: CUDA_ERROR_ILLEGAL_ADDRESS");
  ASSERT_EQ(json.at("cases").size(), 1u);
  EXPECT_EQ(json.at("cases")[0].at("sticky"), true);
}

TEST_F(CudaDeviceCaseLog, NoWatchdogWithoutATimeout) {
  CaseLog log(json_, 0);
  log.begin("slow case");
  std::this_thread::sleep_for(std::chrono::milliseconds(600));
  log.finish({"slow case", true, "", ""});
  EXPECT_EQ(read_json().at("passed"), 1);
}

}  // namespace
}  // namespace orthojit::device_test
