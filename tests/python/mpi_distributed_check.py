"""Run under mpirun by test_distributed.py: orthojit.DistributedMuon on every rank against the
single-process orthojit.Muon on the same reduced gradients (rank 0 supplies the gradient, the
others zeros, summed without averaging: the reduction is exact), for every stage and both modes,
three steps, one with missing gradients; the parameters must be bit-identical on every rank. Exits non-zero on any mismatch
(on every rank)."""
import sys

import torch
from mpi4py import MPI

import orthojit

comm = MPI.COMM_WORLD
rank = comm.Get_rank()
SETTINGS = {"muon.backend": "ref", "muon.precision": "f32", "muon.weight_decay": 0.01, "adam.weight_decay": 0.01}


def model(seed):
    torch.manual_seed(seed)
    # Awkward sizes so partitions cut through matrices; an embedding and biases for AdamW.
    return torch.nn.ModuleDict({
        "embed": torch.nn.Embedding(11, 6),
        "hidden": torch.nn.Linear(6, 13),
        "out": torch.nn.Linear(13, 7),
    })


failures = 0
for stage in (1, 2, 3):
    for mode in ("deepspeed", "balanced"):
        distributed_model, reference_model = model(1), model(1)
        distributed = orthojit.DistributedMuon(distributed_model.named_parameters(), comm, stage=stage, mode=mode, preset="keller",
                                               settings=SETTINGS, average_gradients=False)
        reference = orthojit.Muon(reference_model.named_parameters(), preset="keller", settings=SETTINGS)
        for step in range(3):
            torch.manual_seed(100 + step)
            gradients = {name: torch.randn_like(p) for name, p in reference_model.named_parameters()}
            # Step 1: one matrix and one bias without a gradient on every rank: the keller preset
            # (missing_grad = zero) steps them with zeros in both optimizers.
            missing = {"hidden.weight", "out.bias"} if step == 1 else set()
            for name, p in reference_model.named_parameters():
                p.grad = None if name in missing else gradients[name].clone()
            for name, p in distributed_model.named_parameters():
                p.grad = None if name in missing else gradients[name].clone() if rank == 0 else torch.zeros_like(p)
            report = distributed.step()
            if stage == 3:
                distributed.gather_parameters()
            reference.step()
            if report["skipped"]:
                print(f"rank {rank}: stage {stage} {mode}: step skipped: {report['reason']}", file=sys.stderr)
                failures += 1
            for (name, a), (_, b) in zip(distributed_model.named_parameters(), reference_model.named_parameters()):
                if not torch.equal(a.detach(), b.detach()):
                    print(f"rank {rank}: stage {stage} {mode} step {step}: {name} differs (max {(a - b).abs().max().item():.3g})", file=sys.stderr)
                    failures += 1

total = comm.allreduce(failures, op=MPI.SUM)
if rank == 0:
    print(f"{distributed.describe()}: {'OK' if total == 0 else f'{total} mismatches'}")
sys.exit(1 if total else 0)
