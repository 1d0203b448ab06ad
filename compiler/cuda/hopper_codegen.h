// The products of a generated program (cuda_codegen.h) that run on the sm_90a tile
// (kernels/cuda/orthojit_hopper_product.cuh): which can, and the entry kernel and launch of each.
// The tile reads A, B and C and writes D through TMA tensor maps, so each must be in a planned
// buffer with 16-byte aligned rows and matrices: A, B and C bf16, A k-contiguous and B either k- or
// n-contiguous (wgmma reads an MN-major B through its transpose bit), C and D row-major, D bf16
// or f32. The kernel is persistent: a launch of grid[0] work items (the batch's tiles, the
// matrices the tensor maps' third dimension: a box never crosses into the next matrix) runs as
// about one CTA per SM (Launch::persistent). A triangular product visits its upper tiles only (in
// the grouped order of tile_schedule.h) and stores each tile and its transpose.
#pragma once

#include <ostream>
#include <string>

#include "cuda/codegen_vocabulary.h"
#include "cuda/cuda_codegen.h"

namespace orthojit::cuda {

// A product on the sm_90a tile (a fused Muon update is not run there: hopper_ineligible_reason).
struct HopperProductRequest : ProductRequest {
  // Split-K partials: split s of matrix z is matrix z·splits + s of D (an f32 workspace), with
  // α = 1 and no C or γ (the reduction kernel applies them). 1: the whole product.
  int splits = 1;
  // The tile's width: 128, or 256 (kWideTileN: dense, bf16 D, no split-K).
  int tile_n = 128;
};

// Whether K splits into `splits` parts of ceil(K tiles / splits) tiles of 64 with none empty
// (the kernel's split s takes tiles [s·q, min((s + 1)·q, K tiles))), at most kMaxSplits.
bool split_k_valid(int64_t k, int splits);

// Empty when the tile runs the product; else why not, in words.
std::string hopper_ineligible_reason(const HopperProductRequest& product);

// Appends the entry kernel to `source` and returns its launch: persistent over batch x (tiles of
// M x tiles of N, or the T(T+1)/2 upper tiles) work items, 384 threads, the tile's dynamic shared
// memory, tensor maps of A, B, C (when the product has one) and D, no pointer arguments; its
// summary without the node's name. Throws std::invalid_argument for an ineligible product.
Launch emit_hopper_product(std::ostream& source, const HopperProductRequest& product);

}  // namespace orthojit::cuda
