#!/usr/bin/env python3
"""DistributedMuon's collectives on CPU tensors over gloo (orthojit.distributed._TorchCollectives)
against what they replaced: the ring reduce-scatter (where gloo has none, torch 1.13) against an
all-reduce of the whole source and a slice, and the ring all-gather against gloo's all_gather
into the blocks of the destination. Run under torchrun; the old and new forms alternate in one
run, medians of --repeats per size, rank 0 prints the table.

    OMP_NUM_THREADS=1 PYTHONPATH=build/python /usr/bin/python3 -m torch.distributed.run \\
        --nproc_per_node 2 --standalone --tee 1 --redirects 2 bench/torch_ring_collectives_speed.py [--repeats 9]
"""
import argparse
import statistics
import time

import torch
import torch.distributed as dist

from orthojit.distributed import _TorchCollectives


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--repeats", type=int, default=9)
    parser.add_argument("--sizes", type=int, nargs="+", default=[1 << 18, 1 << 20, 1 << 22, 1 << 24],
                        help="elements of the whole buffer (the reduce-scatter's source, the all-gather's result)")
    args = parser.parse_args()
    dist.init_process_group("gloo")
    rank, world = dist.get_rank(), dist.get_world_size()
    collectives = _TorchCollectives(None)
    collectives.gloo_reduce_scatter = False  # the ring even where gloo has its own

    def all_reduce_and_slice(source, destination):
        total = source.clone()
        dist.all_reduce(total)
        count = destination.numel()
        destination.copy_(total[rank * count:(rank + 1) * count])

    def gloo_all_gather(block, whole):
        dist.all_gather(list(whole.chunk(world)), block)

    # (collective, old form, new form, the arguments for a buffer of `size` elements)
    rows = [("reduce-scatter", all_reduce_and_slice, collectives.reduce_scatter, lambda size: (torch.randn(size), torch.empty(size // world))),
            ("all-gather", gloo_all_gather, collectives.all_gather, lambda size: (torch.randn(size // world), torch.empty(size)))]
    if rank == 0:
        print(f"torch {torch.__version__}, {world} ranks, gloo; medians of {args.repeats}, ms")
        print(f"{'collective':>15} {'elements':>10} {'before':>9} {'ring':>9} {'speed-up':>9}")
    for name, before, after, arguments in rows:
        for size in args.sizes:
            size = size // world * world
            source, destination = arguments(size)
            times = {form: [] for form in (before, after)}
            for _ in range(args.repeats):
                for form in (before, after):
                    dist.barrier()
                    start = time.perf_counter()
                    form(source, destination)
                    dist.barrier()
                    times[form].append(time.perf_counter() - start)
            if rank == 0:
                old, new = (statistics.median(times[form]) * 1e3 for form in (before, after))
                print(f"{name:>15} {size:>10} {old:>9.2f} {new:>9.2f} {old / new:>8.2f}x")
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
