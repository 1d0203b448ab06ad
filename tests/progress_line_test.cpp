// The text of a state file's progress (runtime/muon/progress_line.h), on a clock the test
// advances: a log's one line per finished phase with bytes, seconds and rate; a terminal's
// redraws at most ten times a second, blanking what a shorter line leaves, cleared at the end.
#include <gtest/gtest.h>

#include <algorithm>
#include <string>
#include <vector>

#include "runtime/muon/progress_line.h"

namespace orthojit {
namespace {

struct Recorder {
  std::vector<std::string> texts;
  double now = 100.0;
  runtime::ProgressLine make(bool interactive) {
    return runtime::ProgressLine("saving s.safetensors", interactive, [this](const std::string& text) { texts.push_back(text); },
                                 [this] { return now; });
  }
};

constexpr uint64_t kMiB = uint64_t{1} << 20;

TEST(ProgressLine, ALogGetsOneLinePerFinishedPhase) {
  Recorder recorder;
  {
    runtime::ProgressLine line = recorder.make(false);
    // 8 MiB written over 4 s in 1 MiB pieces, then the checksum of the last 4 MiB over 1 s, then
    // a flush of 0.5 s.
    line.update({"write", 0, 8 * kMiB});
    for (uint64_t piece = 1; piece <= 8; ++piece) {
      recorder.now += 0.5;
      line.update({"write", piece * kMiB, 8 * kMiB});
    }
    line.update({"checksum", 4 * kMiB, 8 * kMiB});
    recorder.now += 1.0;
    line.update({"checksum", 8 * kMiB, 8 * kMiB});
    line.update({"sync", 0, 1});
    recorder.now += 0.5;
    line.update({"sync", 1, 1});
    EXPECT_EQ(recorder.texts.size(), 3u) << "a log line per piece";
    line.finish();
  }
  ASSERT_EQ(recorder.texts.size(), 3u) << "finish added a line to a log whose phases all ended";
  EXPECT_EQ(recorder.texts[0], "saving s.safetensors: write 8.0 MiB in 4.0 s (2.0 MiB/s)\n");
  EXPECT_EQ(recorder.texts[1], "saving s.safetensors: checksum 4.0 MiB in 1.0 s (4.0 MiB/s)\n");
  EXPECT_EQ(recorder.texts[2], "saving s.safetensors: sync in 0.5 s\n");
}

// A reader of a part of the file (a rank of the distributed optimizer) never reaches the total:
// its phase ends when the next begins, or at finish, with the bytes it moved.
TEST(ProgressLine, AnUnfinishedPhaseEndsAtTheNextOrAtFinish) {
  Recorder recorder;
  runtime::ProgressLine line = recorder.make(false);
  line.update({"read", 0, 10 * kMiB});
  recorder.now += 2.0;
  line.update({"read", 3 * kMiB, 10 * kMiB});
  line.update({"checksum", 0, 10 * kMiB});
  recorder.now += 1.0;
  line.update({"checksum", 2 * kMiB, 10 * kMiB});
  ASSERT_EQ(recorder.texts.size(), 1u);
  EXPECT_EQ(recorder.texts[0], "saving s.safetensors: read 3.0 MiB in 2.0 s (1.5 MiB/s)\n");
  line.finish();
  ASSERT_EQ(recorder.texts.size(), 2u);
  EXPECT_EQ(recorder.texts[1], "saving s.safetensors: checksum 2.0 MiB in 1.0 s (2.0 MiB/s)\n");
  line.finish();
  EXPECT_EQ(recorder.texts.size(), 2u) << "a second finish repeated the line";
}

TEST(ProgressLine, ATerminalLineIsRedrawnTenTimesASecondAndCleared) {
  Recorder recorder;
  runtime::ProgressLine line = recorder.make(true);
  // 1000 pieces, one every millisecond: one second of writing.
  line.update({"write", 0, 1000 * kMiB});
  for (uint64_t piece = 1; piece < 1000; ++piece) {
    recorder.now += 0.001;
    line.update({"write", piece * kMiB, 1000 * kMiB});
  }
  EXPECT_GE(recorder.texts.size(), 9u);
  EXPECT_LE(recorder.texts.size(), 12u) << "redrawn more than ten times a second";
  for (const std::string& text : recorder.texts) {
    ASSERT_EQ(text.front(), '\r');
    EXPECT_EQ(text.find('\n'), std::string::npos) << "a terminal line ended with a newline: " << text;
  }
  EXPECT_NE(recorder.texts.back().find("saving s.safetensors: write "), std::string::npos);
  EXPECT_NE(recorder.texts.back().find(" of 1000.0 MiB ("), std::string::npos) << recorder.texts.back();
  // A shorter line blanks the rest of the longer one before it.
  line.update({"sync", 0, 1});
  const std::string& before = recorder.texts[recorder.texts.size() - 2];
  const std::string& sync = recorder.texts.back();
  EXPECT_GT(before.size(), sync.find_last_not_of(' ') + 1) << "the test needs a shorter line after a longer one";
  EXPECT_EQ(sync.size(), before.size()) << "the shorter line left the longer one's end visible: " << sync;
  EXPECT_NE(recorder.texts.back().find("sync (flushing to the disk)"), std::string::npos) << recorder.texts.back();
  line.finish();
  const std::string cleared = recorder.texts.back();
  EXPECT_EQ(cleared.front(), '\r');
  EXPECT_EQ(cleared.back(), '\r');
  EXPECT_EQ(cleared.find_first_not_of(' ', 1), cleared.size() - 1) << "finish left text on the line";
}

TEST(ProgressLine, ByteSizes) {
  EXPECT_EQ(runtime::byte_size_text(944), "944 bytes");
  EXPECT_EQ(runtime::byte_size_text(12800), "12.5 KiB");
  EXPECT_EQ(runtime::byte_size_text(288 * kMiB), "288.0 MiB");
  EXPECT_EQ(runtime::byte_size_text(uint64_t{5} << 40), "5.0 TiB");
}

}  // namespace
}  // namespace orthojit
