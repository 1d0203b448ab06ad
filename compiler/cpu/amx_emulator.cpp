// AMX instruction emulation (see the header).
#include "cpu/amx_emulator.h"

#include <bit>
#include <cstdio>
#include <cstdlib>
#include <cstring>

namespace orthojit::cpu {
namespace {

[[noreturn]] void fault(const char* instruction, const char* what, int64_t x, int64_t y) {
  std::fprintf(stderr, "orthojit AMX emulator: %s: %s (%lld, %lld): the hardware would raise #UD\n", instruction, what, static_cast<long long>(x),
               static_cast<long long>(y));
  std::abort();
}

void check_shape(const char* instruction, int64_t rows, int64_t colsb) {
  if (rows < 1 || rows > 16 || colsb < 1 || colsb > 64) fault(instruction, "shape outside 16 rows x 64 bytes", rows, colsb);
}

// bf16 -> f32 with denormals as zero (TDPBF16PS: "input denormals are treated as zero").
float bf16_daz(uint16_t bits) {
  if ((bits & 0x7f80u) == 0) bits &= 0x8000u;
  return std::bit_cast<float>(static_cast<uint32_t>(bits) << 16);
}

// f16 -> f32, exactly, denormals included (TDPFP16PS: "input FP16 denormals are always handled
// and not treated as zero").
float f16_exact(uint16_t bits) { return static_cast<float>(std::bit_cast<_Float16>(bits)); }

// f32 with denormal results flushed to zero (TDPBF16PS: "output denormals are flushed to zero").
float ftz(float value) {
  const uint32_t bits = std::bit_cast<uint32_t>(value);
  return (bits & 0x7f800000u) == 0 ? std::bit_cast<float>(bits & 0x80000000u) : value;
}

}  // namespace

extern "C" {

void orthojit_amx_emulated_tilezero(EmulatedTile* tile, int64_t rows, int64_t colsb) {
  check_shape("TILEZERO", rows, colsb);
  tile->rows = rows;
  tile->colsb = colsb;
  std::memset(tile->data, 0, sizeof tile->data);
}

void orthojit_amx_emulated_tileloadd(EmulatedTile* tile, int64_t rows, int64_t colsb, const void* base, int64_t stride) {
  check_shape("TILELOADD", rows, colsb);
  tile->rows = rows;
  tile->colsb = colsb;
  std::memset(tile->data, 0, sizeof tile->data);  // bytes past the shape read as zero
  for (int64_t r = 0; r < rows; ++r) std::memcpy(tile->data + r * 64, static_cast<const unsigned char*>(base) + r * stride, static_cast<size_t>(colsb));
}

void orthojit_amx_emulated_tilestored(const EmulatedTile* tile, int64_t rows, int64_t colsb, void* base, int64_t stride) {
  check_shape("TILESTORED", rows, colsb);
  if (tile->rows != rows || tile->colsb != colsb) fault("TILESTORED", "tile shape differs from the configured one", tile->rows, tile->colsb);
  for (int64_t r = 0; r < rows; ++r) std::memcpy(static_cast<unsigned char*>(base) + r * stride, tile->data + r * 64, static_cast<size_t>(colsb));
}

}  // extern "C"

namespace {

// The operation of TDPBF16PS and TDPFP16PS (Intel SDM vol. 2; Intel ISA Extensions Programming
// Reference, AMX-FP16), which differ only in how a 16-bit element becomes f32 (`widen`): for each
// row m, pair k, column n, two f32 additions of exact products (a product of two bf16 or two f16
// values fits f32's 24-bit significand and exponent range), each rounded to nearest even, output
// denormals flushed to zero.
template <float (*widen)(uint16_t)>
void tile_dot_pairs(const char* instruction, EmulatedTile* c, const EmulatedTile* a, const EmulatedTile* b, int64_t m, int64_t n, int64_t k) {
  // The shape checks (SDM, "Exceptions: #UD if ..."): srcdest.colsb, srcdest.rows, src1.rows,
  // src1.colsb = src2.rows·4, src2.colsb = srcdest.colsb.
  check_shape(instruction, m, n);
  if (c->rows != m || c->colsb != n) fault(instruction, "accumulator shape", c->rows, c->colsb);
  if (a->rows != m || a->colsb != k) fault(instruction, "A shape", a->rows, a->colsb);
  if (b->rows * 4 != k || b->colsb != n) fault(instruction, "B shape", b->rows, b->colsb);
  if (n % 4 != 0 || k % 4 != 0) fault(instruction, "widths not whole f32 / 16-bit pairs", n, k);
  for (int64_t row = 0; row < m; ++row) {
    float* out = reinterpret_cast<float*>(c->data + row * 64);
    const uint16_t* a_row = reinterpret_cast<const uint16_t*>(a->data + row * 64);
    for (int64_t pair = 0; pair < k / 4; ++pair) {
      const uint16_t* b_row = reinterpret_cast<const uint16_t*>(b->data + pair * 64);
      const float a0 = widen(a_row[2 * pair]), a1 = widen(a_row[2 * pair + 1]);
      for (int64_t column = 0; column < n / 4; ++column) {
        float value = out[column];
        value = ftz(value + a0 * widen(b_row[2 * column]));
        value = ftz(value + a1 * widen(b_row[2 * column + 1]));
        out[column] = value;
      }
    }
  }
}

}  // namespace

extern "C" {

void orthojit_amx_emulated_tdpbf16ps(EmulatedTile* c, const EmulatedTile* a, const EmulatedTile* b, int64_t m, int64_t n, int64_t k) {
  tile_dot_pairs<bf16_daz>("TDPBF16PS", c, a, b, m, n, k);
}

void orthojit_amx_emulated_tdpfp16ps(EmulatedTile* c, const EmulatedTile* a, const EmulatedTile* b, int64_t m, int64_t n, int64_t k) {
  tile_dot_pairs<f16_exact>("TDPFP16PS", c, a, b, m, n, k);
}

}  // extern "C"

std::vector<std::pair<std::string, void*>> amx_emulator_symbols() {
  return {{"orthojit_amx_emulated_tilezero", reinterpret_cast<void*>(&orthojit_amx_emulated_tilezero)},
          {"orthojit_amx_emulated_tileloadd", reinterpret_cast<void*>(&orthojit_amx_emulated_tileloadd)},
          {"orthojit_amx_emulated_tilestored", reinterpret_cast<void*>(&orthojit_amx_emulated_tilestored)},
          {"orthojit_amx_emulated_tdpbf16ps", reinterpret_cast<void*>(&orthojit_amx_emulated_tdpbf16ps)},
          {"orthojit_amx_emulated_tdpfp16ps", reinterpret_cast<void*>(&orthojit_amx_emulated_tdpfp16ps)}};
}

}  // namespace orthojit::cpu
