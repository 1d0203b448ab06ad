// The products of a generated program (cuda_codegen.h) on the pre-Hopper mma.sync tile
// (kernels/cuda/orthojit_mma_product.cuh): the generator writes only a description of each product
// (shape, tile, strides, the shared-memory index formulas of shared_layout.h, the epilogue's
// constants) and an entry kernel that instantiates the device template with it. The main loop,
// fragment loads and epilogue are written once, in the header.
#pragma once

#include <ostream>
#include <string>

#include "cuda/codegen_vocabulary.h"
#include "cuda/cuda_codegen.h"

namespace orthojit::cuda {

// A product on the mma.sync tile, with its tile (a triangular one runs persistent).
struct MmaProductRequest : ProductRequest {
  TileConfig tile;
  // With fused_update: statements that take the f32 value `v` of element (i, j) and the matrix's
  // argument words `io` (cuda_codegen.cpp's update_store).
  std::string update_statements;
  bool vector_epilogue = true;  // CodegenOptions::vector_epilogue
  int multiprocessors = 132;    // for the persistent grid of a triangular product
};

// Appends the product's description and entry kernel to `source` and returns its launch (summary
// without the node's name). Throws std::invalid_argument for a tile that cannot run it.
Launch emit_mma_product(std::ostream& source, const MmaProductRequest& product);

}  // namespace orthojit::cuda
