// Blocked GEMM: for each K block: pack A (all rows, MR-row panels) and, per N block, pack B
// (NR-column panels); then tasks of (MC rows x a share of the N block) run the microkernel over
// their microtiles. The last K block applies the epilogue to each microtile while it is in L1.
// Every element of D is accumulated in K order by exactly one task: deterministic for any threads.
#include "cpu/gemm_driver.h"

#include <algorithm>
#if defined(__SSE2__)
#include <emmintrin.h>
#include <xmmintrin.h>
#endif
#include <cstring>
#include <type_traits>
#include <vector>
#include <cstdlib>
#include <memory>
#include <new>
#include <stdexcept>
#include <vector>

#include "cpu/aligned_buffer.h"
#include "cpu/amx_packing.h"
#include "cpu/operand_widening.h"
#include "cpu/element_types.h"
#include "support/host_clones.h"

namespace orthojit::cpu {
namespace {

int64_t round_up(int64_t value, int64_t multiple) { return (value + multiple - 1) / multiple * multiple; }

// dst[c][r] = src[r][c] for a 4x4 block of floats (strides in floats). Packing is a transposition
// for A panels of a row-major A and for B panels of a transposed B; SSE2 (baseline x86-64) moves
// the block with 4 loads, 8 shuffles and 4 stores instead of 16 scalar copies.
inline void transpose_4x4(const float* src, int64_t src_stride, float* dst, int64_t dst_stride) {
#if defined(__SSE2__)
  __m128 r0 = _mm_loadu_ps(src), r1 = _mm_loadu_ps(src + src_stride), r2 = _mm_loadu_ps(src + 2 * src_stride),
         r3 = _mm_loadu_ps(src + 3 * src_stride);
  _MM_TRANSPOSE4_PS(r0, r1, r2, r3);
  _mm_storeu_ps(dst, r0);
  _mm_storeu_ps(dst + dst_stride, r1);
  _mm_storeu_ps(dst + 2 * dst_stride, r2);
  _mm_storeu_ps(dst + 3 * dst_stride, r3);
#else
  for (int r = 0; r < 4; ++r)
    for (int c = 0; c < 4; ++c) dst[c * dst_stride + r] = src[r * src_stride + c];
#endif
}

// Packs rows [row0, row0 + rows) x columns [k0, k0 + kc) of `a` into MR-row panels, (MR, kc)
// k-major per panel, zero-padding the last panel. Writes are contiguous (k outer, rows inner);
// the MR source rows are read as MR sequential streams, which the hardware prefetchers follow.
template <typename T>
void pack_a_panels(const MatrixView& a, int64_t row0, int64_t rows, int64_t k0, int64_t kc, int mr, int64_t first_panel, int64_t panels,
                   float* out) {
  const T* base = static_cast<const T*>(a.data);
  const T* sources[64];
  for (int64_t p = first_panel; p < first_panel + panels; ++p) {
    float* panel = out + p * kc * mr;
    const int valid = static_cast<int>(std::min<int64_t>(mr, rows - p * mr));
    for (int i = 0; i < valid; ++i) sources[i] = base + (row0 + p * mr + i) * a.row_stride + k0 * a.col_stride;
    const int64_t step = a.col_stride;
    if constexpr (std::is_same_v<T, float>) {
      if (valid == mr && step == 1 && mr % 4 == 0) {
        // Row-major f32 A: 4 rows x 4 k at a time, transposed into the (kc, MR) panel.
        int64_t k = 0;
        for (; k + 4 <= kc; k += 4)
          for (int i = 0; i < mr; i += 4) transpose_4x4(sources[i] + k, a.row_stride, panel + k * mr + i, mr);
        for (; k < kc; ++k)
          for (int i = 0; i < mr; ++i) panel[k * mr + i] = sources[i][k];
        continue;
      }
    }
    if (valid == mr && step == 1) {
      // Full panel of row-major A: blocks of 8 k at a time, so each source row is read a cache
      // line at a time and the panel is written contiguously.
      int64_t k = 0;
      for (; k + 8 <= kc; k += 8)
        for (int i = 0; i < mr; ++i) {
          const T* __restrict source = sources[i] + k;
          float* __restrict target = panel + k * mr + i;
          float run[8];  // converted as one vector, then spread down the panel
          for (int t = 0; t < 8; ++t) run[t] = to_float(source[t]);
          for (int t = 0; t < 8; ++t) target[t * mr] = run[t];
        }
      for (; k < kc; ++k)
        for (int i = 0; i < mr; ++i) panel[k * mr + i] = to_float(sources[i][k]);
      continue;
    }
    for (int64_t k = 0; k < kc; ++k) {
      float* target = panel + k * mr;
      for (int i = 0; i < valid; ++i) target[i] = to_float(sources[i][k * step]);
      for (int i = valid; i < mr; ++i) target[i] = 0.0f;
    }
  }
}

// Packs rows [k0, k0 + kc) x columns [col0, col0 + cols) of `b` into NR-column panels, (kc, NR)
// k-major per panel, zero-padding the last panel. Writes are contiguous; a row-major B is read
// contiguously too, a transposed one (Xᵀ) as NR sequential streams.
template <typename T>
void pack_b_panels(const MatrixView& b, int64_t k0, int64_t kc, int64_t col0, int64_t cols, int nr, int64_t first_panel, int64_t panels,
                   float* out) {
  const T* base = static_cast<const T*>(b.data);
  for (int64_t p = first_panel; p < first_panel + panels; ++p) {
    float* panel = out + p * kc * nr;
    const int valid = static_cast<int>(std::min<int64_t>(nr, cols - p * nr));
    const T* origin = base + k0 * b.row_stride + (col0 + p * nr) * b.col_stride;
    if constexpr (std::is_same_v<T, float>) {
      if (b.row_stride == 1 && valid == nr && nr % 4 == 0) {
        // Transposed f32 B (Xᵀ): 4 columns x 4 k at a time, transposed into the (kc, NR) panel.
        int64_t k = 0;
        for (; k + 4 <= kc; k += 4)
          for (int j = 0; j < nr; j += 4) transpose_4x4(origin + j * b.col_stride + k, b.col_stride, panel + k * nr + j, nr);
        for (; k < kc; ++k)
          for (int j = 0; j < nr; ++j) panel[k * nr + j] = origin[j * b.col_stride + k];
        continue;
      }
    }
    if (b.row_stride == 1 && valid == nr) {
      // A transposed B (Xᵀ of X·Xᵀ): its columns are contiguous; copy 8 k of each column at a time
      // so every source line is used whole.
      int64_t k = 0;
      for (; k + 8 <= kc; k += 8)
        for (int j = 0; j < nr; ++j) {
          const T* __restrict source = origin + j * b.col_stride + k;
          float* __restrict target = panel + k * nr + j;
          float run[8];  // converted as one vector, then spread down the panel
          for (int t = 0; t < 8; ++t) run[t] = to_float(source[t]);
          for (int t = 0; t < 8; ++t) target[t * nr] = run[t];
        }
      for (; k < kc; ++k)
        for (int j = 0; j < nr; ++j) panel[k * nr + j] = to_float(origin[j * b.col_stride + k]);
      continue;
    }
    for (int64_t k = 0; k < kc; ++k) {
      const T* __restrict source = origin + k * b.row_stride;
      float* __restrict target = panel + k * nr;
      if (b.col_stride == 1) {
        if constexpr (std::is_same_v<T, float>) {
          std::memcpy(target, source, static_cast<size_t>(valid) * sizeof(float));
        } else {
          for (int j = 0; j < valid; ++j) target[j] = to_float(source[j]);
        }
      } else {
        for (int j = 0; j < valid; ++j) target[j] = to_float(source[j * b.col_stride]);
      }
      for (int j = valid; j < nr; ++j) target[j] = 0.0f;
    }
  }
}

// bf16 pair packing for dot products: A as (kc/2, MR, 2) per panel, B as (kc/2, NR, 2); the bits
// are copied (both operands are bf16 already); k beyond the block and rows/columns beyond the
// matrix are zero. A pair (k, k+1) of a row-major A row or of a transposed B's column is one
// 32-bit word in memory, so both packings are 32-bit transposes of whole words (4x4 blocks of
// them in SSE2 registers: 4 loads, 8 unpacks, 4 stores); a row-major B's pair rows are two source
// rows interleaved (16-bit unpacks). The element-wise loops remain for partial panels and the other
// strides. Measured on Zen 4 (jordan_ns5 1024x4096 bf16, one thread, the vdpbf16ps kernel): the
// element-wise loops alone took 21% of the iteration (bench/RESULTS.md).
inline uint32_t load_word(const uint16_t* pair) {
  uint32_t word;
  std::memcpy(&word, pair, sizeof word);  // rows of odd length put pairs at 2-byte alignment
  return word;
}
inline void store_word(uint16_t* pair, uint32_t word) { std::memcpy(pair, &word, sizeof word); }

// dst word row t (stride dst_stride uint16s) = word t of rows s0..s3, for t = 0..3.
inline void transpose_words_4x4(const uint16_t* s0, const uint16_t* s1, const uint16_t* s2, const uint16_t* s3, uint16_t* dst,
                                int64_t dst_stride) {
#if defined(__SSE2__)
  const __m128i r0 = _mm_loadu_si128(reinterpret_cast<const __m128i*>(s0)), r1 = _mm_loadu_si128(reinterpret_cast<const __m128i*>(s1));
  const __m128i r2 = _mm_loadu_si128(reinterpret_cast<const __m128i*>(s2)), r3 = _mm_loadu_si128(reinterpret_cast<const __m128i*>(s3));
  const __m128i t0 = _mm_unpacklo_epi32(r0, r1), t1 = _mm_unpacklo_epi32(r2, r3);  // (0 0 1 1) of rows 0,1 / 2,3
  const __m128i t2 = _mm_unpackhi_epi32(r0, r1), t3 = _mm_unpackhi_epi32(r2, r3);  // (2 2 3 3)
  _mm_storeu_si128(reinterpret_cast<__m128i*>(dst), _mm_unpacklo_epi64(t0, t1));
  _mm_storeu_si128(reinterpret_cast<__m128i*>(dst + dst_stride), _mm_unpackhi_epi64(t0, t1));
  _mm_storeu_si128(reinterpret_cast<__m128i*>(dst + 2 * dst_stride), _mm_unpacklo_epi64(t2, t3));
  _mm_storeu_si128(reinterpret_cast<__m128i*>(dst + 3 * dst_stride), _mm_unpackhi_epi64(t2, t3));
#else
  const uint16_t* rows[4] = {s0, s1, s2, s3};
  for (int t = 0; t < 4; ++t)
    for (int q = 0; q < 4; ++q) store_word(dst + t * dst_stride + 2 * q, load_word(rows[q] + 2 * t));
#endif
}

// Word-major transpose of `count` sources (multiple of 4) x `pairs` words: word w of source q goes
// to out[(w * count_stride + q) * 2] (count_stride in words); a zero-padded last pair when `odd`
// (its low half the source's element 2·pairs).
void transpose_pairs(const uint16_t* const* sources, int count, int64_t pairs, bool odd, uint16_t* out, int64_t count_stride) {
  int64_t w = 0;
  for (; w + 4 <= pairs; w += 4)
    for (int q = 0; q < count; q += 4)
      transpose_words_4x4(sources[q] + 2 * w, sources[q + 1] + 2 * w, sources[q + 2] + 2 * w, sources[q + 3] + 2 * w, out + (w * count_stride + q) * 2,
                          count_stride * 2);
  for (; w < pairs; ++w)
    for (int q = 0; q < count; ++q) store_word(out + (w * count_stride + q) * 2, load_word(sources[q] + 2 * w));
  if (odd)
    for (int q = 0; q < count; ++q) store_word(out + (pairs * count_stride + q) * 2, sources[q][2 * pairs]);
}

// kc + 8 zeros: the source of the rows (columns) a partial panel pads, so that it packs like a full one.
const uint16_t* zero_source(int64_t kc) {
  thread_local std::vector<uint16_t> zeros;
  if (static_cast<int64_t>(zeros.size()) < kc + 8) zeros.assign(static_cast<size_t>(kc + 8), 0);
  return zeros.data();
}

void pack_a_pairs(const MatrixView& a, int64_t rows, int64_t k0, int64_t kc, int64_t k_total, int mr, int64_t first_panel, int64_t panels,
                  uint16_t* out) {
  const uint16_t* base = static_cast<const uint16_t*>(a.data);
  const int64_t kc_even = (kc + 1) / 2 * 2;
  for (int64_t p = first_panel; p < first_panel + panels; ++p) {
    uint16_t* panel = out + p * kc_even * mr;
    if (a.col_stride == 1 && mr % 4 == 0 && mr <= 64 && k0 + kc <= k_total) {
      const uint16_t* sources[64];
      for (int i = 0; i < mr; ++i) sources[i] = p * mr + i < rows ? base + (p * mr + i) * a.row_stride + k0 : zero_source(kc);
      transpose_pairs(sources, mr, kc / 2, kc % 2 != 0, panel, mr);
      continue;
    }
    for (int i = 0; i < mr; ++i) {
      const int64_t row = p * mr + i;
      const uint16_t* source = row < rows ? base + row * a.row_stride + k0 * a.col_stride : nullptr;
      for (int64_t k = 0; k < kc_even; ++k) {
        const bool inside = source && k < kc && k0 + k < k_total;
        panel[((k / 2) * mr + i) * 2 + (k % 2)] = inside ? source[k * a.col_stride] : uint16_t{0};
      }
    }
  }
}

void pack_b_pairs(const MatrixView& b, int64_t k0, int64_t kc, int64_t col0, int64_t cols, int nr, int64_t first_panel, int64_t panels,
                  uint16_t* out) {
  const uint16_t* base = static_cast<const uint16_t*>(b.data);
  const int64_t kc_even = (kc + 1) / 2 * 2;
  for (int64_t p = first_panel; p < first_panel + panels; ++p) {
    uint16_t* panel = out + p * kc_even * nr;
    const int valid = static_cast<int>(std::min<int64_t>(nr, cols - p * nr));
    const uint16_t* origin = base + k0 * b.row_stride + (col0 + p * nr) * b.col_stride;
    if (b.row_stride == 1 && nr % 4 == 0 && nr <= 64) {
      // A transposed B (the Xᵀ of X·Xᵀ): each column is contiguous along k.
      const uint16_t* sources[64];
      for (int j = 0; j < nr; ++j) sources[j] = j < valid ? origin + j * b.col_stride : zero_source(kc);
      transpose_pairs(sources, nr, kc / 2, kc % 2 != 0, panel, nr);
      continue;
    }
#if defined(__SSE2__)
    if (b.col_stride == 1 && valid == nr && nr % 8 == 0) {
      // A row-major B: pair row kp interleaves source rows 2kp and 2kp+1 (zeros for an odd kc's last).
      for (int64_t k = 0; k < kc; k += 2) {
        const uint16_t* first = origin + k * b.row_stride;
        const uint16_t* second = first + b.row_stride;
        uint16_t* target = panel + k * nr;  // (k/2) * nr * 2
        for (int j = 0; j < nr; j += 8) {
          const __m128i low = _mm_loadu_si128(reinterpret_cast<const __m128i*>(first + j));
          const __m128i high = k + 1 < kc ? _mm_loadu_si128(reinterpret_cast<const __m128i*>(second + j)) : _mm_setzero_si128();
          _mm_storeu_si128(reinterpret_cast<__m128i*>(target + 2 * j), _mm_unpacklo_epi16(low, high));
          _mm_storeu_si128(reinterpret_cast<__m128i*>(target + 2 * j + 8), _mm_unpackhi_epi16(low, high));
        }
      }
      continue;
    }
#endif
    for (int64_t k = 0; k < kc_even; ++k) {
      uint16_t* target = panel + (k / 2) * nr * 2 + (k % 2);
      if (k >= kc) {
        for (int j = 0; j < nr; ++j) target[2 * j] = 0;
        continue;
      }
      const uint16_t* source = origin + k * b.row_stride;
      for (int j = 0; j < valid; ++j) target[2 * j] = source[j * b.col_stride];
      for (int j = valid; j < nr; ++j) target[2 * j] = 0;
    }
  }
}

// D = α·acc + β·C + γ·I on one microtile, rounding to D's type once from f32: the host loop, the
// same arithmetic as the generated epilogue (for odd strides and for the driver's own tests).
template <typename TD, typename TC>
void epilogue_tile(const GemmProblem& problem, const float* acc, int64_t ldacc, int64_t row0, int64_t col0, int64_t rows, int64_t cols) {
  TD* d = static_cast<TD*>(problem.d.data);
  const TC* c = problem.c ? static_cast<const TC*>(problem.c->data) : nullptr;
  for (int64_t i = 0; i < rows; ++i) {
    const int64_t row = row0 + i;
    TD* d_row = d + row * problem.d.row_stride + col0 * problem.d.col_stride;
    const float* acc_row = acc + i * ldacc;
    const TC* c_row = c ? c + row * problem.c->row_stride + col0 * problem.c->col_stride : nullptr;
    for (int64_t j = 0; j < cols; ++j) {
      float value = problem.alpha == 1.0f ? acc_row[j] : problem.alpha * acc_row[j];
      if (c) value = value + problem.beta * to_float(c_row[j * problem.c->col_stride]);
      if (problem.gamma != 0.0f) value = value + (col0 + j == row ? problem.gamma : 0.0f);
      d_row[j * problem.d.col_stride] = from_float<TD>(value);
    }
  }
}

// dst[c][r] = src[r][c] for an 8x8 block of 16-bit values (strides in elements): three rounds of
// SSE2 unpacks (16-, 32-, 64-bit), 8 loads and 8 stores instead of 64 scalar copies.
inline void transpose_8x8_u16(const uint16_t* src, int64_t src_stride, uint16_t* dst, int64_t dst_stride) {
#if defined(__SSE2__)
  __m128i r[8], t[8];
  for (int i = 0; i < 8; ++i) r[i] = _mm_loadu_si128(reinterpret_cast<const __m128i*>(src + i * src_stride));
  for (int i = 0; i < 4; ++i) {  // (r0 r1), (r2 r3), ...: 16-bit pairs
    t[2 * i] = _mm_unpacklo_epi16(r[2 * i], r[2 * i + 1]);
    t[2 * i + 1] = _mm_unpackhi_epi16(r[2 * i], r[2 * i + 1]);
  }
  for (int i = 0; i < 2; ++i)  // 32-bit: pairs of rows 0-1 with 2-3, 4-5 with 6-7
    for (int h = 0; h < 2; ++h) {
      r[4 * i + 2 * h] = _mm_unpacklo_epi32(t[4 * i + h], t[4 * i + 2 + h]);
      r[4 * i + 2 * h + 1] = _mm_unpackhi_epi32(t[4 * i + h], t[4 * i + 2 + h]);
    }
  for (int q = 0; q < 4; ++q) {  // 64-bit: rows 0-3 with 4-7; output rows 2q and 2q+1
    _mm_storeu_si128(reinterpret_cast<__m128i*>(dst + (2 * q) * dst_stride), _mm_unpacklo_epi64(r[q], r[4 + q]));
    _mm_storeu_si128(reinterpret_cast<__m128i*>(dst + (2 * q + 1) * dst_stride), _mm_unpackhi_epi64(r[q], r[4 + q]));
  }
#else
  for (int i = 0; i < 8; ++i)
    for (int j = 0; j < 8; ++j) dst[j * dst_stride + i] = src[i * src_stride + j];
#endif
}

// Rows [row_begin, row_end) of the lower triangle copied from the upper one. Whole blocks strictly
// below the diagonal move as block transposes (8x8 for 16-bit storage, 4x4 for f32) when the
// columns are contiguous; the rest element by element in column blocks of 16: the source is 16
// upper rows read along the chunk's columns, so each source line is used whole while it is in L1
// (a plain column walk touched a new line per element: 7% of a per-head NS; the element loop
// alone was 6% of a Gram iteration of 32 per-head matrices, whose every m x m product mirrors).
template <typename TD>
ORTHOJIT_HOST_CLONES void mirror_lower_from_upper(const MatrixView& d, int64_t row_begin, int64_t row_end) {
  TD* base = static_cast<TD*>(d.data);
  constexpr int64_t block = 16;
  constexpr int64_t tile = sizeof(TD) == 2 ? 8 : 4;  // the block transpose's edge
  const bool blocks = d.col_stride == 1 && (sizeof(TD) == 2 || sizeof(TD) == 4);
  int64_t i0 = row_begin;
  if (blocks)
    for (; i0 + tile <= row_end; i0 += tile) {
      // Rows i0..i0+tile: the blocks of columns j0..j0+tile with j0 + tile <= i0, then the rest of
      // each row up to the diagonal.
      int64_t j0 = 0;
      for (; j0 + tile <= i0; j0 += tile) {
        if constexpr (sizeof(TD) == 2)
          transpose_8x8_u16(reinterpret_cast<const uint16_t*>(base + j0 * d.row_stride + i0), d.row_stride,
                            reinterpret_cast<uint16_t*>(base + i0 * d.row_stride + j0), d.row_stride);
        else
          transpose_4x4(reinterpret_cast<const float*>(base + j0 * d.row_stride + i0), d.row_stride, reinterpret_cast<float*>(base + i0 * d.row_stride + j0),
                        d.row_stride);
      }
      for (int64_t i = i0; i < i0 + tile; ++i)
        for (int64_t j = j0; j < i; ++j) base[i * d.row_stride + j] = base[j * d.row_stride + i];
    }
  for (int64_t j0 = 0; j0 < row_end; j0 += block)
    for (int64_t i = std::max(i0, j0 + 1); i < row_end; ++i) {
      const int64_t j_end = std::min(j0 + block, i);
      for (int64_t j = j0; j < j_end; ++j) base[i * d.row_stride + j * d.col_stride] = base[j * d.row_stride + i * d.col_stride];
    }
}

}  // namespace

std::vector<int64_t> k_block_lengths(int64_t k, const GemmBlocking& blocking, bool bf16_dot) {
  const int64_t kc = bf16_dot ? (blocking.kc + 1) / 2 * 2 : blocking.kc;
  std::vector<int64_t> lengths;
  if (k >= kc) lengths.push_back(kc);
  if (k % kc != 0) lengths.push_back(bf16_dot ? (k % kc + 1) / 2 * 2 : k % kc);
  return lengths;
}

OperandLayouts choose_operand_layouts(CpuIsa isa, const GemmBlocking& blocking, const MatrixView& a, const MatrixView& b) {
  OperandLayouts layouts;
  auto fits = [&](const MatrixView& view) {
    return view.col_stride == 1 && view.rows * view.cols * static_cast<int64_t>(size_in_bytes(view.type)) <= blocking.direct_operand_bytes;
  };
  if (uses_bf16_dot(isa, blocking.bf16_dot, a, b)) {
    layouts.a_direct = fits(a) && a.cols % 2 == 0;
    return layouts;
  }
  // Sizes as f32: what the kernel reads, the operand itself or its widened copy.
  auto fits_as_f32 = [&](const MatrixView& view) { return view.rows * view.cols * int64_t{4} <= blocking.direct_operand_bytes; };
  auto widens = [&](const MatrixView& view) {
    return view.type != ScalarType::F32 && (view.col_stride == 1 || view.row_stride == 1) && fits_as_f32(view);
  };
  layouts.a_widened = widens(a);
  layouts.b_widened = widens(b);
  auto direct = [&](const MatrixView& view, bool widened) {
    return (view.type == ScalarType::F32 || widened) && view.col_stride == 1 && fits_as_f32(view);
  };
  layouts.a_direct = direct(a, layouts.a_widened);
  layouts.b_direct = direct(b, layouts.b_widened);
  return layouts;
}

namespace {

// The AMX path's K-block length (a multiple of 32) and the microtile shapes a product uses.
int64_t amx_block_k(const GemmBlocking& blocking) { return amx_padded_k(std::max<int64_t>(blocking.amx_kc, kAmxKStep)); }
std::vector<int> amx_edge_lengths(int64_t extent) {
  std::vector<int> lengths;
  if (extent >= kAmxMicrotile) lengths.push_back(kAmxMicrotile);
  if (extent % kAmxMicrotile != 0) lengths.push_back(static_cast<int>(extent % kAmxMicrotile));
  return lengths;
}
MicrokernelSpec amx_spec(CpuIsa isa, int64_t kc_padded, int m_valid, int n_valid, bool fp16) {
  MicrokernelSpec spec;
  spec.isa = isa;
  spec.kc = kc_padded;
  spec.amx = true;
  spec.m_valid = m_valid;
  spec.n_valid = n_valid;
  spec.amx_fp16 = fp16;
  return spec;
}

}  // namespace

std::vector<MicrokernelSpec> microkernels_for(CpuIsa isa, const GemmBlocking& blocking, const MatrixView& a, const MatrixView& b) {
  if (uses_amx(isa, blocking.amx_fp16, a, b)) {
    const bool fp16 = a.type == ScalarType::F16;
    std::vector<MicrokernelSpec> specs;
    const int64_t block_k = amx_block_k(blocking);
    std::vector<int64_t> lengths;
    if (a.cols >= block_k) lengths.push_back(block_k);
    if (a.cols % block_k != 0) lengths.push_back(amx_padded_k(a.cols % block_k));
    for (int64_t kc : lengths)
      for (int m_valid : amx_edge_lengths(a.rows))
        for (int n_valid : amx_edge_lengths(b.cols)) specs.push_back(amx_spec(isa, kc, m_valid, n_valid, fp16));
    return specs;
  }
  const bool dot = uses_bf16_dot(isa, blocking.bf16_dot, a, b);
  const OperandLayouts layouts = choose_operand_layouts(isa, blocking, a, b);
  std::vector<MicrokernelSpec> specs;
  for (int64_t kc : k_block_lengths(a.cols, blocking, dot)) specs.push_back({isa, kc, dot, layouts.a_direct, layouts.b_direct, blocking.b_prefetch});
  return specs;
}

GemmDriver::GemmDriver(CpuIsa isa, GemmBlocking blocking, std::function<MicrokernelFunction(const MicrokernelSpec&)> kernel_for)
    : isa_(isa), traits_(traits_of(isa)), blocking_(blocking), kernel_for_(std::move(kernel_for)) {
  blocking_.mc = round_up(std::max<int64_t>(blocking_.mc, traits_.mr), traits_.mr);
  blocking_.nc = round_up(std::max<int64_t>(blocking_.nc, traits_.nr), traits_.nr);
  blocking_.kc = std::max<int64_t>(blocking_.kc, 2);
}

namespace {

// The last K block's epilogue on one microtile of the accumulator: the generated one or the host loop.
void finish_tile(const GemmProblem& problem, const float* acc, int64_t ldacc, int64_t tile_row, int64_t tile_col, int64_t tile_rows,
                 int64_t tile_cols, bool generated_epilogue) {
  if (generated_epilogue) {
    const void* c_tile = nullptr;
    int64_t c_stride = 0;
    if (problem.c) {
      c_tile = static_cast<const char*>(problem.c->data) + (tile_row * problem.c->row_stride + tile_col) * size_in_bytes(problem.c->type);
      c_stride = problem.c->row_stride;
    }
    void* d_tile = static_cast<char*>(problem.d.data) + (tile_row * problem.d.row_stride + tile_col) * size_in_bytes(problem.d.type);
    problem.epilogue(acc, ldacc, c_tile, c_stride, d_tile, problem.d.row_stride, tile_rows, tile_cols, tile_row - tile_col);
    return;
  }
  dispatch_storage_type(problem.d.type, [&](auto d_tag) {
    using TD = decltype(d_tag);
    if (!problem.c) return epilogue_tile<TD, float>(problem, acc, ldacc, tile_row, tile_col, tile_rows, tile_cols);
    dispatch_storage_type(problem.c->type, [&](auto c_tag) { epilogue_tile<TD, decltype(c_tag)>(problem, acc, ldacc, tile_row, tile_col, tile_rows, tile_cols); });
  });
}

}  // namespace

// The AMX path (docs/cpu-backend.md, "AMX"). A is packed once for all of K, B one column block
// at a time for all of K, both in K blocks of amx_kc. A task owns a block of rows and a group of
// the column block's 32-column panels and walks the K blocks, and within each the A panels of its
// rows, with one kernel call per (A panel, run of B panels): the 32 x kc A panel (32 KiB at kc =
// 512) stays in L1 while the run's B panels stream from L2, and the call's C tiles stay in
// registers over its K block. Between K blocks the C tiles live in the task's own accumulator
// (its rows x its columns in f32, in L2), so no accumulator the size of the output is written.
// Edge microtiles use kernels with their rows/columns baked in. The epilogue and the triangle
// mirror are the FMA path's. Each microtile sums its K blocks in order: the result does not
// depend on the threads.
void GemmDriver::run_amx(const GemmProblem& problem, ThreadPool* pool) const {
  const int64_t m = problem.a.rows, k_total = problem.a.cols, n = problem.b.cols;
  constexpr int tile = kAmxMicrotile;
  const int64_t a_panels = (m + tile - 1) / tile;
  const int64_t block_k = std::min(amx_block_k(blocking_), amx_padded_k(k_total));
  const int64_t k_blocks = (k_total + block_k - 1) / block_k;
  const int64_t k_padded_total = (k_blocks - 1) * block_k + amx_padded_k(k_total - (k_blocks - 1) * block_k);
  // Columns per block: one K block of them at most 256 KiB of packed B (what a kernel call
  // streams, beside the task's accumulator, in L2), at most blocking.nc.
  const int64_t nc_budget = std::max<int64_t>(tile, (int64_t{1} << 17) / block_k / tile * tile);
  const int64_t nc = std::min({round_up(std::max<int64_t>(blocking_.nc, tile), tile), nc_budget, round_up(n, tile)});
  const int64_t mc = round_up(std::max<int64_t>(blocking_.mc, tile), tile);
  const bool generated_epilogue = problem.epilogue && problem.d.col_stride == 1 && (!problem.c || problem.c->col_stride == 1);
  const int workers = pool ? pool->size() : 1;
  auto parallel = [&](int64_t count, const std::function<void(int64_t, int)>& body) {
    if (pool) pool->parallel_for(count, body);
    else for (int64_t task = 0; task < count; ++task) body(task, 0);
  };
  const int m_edge = static_cast<int>(m % tile), n_edge = static_cast<int>(n % tile);
  const bool fp16 = problem.a.type == ScalarType::F16;  // f16 pairs on TDPFP16PS (uses_amx)

  struct KBlock {
    int64_t k0, k_valid, kc;
    MicrokernelFunction kernels[2][2];  // [partial row panel][partial column panel]
  };
  std::vector<KBlock> blocks;
  for (int64_t k0 = 0; k0 < k_total; k0 += block_k) {
    KBlock block{k0, std::min(block_k, k_total - k0), 0, {}};
    block.kc = amx_padded_k(block.k_valid);
    for (int i = 0; i < 2; ++i)
      for (int j = 0; j < 2; ++j) {
        const int m_valid = i ? m_edge : tile, n_valid = j ? n_edge : tile;
        if ((i && m_valid == 0) || (j && n_valid == 0) || (!i && m < tile) || (!j && n < tile)) continue;
        block.kernels[i][j] = kernel_for_(amx_spec(isa_, block.kc, m_valid, n_valid, fp16));
      }
    blocks.push_back(block);
  }
  // The packed panels of K block b start at (panels in the buffer) · 32 · b · block_k values; a
  // column block's packed B is (nc / 32) · 32 · k_padded_total values.
  const int64_t b_block_elements = (nc / tile) * tile * k_padded_total;
  const int64_t column_blocks = (n + nc - 1) / nc;
  // Column blocks go in sweeps of as many as amx_sweep_bytes (64 MiB) of packed B hold: each sweep
  // packs its blocks in one parallel phase and multiplies them in another, so the workers meet at
  // two barriers per sweep, not per column block, and share out every (column block, rows,
  // columns) task of it (measured, jordan_ns5 1024x4096 bf16 on two threads: 93 ms with a packing
  // and a product phase per column block, 71 ms in one sweep).
  const int64_t blocks_per_sweep = std::clamp<int64_t>(blocking_.amx_sweep_bytes / (2 * b_block_elements), 1, column_blocks);
  thread_local AlignedBuffer a_scratch, b_scratch;
  uint16_t* const packed_a = reinterpret_cast<uint16_t*>(a_scratch.floats(a_panels * tile * k_padded_total / 2));
  uint16_t* const packed_b = reinterpret_cast<uint16_t*>(b_scratch.floats(blocks_per_sweep * b_block_elements / 2));
  {
    const int64_t a_chunk = std::max<int64_t>(1, a_panels / (4 * workers));
    const int64_t chunks = (a_panels + a_chunk - 1) / a_chunk;
    parallel(chunks * k_blocks, [&](int64_t task, int) {
      const KBlock& block = blocks[static_cast<size_t>(task / chunks)];
      const int64_t first_panel = task % chunks * a_chunk, count = std::min(a_chunk, a_panels - first_panel);
      pack_amx_a(problem.a, block.k0, block.k_valid, block.kc, first_panel, count, packed_a + a_panels * tile * block.k0, fp16);
    });
  }
  const int64_t row_blocks = (m + mc - 1) / mc;
  const int64_t tasks_wanted = (problem.triangular ? 32 : 8) * workers;
  const int64_t full_b_panels = nc / tile;
  const int64_t column_groups = std::max<int64_t>(1, std::min(full_b_panels, (tasks_wanted + row_blocks * column_blocks - 1) / (row_blocks * column_blocks)));
  const int64_t panels_per_group = (full_b_panels + column_groups - 1) / column_groups;

  for (int64_t first_block = 0; first_block < column_blocks; first_block += blocks_per_sweep) {
    const int64_t sweep_blocks = std::min(blocks_per_sweep, column_blocks - first_block);
    const int64_t b_chunk = std::max<int64_t>(1, full_b_panels / (4 * workers));
    const int64_t b_chunks = (full_b_panels + b_chunk - 1) / b_chunk;
    parallel(sweep_blocks * k_blocks * b_chunks, [&](int64_t task, int) {
      const int64_t column_block = first_block + task / (k_blocks * b_chunks);
      const KBlock& block = blocks[static_cast<size_t>(task / b_chunks % k_blocks)];
      const int64_t col0 = column_block * nc, cols = std::min(nc, n - col0), b_panels = (cols + tile - 1) / tile;
      const int64_t first_panel = task % b_chunks * b_chunk, count = std::min(b_chunk, b_panels - first_panel);
      if (count <= 0) return;
      pack_amx_b(problem.b, block.k0, block.k_valid, block.kc, col0, cols, first_panel, count,
                 packed_b + (column_block - first_block) * b_block_elements + (nc / tile) * tile * block.k0, fp16);
    });
    parallel(sweep_blocks * row_blocks * column_groups, [&](int64_t task, int) {
      const int64_t column_block = first_block + task / (row_blocks * column_groups);
      const int64_t row_block = task / column_groups % row_blocks, group = task % column_groups;
      const int64_t col0 = column_block * nc, cols = std::min(nc, n - col0), b_panels = (cols + tile - 1) / tile;
      const uint16_t* const b_column_block = packed_b + (column_block - first_block) * b_block_elements;
      const int64_t ap_begin = row_block * mc / tile, ap_end = std::min(a_panels, (row_block + 1) * mc / tile);
      const int64_t group_begin = group * panels_per_group, group_end = std::min(b_panels, (group + 1) * panels_per_group);
      if (group_begin >= group_end) return;
      // The task's accumulator: its rows x its group's columns, f32 (the worker's own buffer).
      thread_local AlignedBuffer task_scratch;
      const int64_t ldacc = accumulator_stride((group_end - group_begin) * tile);
      float* const accumulator = task_scratch.floats((ap_end - ap_begin) * tile * ldacc);
      for (const KBlock& block : blocks) {
        const int32_t accumulate = block.k0 == 0 ? 0 : 1;
        const int64_t panel_elements = amx_panel_elements(block.kc);
        const uint16_t* const a_block = packed_a + a_panels * tile * block.k0;
        const uint16_t* const b_block = b_column_block + (nc / tile) * tile * block.k0;
        for (int64_t ap = ap_begin; ap < ap_end; ++ap) {
          const int64_t tile_row = ap * tile, tile_rows = std::min<int64_t>(tile, m - tile_row);
          const int row_kind = tile_rows < tile ? 1 : 0;
          int64_t bp_begin = group_begin;
          // A triangular product needs the microtiles reaching the diagonal: a suffix of the run.
          while (bp_begin < group_end && !microtile_needed(tile_row, col0 + bp_begin * tile, tile, problem.triangular)) ++bp_begin;
          if (bp_begin >= group_end) continue;
          const auto* a_panel = reinterpret_cast<const float*>(a_block + ap * panel_elements);
          // What the kernel prefetches: the A panel of the task's next call (the next row, or the
          // first row of the next K block; this one at the end: a harmless repeat).
          const uint16_t* next_a = ap + 1 < ap_end ? a_block + (ap + 1) * panel_elements
                                   : &block != &blocks.back() ? packed_a + a_panels * tile * (&block + 1)->k0 + ap_begin * amx_panel_elements((&block + 1)->kc)
                                                              : a_block + ap * panel_elements;
          const auto next_a_address = static_cast<int64_t>(reinterpret_cast<uintptr_t>(next_a));
          const bool last_is_partial = col0 + group_end * tile > n;  // only the matrix's last panel can be
          const int64_t full_end = last_is_partial ? group_end - 1 : group_end;
          float* acc_row = accumulator + (ap - ap_begin) * tile * ldacc - group_begin * tile;
          if (full_end > bp_begin)
            block.kernels[row_kind][0](a_panel, reinterpret_cast<const float*>(b_block + bp_begin * panel_elements), acc_row + bp_begin * tile, ldacc,
                                       accumulate, next_a_address, full_end - bp_begin);
          if (last_is_partial)
            block.kernels[row_kind][1](a_panel, reinterpret_cast<const float*>(b_block + full_end * panel_elements), acc_row + full_end * tile, ldacc,
                                       accumulate, next_a_address, 1);
        }
      }
      for (int64_t ap = ap_begin; ap < ap_end; ++ap) {
        const int64_t tile_row = ap * tile, tile_rows = std::min<int64_t>(tile, m - tile_row);
        for (int64_t bp = group_begin; bp < group_end; ++bp) {
          const int64_t tile_col = col0 + bp * tile, tile_cols = std::min<int64_t>(tile, n - tile_col);
          if (!microtile_needed(tile_row, tile_col, tile, problem.triangular)) continue;
          finish_tile(problem, accumulator + (ap - ap_begin) * tile * ldacc + (bp - group_begin) * tile, ldacc, tile_row, tile_col, tile_rows,
                      tile_cols, generated_epilogue);
        }
      }
    });
  }
}

PipelineStage pipeline_stage(int64_t index, int64_t column_blocks) {
  PipelineStage stage;
  stage.k_block = index / column_blocks;
  stage.column_block = index % column_blocks;
  stage.a_buffer = static_cast<int>(stage.k_block % 2);
  stage.b_buffer = static_cast<int>(index % 2);
  stage.packs_a = stage.column_block == 0;
  return stage;
}

void GemmDriver::run(const GemmProblem& problem, ThreadPool* pool) const {
  const int64_t m = problem.a.rows, k_total = problem.a.cols, n = problem.b.cols;
  if (problem.b.rows != k_total || problem.d.rows != m || problem.d.cols != n || (problem.c && (problem.c->rows != m || problem.c->cols != n)))
    throw std::logic_error("gemm: operand shapes disagree");
  if (problem.triangular && m != n) throw std::logic_error("gemm: a triangular product must be square");
  if (uses_amx(isa_, blocking_.amx_fp16, problem.a, problem.b) && m > 0 && n > 0 && k_total > 0) {
    run_amx(problem, pool);
    return mirror_if_triangular(problem, pool);
  }
  const OperandLayouts layouts = choose_operand_layouts(isa_, blocking_, problem.a, problem.b);
  if (layouts.a_widened || layouts.b_widened) return run_fma(widened_operands(isa_, blocking_, problem, layouts, pool), pool);
  run_fma(problem, pool);
}

void GemmDriver::run_fma(const GemmProblem& problem, ThreadPool* pool) const {
  const int64_t m = problem.a.rows, k_total = problem.a.cols, n = problem.b.cols;
  const int mr = traits_.mr, nr = traits_.nr;
  const int64_t a_panels = (m + mr - 1) / mr;
  const bool dot = uses_bf16_dot(isa_, blocking_.bf16_dot, problem.a, problem.b);
  const OperandLayouts layouts = choose_operand_layouts(isa_, blocking_, problem.a, problem.b);
  if (layouts.a_widened || layouts.b_widened) throw std::logic_error("gemm: run_fma reached with operands still to widen");
  const int64_t block_k = dot ? (blocking_.kc + 1) / 2 * 2 : blocking_.kc;  // K-block length (even for pairs)
  const int64_t kc_max = std::min(block_k, k_total) + 1;  // +1: room for the zero-padded odd k
  const int64_t nc = std::min(blocking_.nc, round_up(n, nr));
  const int64_t mc = blocking_.mc;
  thread_local AlignedBuffer a_scratch, b_scratch, accumulator_scratch;
  // Direct operands need no packed copy, only their zero-padded edge panel (in direct layout:
  // A's last rows with lda = kc, B's last columns with ldb = NR). Two of each buffer: the next
  // stage's operands are packed while this stage's products run (below).
  const int64_t a_floats = layouts.a_direct ? mr * kc_max : a_panels * mr * kc_max;
  const int64_t b_floats = layouts.b_direct ? nr * kc_max : (nc / nr) * nr * kc_max;
  float* const a_buffers = a_scratch.floats(2 * a_floats);
  float* const b_buffers = b_scratch.floats(2 * b_floats);
  // The accumulator has whole MR-row panels and a row stride of at least the last NR-column
  // panel's end, so an edge microtile runs in place like a full one: its rows and columns past
  // the matrix are the products of A's and B's zero padding, written and read only by the kernel,
  // never by the epilogue (instead of a scratch tile copied in and out).
  const int64_t ldacc = std::max(accumulator_stride(n), round_up(n, nr));
  float* const accumulator = accumulator_scratch.floats(a_panels * mr * ldacc);
  const bool generated_epilogue = problem.epilogue && problem.d.col_stride == 1 && (!problem.c || problem.c->col_stride == 1);
  const int workers = pool ? pool->size() : 1;
  const float* const a_data = static_cast<const float*>(problem.a.data);
  const float* const b_data = static_cast<const float*>(problem.b.data);
  // Offsets into the packed buffers count f32 slots; a bf16 pair panel takes half the bytes.
  const int64_t slot = dot ? 2 : 1;
  const int64_t a_chunk = std::max<int64_t>(1, a_panels / (4 * workers));
  const int64_t row_blocks = (m + mc - 1) / mc;
  // A triangular product's tasks differ widely in cost (rows far below the diagonal have little
  // to do), so it is cut finer, which keeps both workers busy to the end of each stage.
  const int64_t tasks_wanted = (problem.triangular ? 32 : 8) * workers;

  // The product runs in stages, one per (K block, column block of nc columns), K blocks outer.
  // A stage needs A packed for its K block (all rows) and B for its K block and columns. Stage s
  // runs as one parallel phase whose tasks are its products followed by the packing of stage s+1's
  // operands into the other buffers (A only when s+1 starts a K block), so each stage costs one
  // barrier instead of a packing barrier and a product barrier, and the small packing tasks at
  // the end of the task list fill what would be the wait for the slowest product task.
  // Measured (2048³ f32 GEMM, two Zen 4 cores): docs/cpu-backend.md, "Blocking, threads".
  struct Stage {
    int64_t k0 = 0, k_valid = 0, kc = 0, col0 = 0, cols = 0, b_panels = 0, b_chunk = 1, column_groups = 1, panels_per_group = 1;
    bool first = false, last = false, packs_a = false;
    float* packed_a = nullptr;
    float* packed_b = nullptr;
  };
  const int64_t k_blocks = (k_total + block_k - 1) / block_k, column_blocks = (n + nc - 1) / nc;
  const int64_t stages = k_blocks * column_blocks;
  auto stage_at = [&](int64_t index) {
    Stage stage;
    const PipelineStage order = pipeline_stage(index, column_blocks);
    const int64_t k_block = order.k_block, column_block = order.column_block;
    stage.k0 = k_block * block_k;
    stage.k_valid = std::min(block_k, k_total - stage.k0);
    stage.kc = dot ? (stage.k_valid + 1) / 2 * 2 : stage.k_valid;  // the kernel's (padded) k length
    stage.first = k_block == 0;
    stage.last = k_block == k_blocks - 1;
    stage.packs_a = order.packs_a;
    stage.col0 = column_block * nc;
    stage.cols = std::min(nc, n - stage.col0);
    stage.b_panels = (stage.cols + nr - 1) / nr;
    stage.b_chunk = std::max<int64_t>(1, stage.b_panels / (4 * workers));
    // Products: MC-row blocks x groups of B panels, enough of them to keep every worker busy.
    stage.column_groups = std::max<int64_t>(1, std::min(stage.b_panels, (tasks_wanted + row_blocks - 1) / row_blocks));
    stage.panels_per_group = (stage.b_panels + stage.column_groups - 1) / stage.column_groups;
    stage.packed_a = a_buffers + order.a_buffer * a_floats;
    stage.packed_b = b_buffers + order.b_buffer * b_floats;
    return stage;
  };
  // The packing tasks of a stage: its A panels in chunks (or the partial row panel of a direct A),
  // when it starts a K block, then its B panels in chunks (or the partial column panel).
  auto a_pack_tasks = [&](const Stage& stage) -> int64_t {
    if (!stage.packs_a) return 0;
    if (layouts.a_direct) return m % mr != 0 ? 1 : 0;
    return (a_panels + a_chunk - 1) / a_chunk;
  };
  auto b_pack_tasks = [&](const Stage& stage) -> int64_t {
    if (layouts.b_direct) return stage.cols % nr != 0 ? 1 : 0;
    return (stage.b_panels + stage.b_chunk - 1) / stage.b_chunk;
  };
  auto pack_task = [&](const Stage& stage, int64_t task) {
    const int64_t a_tasks = a_pack_tasks(stage);
    if (task < a_tasks) {
      float* const packed_a = stage.packed_a;
      if (layouts.a_direct) {  // the last, partial row panel, zero-padded to MR rows
        const int64_t first_row = m / mr * mr;
        if (dot) {  // K is even here, so kc is the block's own length: no padding along k
          uint16_t* const packed = reinterpret_cast<uint16_t*>(packed_a);
          const uint16_t* const source = static_cast<const uint16_t*>(problem.a.data);
          for (int64_t i = 0; i < mr; ++i) {
            uint16_t* const row = packed + i * stage.kc;
            if (first_row + i < m) std::memcpy(row, source + (first_row + i) * problem.a.row_stride + stage.k0, static_cast<size_t>(stage.kc) * 2);
            else std::fill(row, row + stage.kc, uint16_t{0});
          }
          return;
        }
        for (int64_t i = 0; i < mr; ++i)
          for (int64_t k = 0; k < stage.kc; ++k)
            packed_a[i * stage.kc + k] = first_row + i < m ? a_data[(first_row + i) * problem.a.row_stride + stage.k0 + k] : 0.0f;
        return;
      }
      const int64_t first_panel = task * a_chunk, count = std::min(a_chunk, a_panels - first_panel);
      if (dot) return pack_a_pairs(problem.a, m, stage.k0, stage.k_valid, k_total, mr, first_panel, count, reinterpret_cast<uint16_t*>(packed_a));
      return dispatch_storage_type(problem.a.type, [&](auto tag) {
        pack_a_panels<decltype(tag)>(problem.a, 0, m, stage.k0, stage.kc, mr, first_panel, count, packed_a);
      });
    }
    task -= a_tasks;
    float* const packed_b = stage.packed_b;
    if (layouts.b_direct) {  // the last, partial column panel, zero-padded to NR
      const int64_t first_col = stage.col0 + stage.cols / nr * nr;
      for (int64_t k = 0; k < stage.kc; ++k)
        for (int64_t j = 0; j < nr; ++j) packed_b[k * nr + j] = first_col + j < n ? b_data[(stage.k0 + k) * problem.b.row_stride + first_col + j] : 0.0f;
      return;
    }
    const int64_t first_panel = task * stage.b_chunk, count = std::min(stage.b_chunk, stage.b_panels - first_panel);
    if (dot) return pack_b_pairs(problem.b, stage.k0, stage.k_valid, stage.col0, stage.cols, nr, first_panel, count, reinterpret_cast<uint16_t*>(packed_b));
    dispatch_storage_type(problem.b.type, [&](auto tag) {
      pack_b_panels<decltype(tag)>(problem.b, stage.k0, stage.kc, stage.col0, stage.cols, nr, first_panel, count, packed_b);
    });
  };
  // One product task of a stage: a block of MC rows x a group of B panels.
  auto product_task = [&](const Stage& stage, MicrokernelFunction kernel, int64_t task) {
    const int64_t row_block = task / stage.column_groups, group = task % stage.column_groups;
    const int64_t k0 = stage.k0, kc = stage.kc;
    const bool first = stage.first, last = stage.last;
    for (int64_t ap = row_block * mc / mr; ap < std::min(a_panels, (row_block + 1) * mc / mr); ++ap) {
      const int64_t tile_row = ap * mr, tile_rows = std::min<int64_t>(mr, m - tile_row);
      for (int64_t bp = group * stage.panels_per_group; bp < std::min(stage.b_panels, (group + 1) * stage.panels_per_group); ++bp) {
        const int64_t tile_col = stage.col0 + bp * nr, tile_cols = std::min<int64_t>(nr, n - tile_col);
        if (!microtile_needed(tile_row, tile_col, nr, problem.triangular)) continue;
        const float* a_panel = stage.packed_a + ap * kc * mr / slot;
        int64_t lda = 0, ldb = 0;
        if (layouts.a_direct) {
          const bool edge = tile_rows < mr;
          const int64_t offset = tile_row * problem.a.row_stride + k0;
          a_panel = edge ? stage.packed_a
                         : (dot ? reinterpret_cast<const float*>(static_cast<const uint16_t*>(problem.a.data) + offset) : a_data + offset);
          lda = edge ? kc : problem.a.row_stride;
        }
        const float* b_panel = stage.packed_b + bp * kc * nr / slot;
        if (layouts.b_direct) {
          const bool edge = tile_cols < nr;
          b_panel = edge ? stage.packed_b : b_data + k0 * problem.b.row_stride + tile_col;
          ldb = edge ? nr : problem.b.row_stride;
        }
        float* acc = accumulator + tile_row * ldacc + tile_col;
        kernel(a_panel, b_panel, acc, ldacc, first ? 0 : 1, lda, ldb);
        // The accumulator is always separate from D: the last K block's epilogue writes D.
        if (last) finish_tile(problem, acc, ldacc, tile_row, tile_col, tile_rows, tile_cols, generated_epilogue);
      }
    }
  };
  auto parallel = [&](int64_t count, const std::function<void(int64_t, int)>& body) {
    if (pool) pool->parallel_for(count, body);
    else for (int64_t task = 0; task < count; ++task) body(task, 0);
  };

  if (stages > 0) {  // the first stage's operands
    const Stage stage = stage_at(0);
    parallel(a_pack_tasks(stage) + b_pack_tasks(stage), [&](int64_t task, int) { pack_task(stage, task); });
  }
  for (int64_t index = 0; index < stages; ++index) {
    const Stage stage = stage_at(index);
    const std::optional<Stage> next = index + 1 < stages ? std::optional<Stage>(stage_at(index + 1)) : std::nullopt;
    const MicrokernelFunction kernel = kernel_for_({isa_, stage.kc, dot, layouts.a_direct, layouts.b_direct, blocking_.b_prefetch});
    const int64_t products = row_blocks * stage.column_groups;
    const int64_t packs = next ? a_pack_tasks(*next) + b_pack_tasks(*next) : 0;
    parallel(products + packs, [&](int64_t task, int) {
      if (task < products) return product_task(stage, kernel, task);
      pack_task(*next, task - products);
    });
  }
  mirror_if_triangular(problem, pool);
}

void GemmDriver::mirror_if_triangular(const GemmProblem& problem, ThreadPool* pool) const {
  if (!problem.triangular) return;
  const int64_t m = problem.a.rows;
  const int workers = pool ? pool->size() : 1;
  const int64_t chunk = std::max<int64_t>(16, m / (4 * workers));
  auto body = [&](int64_t task, int) {
    dispatch_storage_type(problem.d.type, [&](auto tag) {
      mirror_lower_from_upper<decltype(tag)>(problem.d, task * chunk, std::min(m, (task + 1) * chunk));
    });
  };
  const int64_t tasks = (m + chunk - 1) / chunk;
  if (pool) pool->parallel_for(tasks, body);
  else for (int64_t task = 0; task < tasks; ++task) body(task, 0);
}

}  // namespace orthojit::cpu
