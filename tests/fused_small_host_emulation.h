// Host emulation of kernels/cuda/orthojit_device.cuh for the fused kernel
// (tests/cuda_fused_small_test.cpp): the PTX-backed vocabulary comes from cuda_host_emulation.h
// (one std::thread per CUDA thread, a std::barrier for __syncthreads, the MMA as a warp
// collective), and what runs is the generated phase code and the real cta_product /
// FragmentSource: the test copies the device header's part after its "fully fused" marker next to
// this file as fused_part.cuh. The fused kernel's only shared memory is `extern __shared__`.
// Not part of the build: the test compiles it with `c++`.
#pragma once

#define OJ_EMULATION_DYNAMIC_SHARED_ONLY
#include "cuda_host_emulation.h"

#include "fused_part.cuh"
