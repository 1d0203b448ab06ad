// Host loops compiled three times, for AVX-512 (x86-64-v4: F, BW, CD, DQ, VL), for AVX2 (x86-64-v3:
// AVX2, FMA, F16C, BMI; the AMD Zen 3 and older Intel machines this also runs on, where the
// widening of small 16-bit operands and the element loops were 12% of a 64x256 NS5 on SSE2 and
// the AVX2 version took 3% off it) and for the baseline x86-64 the binaries target, the version
// chosen once at load time by the CPU (GCC's
// target_clones: an ifunc whose resolver reads cpuid;
// https://gcc.gnu.org/onlinedocs/gcc/Common-Function-Attributes.html#index-target_005fclones).
// For the element loops of the executable (conversions to and from the storage types, the
// normalize's reductions and scaling): the products run on JIT-compiled kernels for the host's ISA
// already, but these loops ran on SSE2, and for a batch of small matrices they are a tenth of the
// time (measured: docs/cpu-backend.md, "Host loops"). The versions compute the same values:
// the loops are element-wise or reduce in an explicit lane order, and ISO C++ mode compiles
// without floating-point contraction, so no FMA appears in either.
//
// Only with GCC on x86-64 (Clang's target_clones takes other names), and not in sanitizer builds
// (an ifunc resolver runs before the sanitizer runtime is up).
#pragma once

#if defined(__GNUC__) && !defined(__clang__) && defined(__x86_64__) && !defined(__SANITIZE_ADDRESS__) && !defined(__SANITIZE_THREAD__)
#define ORTHOJIT_HOST_CLONES __attribute__((target_clones("arch=x86-64-v4", "arch=x86-64-v3", "default")))
#else
#define ORTHOJIT_HOST_CLONES
#endif
