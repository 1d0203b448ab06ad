// A host emulation of the AMX instructions the AMX kernel uses, following the operation sections
// of the Intel SDM (vol. 2, TILELOADD, TILESTORED, TILEZERO, TDPBF16PS) and of the Intel ISA
// Extensions Programming Reference (TDPFP16PS, AMX-FP16): the kernels
// compiled with MicrokernelSpec::amx_emulated call these instead, so the driver's AMX path (packing,
// tile shapes, remainders, accumulation) runs and is tested on CPUs without AMX. An emulated tile is
// an EmulatedTile in the kernel's stack frame; its shape is checked on every use the way the
// hardware's tile configuration would fault (#UD), and a mismatch aborts with a message.
#pragma once

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

namespace orthojit::cpu {

struct alignas(64) EmulatedTile {
  int64_t rows = 0, colsb = 0;  // the configured shape: rows <= 16, bytes per row <= 64
  unsigned char pad[48];
  unsigned char data[16 * 64];
};
static_assert(sizeof(EmulatedTile) == 1088);

extern "C" {
void orthojit_amx_emulated_tilezero(EmulatedTile* tile, int64_t rows, int64_t colsb);
void orthojit_amx_emulated_tileloadd(EmulatedTile* tile, int64_t rows, int64_t colsb, const void* base, int64_t stride);
void orthojit_amx_emulated_tilestored(const EmulatedTile* tile, int64_t rows, int64_t colsb, void* base, int64_t stride);
// c += a·b with c (m x n/4 f32), a (m x k/2 bf16), b (k/4 pair rows x n/4 pairs); n, k in bytes.
void orthojit_amx_emulated_tdpbf16ps(EmulatedTile* c, const EmulatedTile* a, const EmulatedTile* b, int64_t m, int64_t n, int64_t k);
// The same with f16 pairs (input denormals kept, where TDPBF16PS treats them as zero).
void orthojit_amx_emulated_tdpfp16ps(EmulatedTile* c, const EmulatedTile* a, const EmulatedTile* b, int64_t m, int64_t n, int64_t k);
}

// (symbol name, address) of each function above, for the JIT's symbol table.
std::vector<std::pair<std::string, void*>> amx_emulator_symbols();

}  // namespace orthojit::cpu
