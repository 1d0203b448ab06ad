"""OpenBLAS's kernel, chosen before PyTorch loads the library.

Debian's python3-torch links OpenBLAS (the openblas-pthread alternative of libblas.so.3) for its
f32 CPU matmuls, and OpenBLAS picks its kernel once, when it is loaded, from CPUID or the
environment variable OPENBLAS_CORETYPE. OpenBLAS 0.3.21 does not know recent Xeons and falls back
to its Prescott (SSE3) kernel there. orthojit's own OpenBLAS calls (the tuner's vendor candidates,
`bench_model`'s vendor column) go to the same library once torch has loaded it, so orthojit chooses
the kernel as its C++ loader does (compiler/cpu/openblas_library.h) before the package imports
torch: it sets the variable for the import and removes it afterwards. Nothing happens when torch
is already imported or the user set OPENBLAS_CORETYPE (their choice stands), and a PyTorch without
OpenBLAS (the PyPI wheels use MKL) never reads the variable.

This file imports nothing of orthojit, so a test can load it on its own.
"""
import os
import sys


def import_torch_with_openblas_kernel(coretype):
    """Imports torch with OPENBLAS_CORETYPE=coretype set during the import only. Returns whether it
    chose (False: torch was already imported, the user set the variable, or no coretype)."""
    if not coretype or "torch" in sys.modules or os.environ.get("OPENBLAS_CORETYPE"):
        return False
    os.environ["OPENBLAS_CORETYPE"] = coretype
    try:
        import torch  # noqa: F401  (loads OpenBLAS, whose constructor reads the variable now)
    except ImportError:
        pass  # NumPy-only use of orthojit: no torch, nothing loaded
    finally:
        os.environ.pop("OPENBLAS_CORETYPE", None)
    return True
