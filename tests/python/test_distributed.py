"""orthojit.DistributedMuon under mpirun (2 and 3 processes): bit-identical to orthojit.Muon on the
same reduced gradients for every ZeRO stage and both modes (mpi_distributed_check.py)."""
import os
import shutil
import subprocess
import sys

import pytest

pytest.importorskip("mpi4py")
MPIRUN = shutil.which("mpirun")


@pytest.mark.skipif(MPIRUN is None, reason="mpirun (openmpi-bin) is not installed")
@pytest.mark.parametrize("ranks", [2, 3])
def test_distributed_muon_is_bit_identical_to_the_single_process_optimizer(ranks):
    script = os.path.join(os.path.dirname(__file__), "mpi_distributed_check.py")
    result = subprocess.run([MPIRUN, "-np", str(ranks), "--oversubscribe", "--allow-run-as-root", sys.executable, script],
                            capture_output=True, text=True, timeout=600, env=dict(os.environ, OMPI_MCA_rmaps_base_oversubscribe="1"))
    assert result.returncode == 0, result.stdout + result.stderr
    assert "OK" in result.stdout


def test_distributed_muon_explains_bad_arguments():
    import orthojit
    import torch

    linear = torch.nn.Linear(4, 3)
    with pytest.raises(ValueError, match="stage must be 1, 2 or 3"):
        orthojit.DistributedMuon(linear.named_parameters(), stage=4)
    with pytest.raises(ValueError, match="mode must be"):
        orthojit.DistributedMuon(linear.named_parameters(), mode="fastest")
    with pytest.raises(TypeError, match="mpi4py communicator"):
        orthojit.DistributedMuon(linear.named_parameters(), comm=42)
    with pytest.raises(ValueError, match="engine must be"):
        orthojit.DistributedMuon(linear.named_parameters(), engine="gloo")


def test_nccl_engine_says_what_is_missing_without_a_gpu():
    import orthojit
    import torch

    if "cuda" in orthojit.info().get("backends", []):
        pytest.skip("this machine has a CUDA device: the NCCL engine is exercised by scripts/gpu-check's machines")
    linear = torch.nn.Linear(4, 3)
    with pytest.raises((RuntimeError, ValueError), match="NCCL|CUDA|driver"):
        orthojit.DistributedMuon(linear.named_parameters(), engine="nccl")
