"""orthojit chooses OpenBLAS's kernel before PyTorch loads the library (Debian's torch runs its
f32 matmuls on OpenBLAS, which picks its kernel once, at load): each case in a fresh process."""
import importlib.util
import json
import os
import subprocess
import sys

import pytest

HELPER = os.path.join(importlib.util.find_spec("orthojit").submodule_search_locations[0], "openblas_before_torch.py")

# Prints what the process ended with: whether the helper chose, the kernel of the OpenBLAS loaded
# (None when torch loads none), and OPENBLAS_CORETYPE afterwards.
REPORT = """
import ctypes, json, os
import torch  # loads OpenBLAS where the helper did not import torch
def core():
    for line in open("/proc/self/maps"):
        path = line.split()[-1]
        if "libopenblas" in os.path.basename(path):
            library = ctypes.CDLL(path)
            library.openblas_get_corename.restype = ctypes.c_char_p
            return library.openblas_get_corename().decode()
    return None
print(json.dumps({"chose": chose, "core": core(), "env": os.environ.get("OPENBLAS_CORETYPE")}))
"""

WITH_HELPER = """
import importlib.util, sys
spec = importlib.util.spec_from_file_location("openblas_before_torch", sys.argv[1])
helper = importlib.util.module_from_spec(spec)
spec.loader.exec_module(helper)
chose = helper.import_torch_with_openblas_kernel(sys.argv[2])
""" + REPORT

WITH_PACKAGE = """
import orthojit
chose = orthojit._orthojit._openblas_coretype_for_host()
""" + REPORT


def run(code, *args, env_extra=None):
    env = {k: v for k, v in os.environ.items() if k != "OPENBLAS_CORETYPE"}
    env.update(env_extra or {})
    out = subprocess.run([sys.executable, "-c", code, *args], env=env, capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    return json.loads(out.stdout.strip().splitlines()[-1])


def cpu_flags():
    for line in open("/proc/cpuinfo"):
        if line.startswith("flags"):
            return set(line.split(":", 1)[1].split())
    return set()


def torch_loads_openblas():
    return run("chose = None\n" + REPORT)["core"] is not None


@pytest.fixture(scope="module")
def openblas_under_torch():
    if not torch_loads_openblas():
        pytest.skip("this PyTorch does its f32 matmuls without OpenBLAS (MKL): no kernel to choose")


def test_the_kernel_is_chosen_for_the_import_only(openblas_under_torch):
    # Haswell runs on every AVX2+FMA CPU, and OpenBLAS's own detection picks another name on
    # both kinds of machine this project runs on (Zen on AMD; SkylakeX or Prescott on Xeons).
    if not {"avx2", "fma"} <= cpu_flags():
        pytest.skip("no AVX2+FMA: OpenBLAS's Haswell kernel would not run here")
    got = run(WITH_HELPER, HELPER, "Haswell")
    assert got == {"chose": True, "core": "Haswell", "env": None}


def test_a_user_choice_stands(openblas_under_torch):
    got = run(WITH_HELPER, HELPER, "Haswell", env_extra={"OPENBLAS_CORETYPE": "Prescott"})
    assert got == {"chose": False, "core": "Prescott", "env": "Prescott"}


def test_import_orthojit_gives_torch_orthojits_kernel(openblas_under_torch):
    got = run(WITH_PACKAGE)
    assert got["env"] is None, "the variable must be removed after torch's import"
    if got["chose"]:  # "" where OpenBLAS's own choice is as good (no AVX2)
        assert got["core"] == got["chose"]
