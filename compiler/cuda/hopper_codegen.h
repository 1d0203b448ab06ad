// The products of a generated program (cuda_codegen.h) that run on the sm_90a tile
// (kernels/cuda/orthojit_hopper_product.cuh): which can, and the entry kernel and launch of each.
// The tile reads A and B through TMA tensor maps, so both must be bf16 in planned buffers with
// 16-byte aligned rows, A k-contiguous and B either k- or n-contiguous (wgmma reads an MN-major B
// through its transpose bit); C and D are plain pointers. A batch is grid.z, its matrices the
// tensor maps' third dimension (a box never crosses into the next matrix). A triangular product launches its upper
// tiles only (in the grouped order of tile_schedule.h) and stores each value and its mirror.
#pragma once

#include <ostream>
#include <string>

#include "cuda/codegen_vocabulary.h"
#include "cuda/cuda_codegen.h"

namespace orthojit::cuda {

// One product D = α·A·B + β·C + γ·I as generate_cuda sees it.
struct HopperProductRequest {
  std::string kernel;  // the entry kernel's name
  View a, b, c, d;     // c ignored without has_c
  bool has_c = false;
  int64_t m = 0, n = 0, k = 0, batch = 1;
  bool triangular = false;    // D symmetric: the upper tiles only, each value stored twice
  bool fused_update = false;  // a Muon step's update in the epilogue (not on this tile)
  double alpha = 1, beta = 0, gamma = 0;
};

// Empty when the tile runs the product; else why not, in words.
std::string hopper_ineligible_reason(const HopperProductRequest& product);

// Appends the entry kernel to `source` and returns its launch: grid (tiles of N, tiles of M) or
// the T(T+1)/2 upper tiles, 384 threads, the tile's dynamic shared memory, tensor maps of A and B,
// then C (or none) and D; its summary without the node's name. Throws std::invalid_argument for an ineligible product.
Launch emit_hopper_product(std::ostream& source, const HopperProductRequest& product);

}  // namespace orthojit::cuda
