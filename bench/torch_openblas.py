"""The OpenBLAS under PyTorch's f32 CPU matmuls, for a baseline at its best.

Debian's python3-torch (1.13, `BLAS_INFO=generic`) does its f32 matmuls in the libblas.so.3 it
links, the openblas-pthread alternative: a library that runs its own threads, which
torch.set_num_threads does not reach. So a baseline that only calls torch.set_num_threads(1)
still multiplies on every core. Its kernel is chosen when torch loads it; `import orthojit` before
`import torch` chooses it for the CPU (orthojit/openblas_before_torch.py).

    import orthojit, torch
    torch_openblas.set_threads(n)                 # with torch.set_num_threads(n)
    print(torch_openblas.describe())
"""
import ctypes
import os


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
