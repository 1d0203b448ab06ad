#!/usr/bin/env python3
"""How fast orthojit.Muon writes and reads its state file: L Muon matrices of N x N f32 (--layers
L, --size N; 16 x 4096² is a 1 GiB state), save_state then load_state, --repeats times, each
time printed and the medians. The disk's write-back makes single saves vary by 2x on a shared
machine: compare two builds by running this on each alternately, more than once
(bench/RESULTS.md, twenty-third session):

    PYTHONPATH=build/python /usr/bin/python3 bench/muon_state_file_speed.py [--layers L] [--size N] [--repeats R] [--path FILE]
"""
import argparse
import os
import statistics
import time

import torch

import orthojit


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--layers", type=int, default=16)
    parser.add_argument("--size", type=int, default=4096)
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--path", default="/tmp/orthojit-muon-state-speed.safetensors")
    args = parser.parse_args()
    torch.manual_seed(0)
    params = [(f"layers.{i}.w", torch.nn.Parameter(torch.randn(args.size, args.size))) for i in range(args.layers)]
    optimizer = orthojit.Muon(params, preset="keller")
    saved = optimizer.state_dict()
    for index, (_, p) in enumerate(params):
        saved["state"][index] = {"momentum_buffer": torch.randn_like(p)}
    optimizer.load_state_dict(saved)
    saves, loads = [], []
    for _ in range(args.repeats):
        started = time.perf_counter()
        optimizer.save_state(args.path)
        saves.append(time.perf_counter() - started)
        started = time.perf_counter()
        optimizer.load_state(args.path)
        loads.append(time.perf_counter() - started)
    size = os.path.getsize(args.path)
    os.remove(args.path)
    print(f"{size / 2**30:.2f} GiB state: save median {statistics.median(saves):.2f} s ({' '.join(f'{t:.2f}' for t in saves)}), "
          f"load median {statistics.median(loads):.2f} s ({' '.join(f'{t:.2f}' for t in loads)})")


if __name__ == "__main__":
    main()
