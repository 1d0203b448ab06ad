#!/usr/bin/env python3
"""What DistributedMuon's trainer features cost, in one process (comm="local": the step's own work,
no transport): a stage-2 step with and without max_grad_norm (the clipping's f64 pass over the
gradient and its tiny all-gather), and state_dict() / load_state_dict() (the gather of the
partitioned state into orthojit.Muon's layout, and back). CPU tensors of GPT-2-small block shapes;
medians of --repeats, side by side in one run.

    PYTHONPATH=build/python /usr/bin/python3 bench/distributed_step_cost.py [--repeats 7] [--preset deepspeed]
"""
import argparse
import statistics
import time

import torch

import orthojit

SHAPES = [(768, 768)] * 4 + [(3072, 768), (768, 3072), (768,), (3072,)]


def parameters():
    torch.manual_seed(0)
    return [(f"layer.{i}.{'weight' if len(s) == 2 else 'bias'}", torch.nn.Parameter(torch.randn(*s) * 0.02)) for i, s in enumerate(SHAPES)]


def median_seconds(fn, repeats):
    times = []
    for _ in range(repeats):
        started = time.perf_counter()
        fn()
        times.append(time.perf_counter() - started)
    return statistics.median(times)


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--repeats", type=int, default=7)
    parser.add_argument("--preset", default="deepspeed")
    args = parser.parse_args()
    # Both optimizers built first, their steps then timed in alternation (ABAB...), so that the
    # drift of a shared machine falls on both alike.
    optimizers = {}
    for clip in (None, 1.0):
        named = parameters()
        optimizers[clip] = orthojit.DistributedMuon(named, "local", stage=2, preset=args.preset, max_grad_norm=clip)
        for _, p in named:
            p.grad = torch.randn_like(p)
        optimizers[clip].step()  # the first step's allocations out of the timing
    times = {clip: [] for clip in optimizers}
    for _ in range(args.repeats):
        for clip, optimizer in optimizers.items():
            times[clip].append(median_seconds(optimizer.step, 1))
    steps = {clip: statistics.median(values) for clip, values in times.items()}
    for clip, seconds in steps.items():
        print(f"step, max_grad_norm={clip}: {seconds * 1e3:.1f} ms (median of {args.repeats}, alternating)", flush=True)
    print(f"clipping costs {100 * (steps[1.0] / steps[None] - 1):+.1f}% of a step")
    optimizer = optimizers[1.0]
    state = optimizer.state_dict()
    elements = sum(p.numel() for _, p in named)
    print(f"{elements} elements: state_dict {median_seconds(optimizer.state_dict, args.repeats) * 1e3:.1f} ms, "
          f"load_state_dict {median_seconds(lambda: optimizer.load_state_dict(state), args.repeats) * 1e3:.1f} ms")


if __name__ == "__main__":
    main()
