// AMX panel packing (layout in the header).
#include "cpu/amx_packing.h"

#include <algorithm>
#include <cstring>
#include <type_traits>
#if defined(__SSE2__)
#include <emmintrin.h>
#endif

#include "cpu/element_types.h"
#include "cpu/gemm_driver.h"

namespace orthojit::cpu {
namespace {

// The bits of `value` in the panel's element type (Bf16, or F16 for AMX-FP16), rounded to
// nearest even from f32 and f16 sources; a source already of that type is copied.
template <typename Pair>
inline uint16_t pair_bits(float value) { return from_float<Pair>(value).bits; }
template <typename Pair, typename T>
inline uint16_t pair_bits(T value) {
  if constexpr (std::is_same_v<T, Pair>) return value.bits;
  else return from_float<Pair>(to_float(value)).bits;
}

template <typename T, typename Pair>
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
        if constexpr (std::is_same_v<T, Pair>) {
          if (a.col_stride == 1 && count == kAmxKStep) {
            std::memcpy(step_target, source + k_begin, kAmxKStep * 2);
            continue;
          }
        }
        for (int64_t k = 0; k < count; ++k) step_target[k] = pair_bits<Pair>(source[(k_begin + k) * a.col_stride]);
        for (int64_t k = count; k < kAmxKStep; ++k) step_target[k] = 0;
      }
    }
  }
}

template <typename T, typename Pair>
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
#if defined(__SSE2__)
        if constexpr (std::is_same_v<T, Pair>) {
          if (valid_cols == kAmxTile && valid_k == kAmxKStep && b.col_stride == 1) {
            // Row-major B already of the pair type, a full tile: each pair row interleaves rows 2p and 2p+1 (SSE2
            // unpack of 16-bit lanes: 8 columns per instruction pair).
            const uint16_t* source = reinterpret_cast<const uint16_t*>(origin);
            for (int pair = 0; pair < kAmxTile; ++pair) {
              const uint16_t* even = source + 2 * pair * b.row_stride;
              const uint16_t* odd = even + b.row_stride;
              const __m128i e0 = _mm_loadu_si128(reinterpret_cast<const __m128i*>(even)), e1 = _mm_loadu_si128(reinterpret_cast<const __m128i*>(even + 8));
              const __m128i o0 = _mm_loadu_si128(reinterpret_cast<const __m128i*>(odd)), o1 = _mm_loadu_si128(reinterpret_cast<const __m128i*>(odd + 8));
              __m128i* target = reinterpret_cast<__m128i*>(tile + pair * 32);
              _mm_storeu_si128(target, _mm_unpacklo_epi16(e0, o0));
              _mm_storeu_si128(target + 1, _mm_unpackhi_epi16(e0, o0));
              _mm_storeu_si128(target + 2, _mm_unpacklo_epi16(e1, o1));
              _mm_storeu_si128(target + 3, _mm_unpackhi_epi16(e1, o1));
            }
            continue;
          }
          if (valid_cols == kAmxTile && valid_k == kAmxKStep && b.row_stride == 1) {
            // Transposed B (Xᵀ) already of the pair type: column j's pairs are 16 consecutive 32-bit values, so the
            // tile is a 16x16 transposition of 32-bit elements, done as 4x4 blocks in SSE registers.
            const uint16_t* source = reinterpret_cast<const uint16_t*>(origin);
            for (int j0 = 0; j0 < kAmxTile; j0 += 4)
              for (int p0 = 0; p0 < kAmxTile; p0 += 4) {
                __m128 r0 = _mm_castsi128_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(source + (j0 + 0) * b.col_stride + 2 * p0)));
                __m128 r1 = _mm_castsi128_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(source + (j0 + 1) * b.col_stride + 2 * p0)));
                __m128 r2 = _mm_castsi128_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(source + (j0 + 2) * b.col_stride + 2 * p0)));
                __m128 r3 = _mm_castsi128_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(source + (j0 + 3) * b.col_stride + 2 * p0)));
                _MM_TRANSPOSE4_PS(r0, r1, r2, r3);  // now r_q holds pair p0 + q of columns j0..j0+3
                _mm_storeu_si128(reinterpret_cast<__m128i*>(tile + (p0 + 0) * 32 + 2 * j0), _mm_castps_si128(r0));
                _mm_storeu_si128(reinterpret_cast<__m128i*>(tile + (p0 + 1) * 32 + 2 * j0), _mm_castps_si128(r1));
                _mm_storeu_si128(reinterpret_cast<__m128i*>(tile + (p0 + 2) * 32 + 2 * j0), _mm_castps_si128(r2));
                _mm_storeu_si128(reinterpret_cast<__m128i*>(tile + (p0 + 3) * 32 + 2 * j0), _mm_castps_si128(r3));
              }
            continue;
          }
        }
#endif
        if (b.col_stride == 1) {
          // Row-major B: each pair row interleaves two source rows, 16 values each.
          for (int k = 0; k < valid_k; ++k) {
            const T* __restrict source = origin + k * b.row_stride;
            uint16_t* __restrict target = tile + (k / 2) * 32 + (k % 2);
            for (int j = 0; j < valid_cols; ++j) target[2 * j] = pair_bits<Pair>(source[j]);
          }
        } else {
          // Transposed B (the Xᵀ of X·Xᵀ): a column is contiguous along k, so its pairs are too.
          for (int j = 0; j < valid_cols; ++j) {
            const T* __restrict source = origin + j * b.col_stride;
            uint16_t* __restrict target = tile + 2 * j;
            for (int k = 0; k < valid_k; ++k) target[(k / 2) * 32 + (k % 2)] = pair_bits<Pair>(source[k * b.row_stride]);
          }
        }
      }
  }
}

}  // namespace

void pack_amx_a(const MatrixView& a, int64_t k0, int64_t k_valid, int64_t kc_padded, int64_t first_panel, int64_t panels, uint16_t* out,
                bool f16_pairs) {
  dispatch_storage_type(a.type, [&](auto tag) {
    if (f16_pairs) pack_a<decltype(tag), F16>(a, k0, k_valid, kc_padded, first_panel, panels, out);
    else pack_a<decltype(tag), Bf16>(a, k0, k_valid, kc_padded, first_panel, panels, out);
  });
}

void pack_amx_b(const MatrixView& b, int64_t k0, int64_t k_valid, int64_t kc_padded, int64_t col0, int64_t cols, int64_t first_panel,
                int64_t panels, uint16_t* out, bool f16_pairs) {
  dispatch_storage_type(b.type, [&](auto tag) {
    if (f16_pairs) pack_b<decltype(tag), F16>(b, k0, k_valid, kc_padded, col0, cols, first_panel, panels, out);
    else pack_b<decltype(tag), Bf16>(b, k0, k_valid, kc_padded, col0, cols, first_panel, panels, out);
  });
}

}  // namespace orthojit::cpu
