// CUDA C++ generation from scheduled IR (after plan_buffers): one kernel per op with shapes,
// strides, tile sizes and coefficients baked in, and the launch sequence that runs them. The
// same schedule the CPU backend executes; host code decides tiles and grids (CUTLASS-style), so
// the math of the launch plan is tested on the host (tests/cuda_codegen_test.cpp).
//
//   gemm:      tensor-core m16n8k16 MMA (bf16/f16 operands, f32 accumulate), CTA tile BM x BN x BK
//              in shared memory with register-prefetched double buffering, fused epilogue
//              D = α·A·B + β·C + γ·I; symmetric results compute only the T(T+1)/2 upper tiles,
//              persistently (one wave of CTAs over the batch's upper tiles in the grouped order of
//              tile_schedule.h), and store each element and its mirror (exactly symmetric), the
//              mirrored tile through shared memory as 16-byte rows where D's layout allows
//              (shared_layout.h); dense products take the batch as grid.z.
//   normalize: per-block f32 (or f64) sums of squares in a fixed order, then one pass that sums
//              the partials (same order in every block: deterministic), divides and casts.
//   lincomb / output: element-wise, strides baked in (transposed views cost nothing).
//   gemm on sm_90a (CodegenOptions::hopper_products): the warp-specialized TMA + wgmma tile of
//              kernels/cuda/orthojit_hopper_product.cuh, instantiated per product (hopper_codegen.h).
//   Muon step (ir/muon_step.h): the fused momentum in both normalize kernels (M written by the
//              first, U recomputed by the second), the fused update in the epilogue of the
//              last product (or lincomb): no launch of their own.
#pragma once

#include <algorithm>
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "cuda/tensor_map_request.h"
#include "ir/function.h"

namespace orthojit::cuda {

// A GEMM tile configuration (the autotuner's CUDA search space). Threads = warps_m·warps_n·32;
// the warp tile (bm/warps_m) x (bn/warps_n) must be a multiple of 16 x 8.
struct TileConfig {
  int bm = 128, bn = 128, bk = 32, warps_m = 2, warps_n = 4;
  // The product runs on the sm_90a tile (hopper_codegen.h: TMA + wgmma, 128x128x64 or, from
  // sm90a_wide_tile(), 128x256x64, a producer and two consumer warpgroups), not the mma.sync
  // kernel; only sm90a_tile() and sm90a_wide_tile() set it. `splits`
  // > 1 (the sm_90a tile only): split-K, each split's partial product on the tile into an f32
  // workspace, then one element-wise kernel sums them in split order and applies the epilogue.
  bool sm90a = false;
  int splits = 1;
  int threads() const { return warps_m * warps_n * 32; }
  std::string label() const;        // "128x128x32/2x4", "sm90a", "sm90a/k3" (3 splits of K), "sm90a/n256"
  std::string invalid_reason() const;  // empty when valid
  // 16-bit A and B tiles with padded rows, in the larger of their two layouts: [rows][BK + 8] for a
  // k-contiguous operand, [BK][rows + 8] for an m- or n-contiguous one (shared_layout.h).
  int shared_bytes() const { return (std::max(bm * (bk + 8), bk * (bm + 8)) + std::max(bn * (bk + 8), bk * (bn + 8))) * 2; }
};
// The sm_90a tile as a per-product choice (CodegenOptions::gemm_tiles, the tuner's classes): its
// shape (128x128x64; 12 warps: 4 of them the producer) with sm90a set, K in `splits` splits
// (at most kMaxSplits). Labelled "sm90a" or "sm90a/kS".
constexpr int kMaxSplits = 16;
TileConfig sm90a_tile(int splits = 1);
// The sm_90a tile 128 x 256 (wgmma m64n256k16): dense products with a bf16 D, no split-K.
// Labelled "sm90a/n256".
TileConfig sm90a_wide_tile();

// The configurations the tests compile and the tuner searches.
std::vector<TileConfig> tile_configs();

// Which configuration a product of this size uses by default: small products (up to 512x512
// outputs) take the 64x64 tile; larger ones 128x128 when its CTAs (the T(T+1)/2 upper tiles of a
// triangular product, times the batch) fill the GPU's multiprocessors at least once, else 64x64
// (a 1024x1024 triangular product: 36 CTAs of 128 on 132 SMs, 136 of 64).
TileConfig default_tile_config(int64_t m, int64_t n, bool triangular = false, int64_t batch = 1, int multiprocessors = 132);

// Where a kernel argument points: the input (f32), the output (f32), a planned buffer, the
// normalization partial sums, or a Muon step's argument block (ir/muon_step.h: per matrix its
// gradient, momentum and parameter pointers and its scalars, uploaded before each run).
struct Slot {
  enum class Kind { Input, Output, Buffer, NormPartials, StepArgs } kind = Kind::Buffer;
  int buffer = -1;  // for Kind::Buffer
};

struct Launch {
  std::string kernel;
  int64_t grid[3] = {1, 1, 1};
  int block = 256;
  int shared_bytes = 0;  // static shared memory (for reporting; the kernels declare it)
  std::vector<Slot> args;
  std::string summary;  // "gemm %5 1024x4096x1024 tile 128x128x32/2x4"
  int dynamic_shared_bytes = 0;  // extern __shared__ bytes passed at launch (above 48 KiB the runtime opts in)
  // A product's launch: its index among the schedule's products (CodegenOptions::gemm_tiles),
  // shape, whether it computes the upper triangle only, and the tile it runs with.
  int product = -1;
  int64_t m = 0, n = 0, k = 0;
  bool triangular = false;
  TileConfig tile{};
  // A product on the sm_90a tile (hopper_codegen.h): its kernel takes these TMA tensor maps, as
  // __grid_constant__ parameters before `args`; the executable encodes them over the slots'
  // addresses once the workspace exists (so they point into planned buffers only).
  struct TensorMapArg {
    Slot slot;
    TensorMapRequest request;
  };
  std::vector<TensorMapArg> tensor_maps{};
  // A persistent kernel: grid[0] counts its work items, and it runs as one wave of CTAs that
  // loop over them (any count gives the same result): min(grid[0], multiprocessors x the CTAs one
  // SM keeps resident). The executable asks the driver's occupancy calculator for the resident
  // count (the registers ptxas gave the kernel decide it: 128x128 mma.sync tiles take ~210 per
  // thread where an estimate said 128, and a wave twice the real one queues half its CTAs behind
  // the other half); without a device, 1.
  bool persistent = false;
  int64_t ctas(int multiprocessors, int resident_per_sm = 1) const {
    return persistent && multiprocessors > 0 ? std::min<int64_t>(grid[0], int64_t{multiprocessors} * std::max(resident_per_sm, 1)) : grid[0];
  }
  bool hopper_tile() const { return !tensor_maps.empty(); }  // only the sm_90a tile reads through tensor maps
  // The slot the launch writes: its last argument, or on the sm_90a tile D's tensor map (the last).
  const Slot& destination() const { return hopper_tile() ? tensor_maps.back().slot : args.back(); }
  // Every slot it reads or writes: the tensor maps' and the arguments'.
  std::vector<Slot> operands() const {
    std::vector<Slot> all;
    for (const TensorMapArg& map : tensor_maps) all.push_back(map.slot);
    all.insert(all.end(), args.begin(), args.end());
    return all;
  }
};

struct CudaProgram {
  std::string source;                 // includes "orthojit_device.cuh" (kernels/cuda, handed to NVRTC by the caller)
  std::vector<Launch> launches;
  std::vector<int64_t> buffer_bytes;  // per planned buffer, for the whole batch
  int64_t norm_partials_bytes = 0;
  int64_t batch = 1, input_elements = 0, output_elements = 0;  // elements per matrix
  bool muon_step = false;  // a Muon step: no input or output; the StepArgs block instead
  int64_t step_args_bytes = 0;
  // A launch runs the sm_90a tile: compile for sm_90a (wgmma, setmaxnreg), run on CC 9.0 only.
  bool needs_sm90a() const {
    for (const Launch& launch : launches)
      if (launch.hopper_tile()) return true;
    return false;
  }
  // The NVRTC target of this program on a device whose own target is `device_target`.
  std::string compile_target(const std::string& device_target) const { return needs_sm90a() ? "sm_90a" : device_target; }
};

struct CodegenOptions {
  // Per-product tile override (the tuner's choice), by product in schedule order; a product past
  // the end or without a value takes default_tile_config. sm90a_tile() puts that product on the
  // sm_90a tile (generate_cuda throws, with the reason, for a product the tile cannot run).
  std::vector<std::optional<TileConfig>> gemm_tiles;
  // The target's multiprocessors, for the default tiles (132: H100 SXM and H200).
  int multiprocessors = 132;
  // 16-byte C loads and D stores in the products' epilogue where the layouts allow (row-major
  // 16-bit D with N and the strides multiples of 8, not triangular, no fused update); false: the
  // scalar epilogue everywhere (the tests compare the two bit for bit).
  bool vector_epilogue = true;
  // Every product the sm_90a tile can run (hopper_ineligible_reason) runs on it: TMA into swizzled
  // stages, wgmma, a producer and two consumer warpgroups; the others keep the mma.sync kernels
  // (their tiles from gemm_tiles).
  bool hopper_products = false;
};

// Throws std::invalid_argument for IR the CUDA backend does not run (f32 or f64 storage in a
// product: tensor cores take 16-bit operands here; unplanned IR).
CudaProgram generate_cuda(const ir::Function& scheduled, const CodegenOptions& options = {});

}  // namespace orthojit::cuda
