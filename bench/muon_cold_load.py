#!/usr/bin/env python3
"""orthojit.Muon.load_state from a cold page cache: L Muon matrices of N x N f32 (--layers L,
--size N; 16 x 4096² is a 1 GiB state), saved once, then loaded --repeats times with the page
cache dropped before each load (as root: `sync; echo 3 > /proc/sys/vm/drop_caches`; without
root the loads are warm and the script says so). Prints each load's time and the median. Run it
on two builds alternately to compare them (bench/RESULTS.md, twenty-third session):

    PYTHONPATH=build/python /usr/bin/python3 bench/muon_cold_load.py [--layers L] [--size N] [--repeats R] [--path FILE]

A virtual machine's disk may have caches below the guest that this cannot drop: "cold" is then
only partly cold, and the comparison is of the reads the loader issues, not of the disk.
"""
import argparse
import os
import statistics
import subprocess
import time

import torch

import orthojit


def drop_page_cache():
    """True when the cache was dropped (root), False otherwise."""
    try:
        subprocess.run(["sync"], check=True)
        with open("/proc/sys/vm/drop_caches", "w") as control:
            control.write("3\n")
        return True
    except OSError:
        return False


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--layers", type=int, default=16)
    parser.add_argument("--size", type=int, default=4096)
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--path", default="/tmp/orthojit-muon-cold-load.safetensors")
    args = parser.parse_args()
    torch.manual_seed(0)
    params = [(f"layers.{i}.w", torch.nn.Parameter(torch.randn(args.size, args.size))) for i in range(args.layers)]
    optimizer = orthojit.Muon(params, preset="keller")
    saved = optimizer.state_dict()
    for index, (_, p) in enumerate(params):
        saved["state"][index] = {"momentum_buffer": torch.randn_like(p)}
    optimizer.load_state_dict(saved)
    optimizer.save_state(args.path)
    size = os.path.getsize(args.path)
    times, cold = [], True
    for _ in range(args.repeats):
        cold = drop_page_cache() and cold
        started = time.perf_counter()
        optimizer.load_state(args.path)
        times.append(time.perf_counter() - started)
    os.remove(args.path)
    print(f"{size / 2**30:.2f} GiB state, {'cold' if cold else 'WARM (not root: the page cache was not dropped)'} loads: "
          + " ".join(f"{t:.2f}" for t in times) + f" s; median {statistics.median(times):.2f} s")


if __name__ == "__main__":
    main()
