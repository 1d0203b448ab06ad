"""The OpenBLAS under PyTorch's f32 CPU matmuls, set up so that a baseline runs at its best.

Debian's python3-torch (1.13, `BLAS_INFO=generic`) does its f32 matmuls in the libblas.so.3 it
links, the openblas-pthread alternative: a library that loads with torch, chooses its kernel then
(from CPUID or OPENBLAS_CORETYPE) and runs its own threads, which torch.set_num_threads does not
reach. So a baseline that only calls torch.set_num_threads(1) still multiplies on every core, and
on a CPU that OpenBLAS 0.3.21 does not know (recent Xeons) it runs the Prescott (SSE3) kernel.

    import torch_openblas
    torch_openblas.choose_kernel_before_torch()   # before `import torch`
    import torch
    torch_openblas.set_threads(n)                 # with torch.set_num_threads(n)
    print(torch_openblas.describe())

The kernel is chosen as orthojit chooses it for its own OpenBLAS calls
(compiler/cpu/openblas_library.cpp): SkylakeX with AVX-512F, Zen on an AMD CPU with AVX2 and FMA,
Haswell on another, OpenBLAS's own choice otherwise; a value the user set stands.
"""
import ctypes
import os
import sys


def best_coretype(cpuinfo="/proc/cpuinfo"):
    flags, vendor = set(), ""
    with open(cpuinfo) as lines:
        for line in lines:
            key, _, value = line.partition(":")
            if key.strip() == "flags" and not flags:
                flags = set(value.split())
            elif key.strip() == "vendor_id" and not vendor:
                vendor = value.strip()
    if "avx512f" in flags:
        return "SkylakeX"
    if "avx2" in flags and "fma" in flags:
        return "Zen" if vendor == "AuthenticAMD" else "Haswell"
    return ""


def choose_kernel_before_torch():
    """Sets OPENBLAS_CORETYPE for this CPU unless the user did; returns who chose."""
    if "torch" in sys.modules:
        raise RuntimeError("torch_openblas.choose_kernel_before_torch() must run before `import torch`: "
                           "OpenBLAS chooses its kernel when torch loads it")
    if os.environ.get("OPENBLAS_CORETYPE"):
        return "OPENBLAS_CORETYPE=%s set by the user" % os.environ["OPENBLAS_CORETYPE"]
    coretype = best_coretype()
    if not coretype:
        return "OpenBLAS's own detection"
    os.environ["OPENBLAS_CORETYPE"] = coretype
    return "OPENBLAS_CORETYPE=%s for this CPU" % coretype


def loaded_openblas():
    """The OpenBLAS this process has loaded (torch's), or None."""
    with open("/proc/self/maps") as maps:
        for line in maps:
            path = line.split()[-1]
            if "libopenblas" in os.path.basename(path):
                return ctypes.CDLL(path)
    return None


def set_threads(threads):
    library = loaded_openblas()
    if library is not None:
        library.openblas_set_num_threads(ctypes.c_int(threads))


def describe():
    library = loaded_openblas()
    if library is None:
        return "no OpenBLAS loaded (torch's f32 matmuls run on another BLAS)"
    library.openblas_get_corename.restype = ctypes.c_char_p
    return "OpenBLAS %s, %d thread(s)" % (library.openblas_get_corename().decode(), library.openblas_get_num_threads())
