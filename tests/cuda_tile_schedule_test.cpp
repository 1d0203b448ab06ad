// The persistent schedule of the triangular products (compiler/cuda/tile_schedule.h): the host
// order visits every upper tile exactly once; the device decode (oj::grouped_upper_tile, run
// from the real device header in the host emulation) gives the host's tile for every index; the
// grouped order touches fewer panels per wave than the column order it replaced; the residency
// arithmetic matches hand-computed cases.
#include <gtest/gtest.h>

#include <set>
#include <unistd.h>

#include "cuda/tile_schedule.h"
#include "cuda_host_emulator.h"

namespace orthojit::cuda {
namespace {

TEST(CudaTileSchedule, EveryUpperTileExactlyOnce) {
  for (int tiles = 1; tiles <= 40; ++tiles)
    for (int group : {1, 2, 3, 5, 8, 16, tiles}) {
      const TriangularOrder order{tiles, group};
      std::set<std::pair<int, int>> seen;
      for (int64_t index = 0; index < order.upper_tiles(); ++index) {
        const auto [ti, tj] = order.tile(index);
        ASSERT_TRUE(0 <= ti && ti <= tj && tj < tiles) << "T " << tiles << " G " << group << " item " << index << ": (" << ti << ", " << tj << ")";
        ASSERT_TRUE(seen.insert({ti, tj}).second) << "T " << tiles << " G " << group << ": (" << ti << ", " << tj << ") twice";
      }
      EXPECT_EQ(static_cast<int64_t>(seen.size()), order.upper_tiles());
    }
  const TriangularOrder small{4, 2};
  EXPECT_THROW(small.tile(10), std::out_of_range);
  EXPECT_THROW(small.tile(-1), std::out_of_range);
}

// One band (G = T) is the column order of the non-persistent kernel (oj::upper_tile: index =
// tj(tj+1)/2 + ti), and a band sweeps its rectangle column by column.
TEST(CudaTileSchedule, OneBandIsTheColumnOrderAndBandsSweepColumns) {
  const TriangularOrder column{7, 7};
  int64_t index = 0;
  for (int tj = 0; tj < 7; ++tj)
    for (int ti = 0; ti <= tj; ++ti) EXPECT_EQ(column.tile(index++), std::make_pair(ti, tj));
  const TriangularOrder bands{5, 2};  // band rows {0,1}: (0,0) (0,1) (1,1) then (0,2) (1,2) (0,3) ...
  const std::pair<int, int> expected[] = {{0, 0}, {0, 1}, {1, 1}, {0, 2}, {1, 2}, {0, 3}, {1, 3}, {0, 4}, {1, 4}, {2, 2}, {2, 3}, {3, 3}, {2, 4}, {3, 4}, {4, 4}};
  for (int64_t i = 0; i < bands.upper_tiles(); ++i) EXPECT_EQ(bands.tile(i), expected[i]) << "item " << i;
}

// The order's point: the CTAs running at once (a wave of consecutive items) share panels. Mean
// distinct panels per wave, grouped (G = √wave) against one band (the column order).
TEST(CudaTileSchedule, GroupedOrderTouchesFewerPanelsPerWave) {
  auto mean_panels = [](const TriangularOrder& order, int64_t wave) {
    double total = 0;
    int waves = 0;
    for (int64_t first = 0; first < order.upper_tiles(); first += wave, ++waves) total += static_cast<double>(panels_in_wave(order, first, wave));
    return total / waves;
  };
  struct Case {
    int tiles;
    int64_t wave;
    double most;  // grouped / column at most
  };
  // 8192 rows in 64-row tiles with 264 CTAs (2 per SM): about 33 against 87 panels; 4096 rows
  // in 64-row tiles: 32.5 against 46.6; 4096 rows in 128-row tiles with 264 CTAs: a wave is half
  // the triangle, every panel is touched either way.
  for (const Case& c : {Case{128, 264, 0.45}, Case{64, 264, 0.75}, Case{128, 528, 0.6}, Case{32, 264, 1.05}}) {
    const TriangularOrder grouped{c.tiles, triangular_group(c.tiles, c.wave)}, column{c.tiles, c.tiles};
    const double ratio = mean_panels(grouped, c.wave) / mean_panels(column, c.wave);
    EXPECT_LE(ratio, c.most) << "T " << c.tiles << ", wave " << c.wave << ", G " << grouped.group;
  }
  EXPECT_EQ(triangular_group(128, 264), 16);
  EXPECT_EQ(triangular_group(4, 264), 4);  // never more than T
  EXPECT_EQ(triangular_group(10, 1), 1);
}

TEST(CudaTileSchedule, ResidentCtasAndThePersistentGrid) {
  // 256 threads at 128 registers: 32K registers per CTA, 2 per SM; 40 KiB of shared memory allows 5.
  EXPECT_EQ(resident_ctas_per_sm(256, 40960, 128), 2);
  // 128 threads: registers allow 4, shared memory (30 KiB) 7, threads 16.
  EXPECT_EQ(resident_ctas_per_sm(128, 30720, 128), 4);
  // Shared memory binds: 100 KiB per CTA, 2 fit in 227 KiB.
  EXPECT_EQ(resident_ctas_per_sm(64, 100 * 1024, 32), 2);
  // Registers round up to 8 per thread: 129 counts as 136 (65536 / (136 * 256) = 1.88).
  EXPECT_EQ(resident_ctas_per_sm(256, 0, 129), 1);
  EXPECT_EQ(resident_ctas_per_sm(1024, 200 * 1024, 255), 1);  // at least one
  EXPECT_EQ(persistent_ctas(136, 132, 4), 136);
  EXPECT_EQ(persistent_ctas(528, 132, 2), 264);
  EXPECT_EQ(persistent_ctas(0, 132, 2), 1);
}

// The device decode is the host one: a kernel that decodes every index of a T x T grid in bands of
// G with the real oj::grouped_upper_tile (the header's composed part, compiled on the host).
TEST(CudaTileSchedule, DeviceDecodeIsTheHostOrder) {
  if (!emulation::host_compiler_available()) GTEST_SKIP() << "no host c++ compiler to run the emulation";
  constexpr int kMost = 70;
  CudaProgram program;
  program.source =
      "#include \"orthojit_device.cuh\"\n"
      "extern \"C\" __global__ void decode(const float* __restrict__ in, float* __restrict__ out) {\n"
      "  const int T = static_cast<int>(in[0]), G = static_cast<int>(in[1]);\n"
      "  for (int index = static_cast<int>(threadIdx.x); index < T * (T + 1) / 2; index += static_cast<int>(blockDim.x)) {\n"
      "    int ti = -1, tj = -1;\n"
      "    oj::grouped_upper_tile(index, T, G, ti, tj);\n"
      "    out[2 * index] = static_cast<float>(ti);\n    out[2 * index + 1] = static_cast<float>(tj);\n"
      "  }\n}\n";
  Launch launch;
  launch.kernel = "decode";
  launch.block = 64;
  launch.args = {{Slot::Kind::Input, -1}, {Slot::Kind::Output, -1}};
  program.launches.push_back(launch);
  program.input_elements = 2;
  program.output_elements = kMost * (kMost + 1);
  emulation::HostEmulator emulator(program, std::filesystem::path(::testing::TempDir()) / ("orthojit_tile_schedule_" + std::to_string(::getpid())));
  for (int tiles : {1, 2, 7, 16, 33, 64, kMost})
    for (int group : {1, 3, 8, triangular_group(tiles, 264), tiles}) {
      const std::vector<float> output = emulator.run({static_cast<float>(tiles), static_cast<float>(group)}).output;
      const TriangularOrder order{tiles, group};
      for (int64_t index = 0; index < order.upper_tiles(); ++index) {
        const auto [ti, tj] = order.tile(index);
        ASSERT_EQ(output[static_cast<size_t>(2 * index)], static_cast<float>(ti)) << "T " << tiles << " G " << group << " item " << index;
        ASSERT_EQ(output[static_cast<size_t>(2 * index + 1)], static_cast<float>(tj)) << "T " << tiles << " G " << group << " item " << index;
      }
    }
}

}  // namespace
}  // namespace orthojit::cuda
