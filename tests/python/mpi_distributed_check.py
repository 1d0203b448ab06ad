"""Run under mpirun by test_distributed.py: orthojit.DistributedMuon on every rank against the
single-process orthojit.Muon on the same reduced gradients (rank 0 supplies the gradient, the
others zeros, summed without averaging: the reduction is exact), for every stage and both modes,
three steps, one with missing gradients; the parameters must be bit-identical on every rank. Exits non-zero on any mismatch
(on every rank)."""
import sys

import torch
from mpi4py import MPI

import orthojit
from distributed_steps import compare_every_stage_and_mode

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


failures, distributed = compare_every_stage_and_mode(rank, model, SETTINGS, comm)
for line in failures:
    print(line, file=sys.stderr)

total = comm.allreduce(len(failures), op=MPI.SUM)
if rank == 0:
    print(f"{distributed.describe()}: {'OK' if total == 0 else f'{total} mismatches'}")
sys.exit(1 if total else 0)
