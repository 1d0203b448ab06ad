// Emits the AMX-BF16 microkernel as LLVM IR (MicrokernelSpec::amx; with amx_fp16 the same kernel
// on f16 pairs, TDPFP16PS for TDPBF16PS):
//
//   void NAME(const uint16* a_panel,    // one packed A panel: 32 rows x kc   (amx_packing.h)
//             const uint16* b_panels,   // `panels` consecutive packed B panels: kc x 32 columns each
//             float* c, int64 ldc,      // the f32 accumulator of the first microtile, row stride ldc
//             int32 accumulate,         // 0: c = A·B   1: c = c + A·B (C tiles loaded, not zeroed)
//             int64 next_a,          // address of the A panel the next call reads (prefetched to L2)
//             int64 panels)
//
// For each B panel p, the 32 x 32 microtile at c + 32p is computed in four 16x16 f32 accumulator
// tiles (tmm registers: 4 C, 2 A, 2 B = all 8 tiles):
//
//            B tile 0   B tile 1          per 32-k step: 2 A tiles + 2 B tiles loaded (4 KiB),
//   A tile 0  C00        C01              4 TDPBF16PS (each 16x16x32 multiply-adds)
//   A tile 1  C10        C11
//
// Shapes are baked in: m_valid rows (A tile 1 and C1x only when m_valid > 16, with m_valid - 16
// rows), n_valid columns (C tile widths 4·min(16, ..) bytes), kc / 32 unrolled k steps (the K
// remainder is zero-padded by the packing, up to 31 k). The C tiles go straight to the accumulator
// with their edge shapes, so edge microtiles need no scratch tile.
//
// Written with LLVM's tile-number intrinsics (llvm.x86.tileloadd64, tileloaddt164, tdpbf16ps,
// tilestored64, tilezero: the tmm register an immediate) and the kernel's own tile configuration
// (a 64-byte constant, LDTILECFG in the prologue, TILERELEASE at the return), not the x86_amx
// values that let LLVM allocate tiles, so that the emitted sequence is exactly the one written
// (and the one the emulator runs; measured, the choice of registers does not change the rate).
// The step order, the streaming hint on B and the measurements are in amx_codegen.cpp and
// docs/cpu-backend.md. The configuration is loaded per call, so any thread (the tile
// configuration is per thread) can run any kernel.
#pragma once

#include <memory>
#include <string>

#include "cpu/microkernel_codegen.h"

namespace orthojit::cpu {

std::unique_ptr<llvm::Module> emit_amx_microkernel(const MicrokernelSpec& spec, llvm::LLVMContext& context);

// The native kernel's x86 assembly for a Sapphire Rapids CPU (Granite Rapids with amx_fp16), on
// any machine (tests check the
// tile instructions, the configuration and the absence of tile spills where AMX cannot run).
std::string amx_kernel_assembly(MicrokernelSpec spec);

}  // namespace orthojit::cpu
