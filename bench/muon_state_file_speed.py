#!/usr/bin/env python3
"""How fast orthojit.Muon writes and reads its state file: L Muon matrices of N x N f32 (--layers
L, --size N; 16 x 4096² is a 1 GiB state), save_state then load_state, --repeats times, each
time printed and the medians. The disk's write-back makes single saves vary by 2x on a shared
machine: compare two builds by running this on each alternately, more than once
(bench/RESULTS.md, twenty-third session). --cold drops the page cache before each load (as
root: `sync; echo 3 > /proc/sys/vm/drop_caches`; without root the loads stay warm and the line
says so); a virtual machine's disk may have caches below the guest that this cannot drop, so
"cold" is then only partly cold.

    PYTHONPATH=build/python /usr/bin/python3 bench/muon_state_file_speed.py [--layers L] [--size N] [--repeats R] [--cold] [--path FILE]
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
    parser.add_argument("--cold", action="store_true", help="drop the page cache before each load")
    parser.add_argument("--path", default="/tmp/orthojit-muon-state-speed.safetensors")
    args = parser.parse_args()
    torch.manual_seed(0)
    params = [(f"layers.{i}.w", torch.nn.Parameter(torch.randn(args.size, args.size))) for i in range(args.layers)]
    optimizer = orthojit.Muon(params, preset="keller")
    saved = optimizer.state_dict()
    for index, (_, p) in enumerate(params):
        saved["state"][index] = {"momentum_buffer": torch.randn_like(p)}
    optimizer.load_state_dict(saved)
    saves, loads, cold = [], [], args.cold
    for _ in range(args.repeats):
        started = time.perf_counter()
        optimizer.save_state(args.path)
        saves.append(time.perf_counter() - started)
        if args.cold:
            cold = drop_page_cache() and cold
        started = time.perf_counter()
        optimizer.load_state(args.path)
        loads.append(time.perf_counter() - started)
    size = os.path.getsize(args.path)
    os.remove(args.path)
    loads_are = "cold" if cold else "WARM (not root: the page cache was not dropped)" if args.cold else "warm"
    print(f"{size / 2**30:.2f} GiB state, {loads_are} loads: save median {statistics.median(saves):.2f} s ({' '.join(f'{t:.2f}' for t in saves)}), "
          f"load median {statistics.median(loads):.2f} s ({' '.join(f'{t:.2f}' for t in loads)})")


if __name__ == "__main__":
    main()
