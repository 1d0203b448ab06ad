#!/usr/bin/env python3
"""The gradient reduce-scatter of DistributedMuon where gloo has none (torch 1.13): the ring of
point-to-point transfers (orthojit.distributed._TorchCollectives) against the all-reduce of the
whole source and a slice, which it replaced. Run under torchrun, CPU tensors; both forms
alternate in one run, medians of --repeats per size, rank 0 prints the table.

    PYTHONPATH=build/python /usr/bin/python3 -m torch.distributed.run --nproc_per_node 2 --standalone \\
        bench/torch_reduce_scatter_speed.py [--repeats 9]
"""
import argparse
import statistics
import time

import torch
import torch.distributed as dist

from orthojit.distributed import _TorchCollectives


def all_reduce_and_slice(source, destination, rank):
    total = source.clone()
    dist.all_reduce(total)
    count = destination.numel()
    destination.copy_(total[rank * count:(rank + 1) * count])


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--repeats", type=int, default=9)
    parser.add_argument("--sizes", type=int, nargs="+", default=[1 << 18, 1 << 20, 1 << 22, 1 << 24], help="source elements per rank")
    args = parser.parse_args()
    dist.init_process_group("gloo")
    rank, world = dist.get_rank(), dist.get_world_size()
    collectives = _TorchCollectives(None)
    collectives.gloo_reduce_scatter = False
    forms = {"all-reduce + slice": lambda s, d: all_reduce_and_slice(s, d, rank), "ring": collectives.reduce_scatter}
    if rank == 0:
        print(f"torch {torch.__version__}, {world} ranks, gloo; medians of {args.repeats}, ms")
        print(f"{'source elements':>16} {'all-reduce + slice':>19} {'ring':>9} {'speed-up':>9}")
    for size in args.sizes:
        size = size // world * world
        source, destination = torch.randn(size), torch.empty(size // world)
        times = {name: [] for name in forms}
        for _ in range(args.repeats):
            for name, form in forms.items():
                dist.barrier()
                start = time.perf_counter()
                form(source, destination)
                dist.barrier()
                times[name].append(time.perf_counter() - start)
        if rank == 0:
            before, after = (statistics.median(times[name]) * 1e3 for name in forms)
            print(f"{size:>16} {before:>19.2f} {after:>9.2f} {before / after:>8.2f}x")
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
