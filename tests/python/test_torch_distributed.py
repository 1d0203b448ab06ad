"""orthojit.DistributedMuon in programs launched with torchrun (torch.distributed, gloo, CPU):
torchrun_distributed_check.py with 2 and 3 processes, every stage and mode bit-identical to
orthojit.Muon, and composed with DistributedDataParallel (gradients averaged once);
torchrun_checkpoint_check.py: LR schedulers, edited param_groups and checkpoints moving between
DistributedMuon and orthojit.Muon, bit-identical."""
import os
import subprocess
import sys

import pytest

torch = pytest.importorskip("torch")
import torch.distributed  # noqa: E402


HERE = os.path.dirname(__file__)
needs_gloo = pytest.mark.skipif(not torch.distributed.is_available() or not torch.distributed.is_gloo_available(),
                                reason="this torch has no torch.distributed with gloo")


def torchrun(ranks, script, *arguments):
    """`script` with `arguments` under torchrun on `ranks` processes of this host (one thread
    each); the finished process, after checking that every rank exited with 0."""
    # torchrun is `python -m torch.distributed.run`; --standalone: a free port per run.
    command = [sys.executable, "-m", "torch.distributed.run", "--nproc_per_node", str(ranks), "--standalone",
               # torch 1.13 under Python 3.11 turns "0" (Std.NONE) into None and fails (a zero
               # IntFlag is not iterated there): tee stdout (1), keep stderr in torchrun's log (2)
               "--tee", "1", "--redirects", "2", script, *arguments]
    result = subprocess.run(command, capture_output=True, text=True, timeout=600, env=dict(os.environ, OMP_NUM_THREADS="1"))
    assert result.returncode == 0, result.stdout[-4000:] + result.stderr[-4000:]
    return result


@needs_gloo
@pytest.mark.parametrize("ranks", [2, 3])
def test_distributed_muon_under_torchrun_is_bit_identical_to_muon(ranks):
    result = torchrun(ranks, os.path.join(HERE, "torchrun_distributed_check.py"))
    assert f"{ranks} ranks: OK" in result.stdout, result.stdout + result.stderr[-4000:]


@needs_gloo
@pytest.mark.parametrize("ranks", [2, 3])
def test_schedules_and_checkpoints_under_torchrun_match_muon(ranks):
    result = torchrun(ranks, os.path.join(HERE, "torchrun_checkpoint_check.py"))
    assert f"checkpoints and schedules, {ranks} ranks: OK" in result.stdout, result.stdout + result.stderr[-4000:]


@needs_gloo
@pytest.mark.parametrize("ranks", [2, 3, 4])
def test_the_ring_collectives_sum_and_gather_every_ranks_block(ranks):
    result = torchrun(ranks, os.path.join(HERE, "torchrun_ring_collectives_check.py"))
    assert f"ring collectives, {ranks} ranks: OK" in result.stdout, result.stdout + result.stderr[-4000:]


@needs_gloo
def test_the_example_trainer_resumes_bit_exactly_across_stages_and_modes(tmp_path):
    # examples/python/train_distributed_torchrun.py on 2 ranks: 12 steps straight, against 5 steps
    # at stage 3 (deepspeed mode), a checkpoint, and the remaining 7 in a new job at stage 1 in
    # balanced mode. The batches depend on (rank, step) only, so the final parameters must match
    # bit for bit: the optimizer state, the scheduler and the step count all came back.
    script = os.path.join(HERE, "..", "..", "examples", "python", "train_distributed_torchrun.py")
    checkpoint = str(tmp_path / "run.pt")

    def run(*extra):
        result = torchrun(2, script, "--steps", "12", "--save-every", "4", "--digest", *extra)
        lines = [line for line in result.stdout.splitlines() if "parameters sha256" in line]
        assert lines, result.stdout
        return lines[-1].split()[-1], result.stdout

    straight, _ = run("--stage", "2")
    interrupted, _ = run("--stage", "3", "--checkpoint", checkpoint, "--stop-after", "5")
    resumed, output = run("--stage", "1", "--mode", "balanced", "--checkpoint", checkpoint, "--resume")
    assert "resumed at step 5" in output, output
    assert interrupted != straight  # the interrupted job stopped early
    assert resumed == straight


def test_a_process_group_is_taken_and_misuse_is_explained():
    import orthojit

    linear = torch.nn.Linear(4, 3)
    with pytest.raises(ValueError, match="torch.distributed is not initialized"):
        orthojit.DistributedMuon(linear.named_parameters(), "torch")


@pytest.mark.parametrize("backend, cuda, host", [("gloo", False, True), ("nccl", True, False), ("cpu:gloo,cuda:nccl", True, True),
                                                 ("cuda:nccl,cpu:gloo", True, True), ("mpi", False, True)])
def test_a_groups_backend_says_which_tensors_it_moves(monkeypatch, backend, cuda, host):
    # torch >= 2.0 names one backend per device type ("cpu:gloo,cuda:nccl"); CUDA tensors need
    # NCCL, host tensors anything but NCCL. Read from the group's own backend string.
    from orthojit.distributed import _TorchCollectives

    monkeypatch.setattr(torch.distributed, "get_rank", lambda group=None: 0)
    monkeypatch.setattr(torch.distributed, "get_world_size", lambda group=None: 2)
    monkeypatch.setattr(torch.distributed, "get_backend", lambda group=None: backend)
    collectives = _TorchCollectives(None)
    assert (collectives.moves_cuda_tensors, collectives.moves_cpu_tensors) == (cuda, host)
    flag = torch.zeros(1)
    if host:  # a host flag stays on the host where the group moves host tensors
        assert collectives._staged(flag) is flag
