// Packing for the AMX-BF16 kernel (amx_codegen.h): bf16 panels in the layout the tiles load with
// one contiguous 1 KiB TILELOADD each, fused with the rounding of f32/f16 sources to bf16 (f16
// panels, of f16 or f32 sources, for the AMX-FP16 kernel: the same layout, 16-bit elements).
//
// A tile of TDPBF16PS's A operand is 16 rows x 32 bf16 (64 bytes a row, K along the row); its B
// operand is 16 rows of K pairs x 16 columns, each 32-bit element the pair (B[2p][j], B[2p+1][j])
// ("VNNI" layout, Intel SDM vol. 2, TDPBF16PS; Intel Optimization Manual, AMX chapter). A panel
// covers 32 rows of A (two A tiles) or 32 columns of B (two B tiles) and a K block of kc values,
// kc a multiple of 32 (zero-padded: a zero k contributes exactly 0), in steps of 32 k:
//
//   A panel:  step s, tile t (rows 16t..16t+15), row r, k in 0..31
//             byte ((s·2 + t)·16 + r)·64 + k·2             = A[row0 + 16t + r][k0 + 32s + k]
//   B panel:  step s, tile t (cols 16t..16t+15), pair p in 0..15, column c, e in {0, 1}
//             byte ((s·2 + t)·16 + p)·64 + c·4 + e·2       = B[k0 + 32s + 2p + e][col0 + 16t + c]
//
// so each tile is 1 KiB at (s·2 + t)·1 KiB, row stride 64 bytes. Rows of A and columns of B past
// the matrix are zero too (the kernel's edge shapes never load them, but a full tile may).
#pragma once

#include <cstdint>

namespace orthojit::cpu {

struct MatrixView;

constexpr int kAmxTile = 16;          // rows of a tile, f32 columns of an accumulator tile
constexpr int kAmxMicrotile = 32;     // rows/columns of the kernel's 2x2 accumulator tiles
constexpr int kAmxKStep = 32;         // bf16 k values per TDPBF16PS
constexpr int64_t kAmxTileBytes = 1024;

inline int64_t amx_padded_k(int64_t k) { return (k + kAmxKStep - 1) / kAmxKStep * kAmxKStep; }
inline int64_t amx_panel_elements(int64_t kc_padded) { return kc_padded * kAmxMicrotile; }  // bf16 values per panel

// Rows [row0, row0 + 32·panels) of `a` (32-row panels from first_panel on, rows >= a.rows zero) x
// k in [k0, k0 + k_valid), padded to kc_padded; `out` is the start of panel 0.
// f16_pairs: the panels hold f16 (AMX-FP16's TDPFP16PS) instead of bf16, in the same layout.
void pack_amx_a(const MatrixView& a, int64_t k0, int64_t k_valid, int64_t kc_padded, int64_t first_panel, int64_t panels, uint16_t* out,
                bool f16_pairs = false);
// Columns [col0 + 32·p, ...) of `b` for p in [first_panel, first_panel + panels), columns >= col0 +
// cols zero, k rows [k0, k0 + k_valid) padded to kc_padded.
void pack_amx_b(const MatrixView& b, int64_t k0, int64_t k_valid, int64_t kc_padded, int64_t col0, int64_t cols, int64_t first_panel,
                int64_t panels, uint16_t* out, bool f16_pairs = false);

}  // namespace orthojit::cpu
