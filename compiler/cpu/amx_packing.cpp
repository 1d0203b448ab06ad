// AMX panel packing (layout in the header).
#include "cpu/amx_packing.h"

#include <algorithm>
#include <cstring>

#include "cpu/element_types.h"
#include "cpu/gemm_driver.h"

namespace orthojit::cpu {
namespace {

inline uint16_t bf16_bits(float value) { return from_float<Bf16>(value).bits; }
inline uint16_t bf16_bits(Bf16 value) { return value.bits; }  // already bf16: the bits
inline uint16_t bf16_bits(F16 value) { return from_float<Bf16>(to_float(value)).bits; }

template <typename T>
void pack_a(const MatrixView& a, int64_t k0, int64_t k_valid, int64_t kc_padded, int64_t first_panel, int64_t panels, uint16_t* out) {
  const T* base = static_cast<const T*>(a.data);
  const int64_t steps = kc_padded / kAmxKStep;
  for (int64_t p = first_panel; p < first_panel + panels; ++p) {
    uint16_t* panel = out + p * amx_panel_elements(kc_padded);
    for (int r = 0; r < kAmxMicrotile; ++r) {
      const int64_t row = p * kAmxMicrotile + r;
      // Row r of the panel is row r % 16 of tile r / 16: at (s·2 + r/16)·512 + (r%16)·32 values.
      uint16_t* target = panel + (r / kAmxTile) * (kAmxTileBytes / 2) + (r % kAmxTile) * kAmxKStep;
      if (row >= a.rows) {
        for (int64_t s = 0; s < steps; ++s) std::memset(target + s * (kAmxTileBytes / 2) * 2, 0, kAmxKStep * 2);
        continue;
      }
      const T* source = base + row * a.row_stride + k0 * a.col_stride;
      for (int64_t s = 0; s < steps; ++s) {
        uint16_t* __restrict step_target = target + s * kAmxTileBytes;  // 2 tiles of 512 values per step
        const int64_t k_begin = s * kAmxKStep, count = std::clamp<int64_t>(k_valid - k_begin, 0, kAmxKStep);
        if constexpr (std::is_same_v<T, Bf16>) {
          if (a.col_stride == 1 && count == kAmxKStep) {
            std::memcpy(step_target, source + k_begin, kAmxKStep * 2);
            continue;
          }
        }
        for (int64_t k = 0; k < count; ++k) step_target[k] = bf16_bits(source[(k_begin + k) * a.col_stride]);
        for (int64_t k = count; k < kAmxKStep; ++k) step_target[k] = 0;
      }
    }
  }
}

template <typename T>
void pack_b(const MatrixView& b, int64_t k0, int64_t k_valid, int64_t kc_padded, int64_t col0, int64_t cols, int64_t first_panel, int64_t panels,
            uint16_t* out) {
  const T* base = static_cast<const T*>(b.data);
  const int64_t steps = kc_padded / kAmxKStep;
  for (int64_t p = first_panel; p < first_panel + panels; ++p) {
    uint16_t* panel = out + p * amx_panel_elements(kc_padded);
    for (int64_t s = 0; s < steps; ++s)
      for (int t = 0; t < 2; ++t) {
        uint16_t* __restrict tile = panel + (s * 2 + t) * (kAmxTileBytes / 2);
        const int64_t first_col = p * kAmxMicrotile + t * kAmxTile;  // within [0, cols)
        const int valid_cols = static_cast<int>(std::clamp<int64_t>(cols - first_col, 0, kAmxTile));
        const int64_t k_begin = s * kAmxKStep;
        const int valid_k = static_cast<int>(std::clamp<int64_t>(k_valid - k_begin, 0, kAmxKStep));
        if (valid_cols < kAmxTile || valid_k < kAmxKStep) std::memset(tile, 0, kAmxTileBytes);
        const T* origin = base + (k0 + k_begin) * b.row_stride + (col0 + first_col) * b.col_stride;
        if (b.col_stride == 1) {
          // Row-major B: each pair row interleaves two source rows, 16 values each.
          for (int k = 0; k < valid_k; ++k) {
            const T* __restrict source = origin + k * b.row_stride;
            uint16_t* __restrict target = tile + (k / 2) * 32 + (k % 2);
            for (int j = 0; j < valid_cols; ++j) target[2 * j] = bf16_bits(source[j]);
          }
        } else {
          // Transposed B (the Xᵀ of X·Xᵀ): a column is contiguous along k, so its pairs are too.
          for (int j = 0; j < valid_cols; ++j) {
            const T* __restrict source = origin + j * b.col_stride;
            uint16_t* __restrict target = tile + 2 * j;
            for (int k = 0; k < valid_k; ++k) target[(k / 2) * 32 + (k % 2)] = bf16_bits(source[k * b.row_stride]);
          }
        }
      }
  }
}

}  // namespace

void pack_amx_a(const MatrixView& a, int64_t k0, int64_t k_valid, int64_t kc_padded, int64_t first_panel, int64_t panels, uint16_t* out) {
  dispatch_storage_type(a.type, [&](auto tag) { pack_a<decltype(tag)>(a, k0, k_valid, kc_padded, first_panel, panels, out); });
}

void pack_amx_b(const MatrixView& b, int64_t k0, int64_t k_valid, int64_t kc_padded, int64_t col0, int64_t cols, int64_t first_panel,
                int64_t panels, uint16_t* out) {
  dispatch_storage_type(b.type, [&](auto tag) { pack_b<decltype(tag)>(b, k0, k_valid, kc_padded, col0, cols, first_panel, panels, out); });
}

}  // namespace orthojit::cpu
