// ORTHOJIT_CUDA_SM_COUNT (cuda/sm_count_override.h) without a GPU: the count work is sized for,
// every malformed or out-of-range value refused naming the variable, the value and the valid
// range; and a persistent launch's wave from that count and the resident CTAs per SM.
#include <gtest/gtest.h>

#include <cstdlib>
#include <stdexcept>
#include <string>

#include "cuda/cuda_codegen.h"
#include "cuda/sm_count_override.h"

namespace orthojit::cuda {
namespace {

constexpr const char* kName = "ORTHOJIT_CUDA_SM_COUNT";

// The value for one check (nullptr: unset), the variable unset again afterwards.
int with_value(const char* value, int device) {
  if (value) ::setenv(kName, value, 1);
  else ::unsetenv(kName);
  struct Unset {
    ~Unset() { ::unsetenv(kName); }
  } unset;
  return multiprocessors_to_use(device);
}

TEST(SmCountOverride, UnsetOrEmptyUsesTheDevicesCount) {
  EXPECT_EQ(with_value(nullptr, 132), 132);
  EXPECT_EQ(with_value("", 114), 114);
}

TEST(SmCountOverride, AWholeNumberUpToTheDevicesCountIsUsed) {
  EXPECT_EQ(with_value("1", 132), 1);
  EXPECT_EQ(with_value("66", 132), 66);
  EXPECT_EQ(with_value("132", 132), 132);
}

TEST(SmCountOverride, AnythingElseIsRefusedSayingWhatIsValid) {
  for (const char* bad : {"0", "-3", "133", "4x", "two", " 4", "1e2", "99999999999999999999"}) {
    SCOPED_TRACE(bad);
    try {
      with_value(bad, 132);
      ADD_FAILURE() << "accepted";
    } catch (const std::runtime_error& error) {
      const std::string message = error.what();
      EXPECT_NE(message.find(std::string(kName) + "='" + bad + "'"), std::string::npos) << message;
      EXPECT_NE(message.find("from 1 to 132"), std::string::npos) << message;
    }
  }
}

// A persistent launch runs one wave: the SMs work is sized for times the CTAs one SM holds, never
// more CTAs than work items; a launch that is not persistent runs its grid as it is.
TEST(SmCountOverride, APersistentLaunchRunsOneWaveOfTheSizedSms) {
  Launch launch;
  launch.grid[0] = 528;
  launch.persistent = true;
  EXPECT_EQ(launch.ctas(132, 1), 132);
  EXPECT_EQ(launch.ctas(132, 2), 264);
  EXPECT_EQ(launch.ctas(132, 5), 528);
  EXPECT_EQ(launch.ctas(1, 3), 3);
  EXPECT_EQ(launch.ctas(0, 3), 528) << "no device count: a CTA per item";
  launch.persistent = false;
  EXPECT_EQ(launch.ctas(1, 3), 528);
}

}  // namespace
}  // namespace orthojit::cuda
