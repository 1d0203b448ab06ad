#!/usr/bin/env python3
"""The PyTorch baseline of scripts/gpu-check: Newton-Schulz written from the formula in plain
PyTorch bf16, the way torch.optim.Muon and Keller Jordan's Muon compute it:

    X = G / (||G||_F + eps);  per step: A = X Xᵀ;  B = b A + c A A;  X = a X + B X

with the coefficients of the orthojit program, tall matrices worked on transposed, batched over a
leading dimension. Timed with CUDA events after an L2 flush, 3 warm-ups, the median of --repeats.
--device cpu: the same on the CPU with torch.set_num_threads(--threads) (oneDNN's bf16 matmuls,
on AMX where the CPU has it), timed with time.perf_counter; e.g. for jordan_ns5 at 1024x4096:

    echo "jordan_ns5 1024 4096 1 3.4445,-4.775,2.0315;3.4445,-4.775,2.0315;3.4445,-4.775,2.0315;3.4445,-4.775,2.0315;3.4445,-4.775,2.0315 1e-07" > cases
    /usr/bin/python3 scripts/torch_ns_baseline.py cases --device cpu --threads 1

Input: the lines of `orthojit_gpu_bench --list-cases` ("program rows cols batch a,b,c;... eps").
Output (stdout): "program RxCxB median_ms" per case, what orthojit_gpu_bench --torch reads.
"""
import argparse
import statistics
import sys
import time

import torch


def newton_schulz(G, steps, eps):
    X = G.bfloat16()
    transposed = X.size(-2) > X.size(-1)
    if transposed:
        X = X.mT
    X = X / (X.norm(dim=(-2, -1), keepdim=True) + eps)
    for a, b, c in steps:
        A = X @ X.mT
        B = b * A + c * A @ A
        X = a * X + B @ X
    if transposed:
        X = X.mT
    return X


def read_cases(path):
    for line in open(path):
        fields = line.split()
        if len(fields) != 6:
            continue
        program, rows, cols, batch, triples, eps = fields[0], int(fields[1]), int(fields[2]), int(fields[3]), fields[4], float(fields[5])
        yield program, rows, cols, batch, [tuple(float(v) for v in t.split(",")) for t in triples.split(";")], eps


def run_on_cpu(args):
    if args.threads > 0:
        torch.set_num_threads(args.threads)
    print(f"# torch {torch.__version__} on the CPU, {torch.get_num_threads()} thread(s)", file=sys.stderr)
    for program, rows, cols, batch, steps, eps in read_cases(args.cases):
        shape = (batch, rows, cols) if batch > 1 else (rows, cols)
        G = torch.randn(shape, dtype=torch.float32)
        for _ in range(3):
            newton_schulz(G, steps, eps)
        times = []
        for _ in range(args.repeats):
            start = time.perf_counter()
            newton_schulz(G, steps, eps).float()
            times.append((time.perf_counter() - start) * 1e3)
        median = statistics.median(times)
        print(f"{program} {rows}x{cols}x{batch} {median:.4f}", flush=True)
        print(f"# {program} {rows}x{cols}x{batch}: {median:.3f} ms (p20..p80 {statistics.quantiles(times, n=5)[0]:.1f}..{statistics.quantiles(times, n=5)[-1]:.1f})",
              file=sys.stderr)


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("cases", help="the output of orthojit_gpu_bench --list-cases")
    parser.add_argument("--repeats", type=int, default=10)
    parser.add_argument("--device", choices=["cuda", "cpu"], default="cuda")
    parser.add_argument("--threads", type=int, default=0, help="--device cpu: torch.set_num_threads (0: torch's default)")
    args = parser.parse_args()
    if args.device == "cpu":
        return run_on_cpu(args)
    if not torch.cuda.is_available():
        sys.exit("torch_ns_baseline: torch sees no CUDA device")
    device = torch.device("cuda")
    flush = torch.empty(2 * 64 * 1024 * 1024, dtype=torch.uint8, device=device)  # twice an H100/H200 L2
    print(f"# torch {torch.__version__} on {torch.cuda.get_device_name()}", file=sys.stderr)
    for line in open(args.cases):
        fields = line.split()
        if len(fields) != 6:
            continue
        program, rows, cols, batch, triples, eps = fields[0], int(fields[1]), int(fields[2]), int(fields[3]), fields[4], float(fields[5])
        steps = [tuple(float(v) for v in t.split(",")) for t in triples.split(";")]
        shape = (batch, rows, cols) if batch > 1 else (rows, cols)
        G = torch.randn(shape, device=device, dtype=torch.float32)
        for _ in range(3):
            newton_schulz(G, steps, eps)
        times = []
        for _ in range(args.repeats):
            flush.zero_()
            start, stop = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            start.record()
            newton_schulz(G, steps, eps).float()
            stop.record()
            stop.synchronize()
            times.append(start.elapsed_time(stop))
        median = statistics.median(times)
        print(f"{program} {rows}x{cols}x{batch} {median:.4f}", flush=True)
        print(f"# {program} {rows}x{cols}x{batch}: {median:.3f} ms", file=sys.stderr)


if __name__ == "__main__":
    main()
