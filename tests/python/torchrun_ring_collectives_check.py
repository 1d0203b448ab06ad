"""Run under torchrun by test_torch_distributed.py (gloo, CPU tensors): the rings of point-to-point
transfers that orthojit.DistributedMuon's collectives run on CPU tensors (the reduce-scatter where
gloo has none, torch 1.13; the all-gather always), against the sum and the concatenation of every
rank's source computed on each rank.

Every rank makes every rank's source from the same seeds, fresh each run (rank 0 draws the base
and broadcasts it; failures print it), integers in f32, so the sum is exact in any order and the
comparison is bit for bit, for blocks of 1, 7 and 2**18 + 3 elements, on all
ranks and on a subgroup of every rank but rank 0 (global and group ranks differ there); the
all-gather also on bytes, as the optimizer passes it. Each rank checks its result, that its
source was left as it was, and that it sent (world-1)/world of the reduce-scatter's source (the
ring's traffic, half an all-reduce's) and world-1 blocks of the all-gather. Exits non-zero on any
mismatch."""

import os
import sys

import torch
import torch.distributed as dist

from orthojit.distributed import _TorchCollectives

dist.init_process_group("gloo")
rank, world = dist.get_rank(), dist.get_world_size()
failures = []
base = torch.tensor([int.from_bytes(os.urandom(4), "little") if rank == 0 else 0], dtype=torch.int64)
dist.broadcast(base, 0)
BASE = int(base.item())  # fresh inputs each run, the same on every rank


class CountingDistributed:
    """torch.distributed, counting the elements this rank sends."""

    def __init__(self):
        self.sent = 0

    def __getattr__(self, name):
        return getattr(dist, name)

    def batch_isend_irecv(self, ops):
        self.sent += sum(op.tensor.numel() for op in ops if op.op is dist.isend)
        return dist.batch_isend_irecv(ops)


def check_reduce_scatter(group, members, label):
    counting = CountingDistributed()
    collectives = _TorchCollectives(group, dist=counting)
    collectives.gloo_reduce_scatter = False  # the ring even where gloo has its own
    size, me = len(members), members.index(rank)
    for count in (1, 7, 2**18 + 3):
        sources = [torch.randint(-1000, 1000, (size * count,), generator=torch.Generator().manual_seed(BASE + 1000 * count + r)).float()
                   for r in range(size)]
        source = sources[me].clone()
        destination = torch.full((count,), float("nan"))
        counting.sent = 0
        collectives.reduce_scatter(source, destination)
        expected = torch.stack(sources).sum(0)[me * count:(me + 1) * count]
        if not torch.equal(destination, expected):
            bad = (destination != expected).nonzero().flatten()
            failures.append(f"{label}, blocks of {count}: {bad.numel()} elements differ, first at {bad[0].item()}")
        if not torch.equal(source, sources[me]):
            failures.append(f"{label}, blocks of {count}: the source was changed")
        if counting.sent != (size - 1) * count:
            failures.append(f"{label}, blocks of {count}: sent {counting.sent} elements, expected {(size - 1) * count}")


def check_all_gather(group, members, label):
    counting = CountingDistributed()
    collectives = _TorchCollectives(group, dist=counting)
    size, me = len(members), members.index(rank)
    for count in (1, 7, 2**18 + 3):
        for dtype in (torch.float32, torch.uint8):
            sources = [torch.randint(0, 100, (count,), generator=torch.Generator().manual_seed(BASE + 7 * count + r + 1)).to(dtype) for r in range(size)]
            source = sources[me].clone()
            destination = torch.full((size * count,), 255, dtype=dtype)
            counting.sent = 0
            collectives.all_gather(source, destination)
            if not torch.equal(destination, torch.cat(sources)):
                bad = (destination != torch.cat(sources)).nonzero().flatten()
                failures.append(f"{label}, all-gather of {count} {dtype}: {bad.numel()} elements differ, first at {bad[0].item()}")
            if not torch.equal(source, sources[me]):
                failures.append(f"{label}, all-gather of {count} {dtype}: the source was changed")
            if counting.sent != (size - 1) * count:
                failures.append(f"{label}, all-gather of {count} {dtype}: sent {counting.sent} elements, expected {(size - 1) * count}")


check_reduce_scatter(None, list(range(world)), "all ranks")
check_all_gather(None, list(range(world)), "all ranks")
others = list(range(1, world))
subgroup = dist.new_group(others)  # collective: every rank creates it
if rank in others and len(others) > 1:
    check_reduce_scatter(subgroup, others, "ranks 1..")
    check_all_gather(subgroup, others, "ranks 1..")
dist.barrier()
for failure in failures:
    print(f"rank {rank}: {failure} (seed base {BASE})", flush=True)
if not failures:
    print(f"ring collectives, {world} ranks: OK", flush=True)
dist.destroy_process_group()
sys.exit(1 if failures else 0)
