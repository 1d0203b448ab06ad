#!/usr/bin/env python3
"""One Muon optimizer step on the CPU: orthojit.Muon against Muon written from the formula in
PyTorch (Keller Jordan's / torch.optim.Muon's code: EMA momentum, Nesterov, Newton-Schulz with
jordan coefficients, X/(|X|+eps), transposing tall matrices), side by side in one run, on the
matrices of a transformer block stack, and torch.optim.Muon itself where PyTorch has it (>= 2.9).
All use the same threads; PyTorch's NS runs in bf16 (as the reference implementations do) and in
f32 (the faster choice on most CPUs); orthojit's in bf16 storage with f32 accumulation on its JIT
kernels, with the strategy its heuristic (or tuning records) picks.

    PYTHONPATH=build/python /usr/bin/python3 bench/muon_step_bench.py [--hidden 512] [--layers 2] [--steps 5] [--threads T]
    PYTHONPATH=build/python /usr/bin/python3 bench/muon_step_bench.py --shapes 256x896,896x256 [--preset torch] [--steps 15]

    PYTHONPATH=build/python /usr/bin/python3 bench/muon_step_bench.py --grouping [--hidden 128] [--layers 8] [--steps 9] [--threads T]

Prints the median step time of each and the ratios. --grouping: orthojit.Muon over the block
stack in one optimizer (the equal shapes of all layers step as one batched compiled Muon step)
against one orthojit.Muon per parameter (a compiled call per parameter, as steps ran before the
grouping), bf16 parameters, the torch preset, rounds alternating. --shapes: orthojit.Muon alone, one bf16
parameter of each shape at a time (the step's own cost per shape, e.g. old and new builds side by
side).

PyTorch's f32 matmuls run on the OpenBLAS torch loads (bench/torch_openblas.py): orthojit is
imported first, so that kernel is the one orthojit chooses for the CPU, and its threads are set to
the same count as torch's.
"""
import argparse
import os
import statistics
import sys
import time

import orthojit  # before torch: it chooses OpenBLAS's kernel for the CPU before torch loads it
import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import torch_openblas  # noqa: E402


def newton_schulz(G, steps=5, eps=1e-7, dtype=torch.bfloat16):
    a, b, c = 3.4445, -4.7750, 2.0315
    X = G.to(dtype)
    transposed = X.size(-2) > X.size(-1)
    if transposed:
        X = X.mT
    X = X / (X.norm() + eps)
    for _ in range(steps):
        A = X @ X.mT
        B = b * A + c * A @ A
        X = a * X + B @ X
    if transposed:
        X = X.mT
    return X


class FormulaMuon:
    """Muon from the formula, as torch.optim.Muon computes it (weight decay 0)."""

    def __init__(self, params, lr=0.02, momentum=0.95, dtype=torch.bfloat16):
        self.params, self.lr, self.beta, self.dtype = list(params), lr, momentum, dtype
        self.buffers = [torch.zeros_like(p) for p in self.params]

    @torch.no_grad()
    def step(self):
        for p, buf in zip(self.params, self.buffers):
            g = p.grad
            buf.lerp_(g, 1 - self.beta)
            update = g.lerp(buf, self.beta)
            update = newton_schulz(update, dtype=self.dtype).to(p.dtype)
            scale = max(1, p.size(-2) / p.size(-1)) ** 0.5
            p.add_(update, alpha=-self.lr * scale)


def model(hidden, layers):
    torch.manual_seed(0)
    shapes = []
    for _ in range(layers):
        shapes += [(3 * hidden, hidden), (hidden, hidden), (4 * hidden, hidden), (hidden, 4 * hidden)]
    return [torch.nn.Parameter(torch.randn(*s) * 0.02) for s in shapes]


def time_steps(optimizer, params, steps):
    for p in params:
        p.grad = torch.randn_like(p)
    optimizer.step()  # warm-up (orthojit compiles its kernels here)
    times = []
    for _ in range(steps):
        for p in params:
            p.grad = torch.randn_like(p)
        start = time.perf_counter()
        optimizer.step()
        times.append(time.perf_counter() - start)
    return statistics.median(times) * 1e3


class PerParameter:
    """One orthojit.Muon per parameter: a compiled Muon call per parameter per step."""

    def __init__(self, params, **options):
        self.optimizers = [orthojit.Muon([(f"w{i}", p)], **options) for i, p in enumerate(params)]

    def step(self):
        for optimizer in self.optimizers:
            optimizer.step()


def grouping(args):
    settings = {"muon.threads": args.threads} if args.threads else None
    params = [torch.nn.Parameter(p.detach().to(torch.bfloat16)) for p in model(args.hidden, args.layers)]
    shapes = sorted({tuple(p.shape) for p in params})
    print(f"torch {torch.__version__}; orthojit.Muon(preset={args.preset!r}), {args.layers} layers of {shapes}, bf16, "
          f"{args.threads or 'one per core'} threads")
    runs = {"together (one optimizer)": orthojit.Muon([(f"w{i}", p) for i, p in enumerate(params)], preset=args.preset, settings=settings),
            "alone (one optimizer per parameter)": PerParameter(params, preset=args.preset, settings=settings)}
    medians = {name: [] for name in runs}
    for _ in range(3):  # rounds alternate, so a noisy minute hits both
        for name, optimizer in runs.items():
            medians[name].append(time_steps(optimizer, params, args.steps))
    together = statistics.median(medians["together (one optimizer)"])
    print(f"\n{'step':<40} {'median ms':>10} {'rounds':>24} {'together speedup':>17}")
    for name, values in medians.items():
        ms = statistics.median(values)
        print(f"{name:<40} {ms:>10.2f} {' '.join(f'{v:.2f}' for v in values):>24} {ms / together:>16.2f}x")


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--hidden", type=int, default=512)
    parser.add_argument("--layers", type=int, default=2)
    parser.add_argument("--steps", type=int, default=5)
    parser.add_argument("--threads", type=int, default=0, help="threads for both (default: PyTorch's)")
    parser.add_argument("--shapes", help="RxC,...: orthojit.Muon alone on one bf16 parameter of each shape")
    parser.add_argument("--preset", default="torch", help="the preset of --shapes and --grouping (default torch: bf16 standard NS5)")
    parser.add_argument("--grouping", action="store_true", help="one optimizer for the stack against one per parameter")
    args = parser.parse_args()
    if args.threads:
        torch.set_num_threads(args.threads)
    threads = torch.get_num_threads()
    torch_openblas.set_threads(threads)
    if args.shapes:
        where = f"{args.threads} threads" if args.threads else "orthojit's default threads (one per core)"
        print(f"torch {torch.__version__}; orthojit.Muon(preset={args.preset!r}) on {where}, one bf16 parameter at a time")
        for text in args.shapes.split(","):
            rows, cols = (int(v) for v in text.split("x"))
            torch.manual_seed(0)
            params = [torch.nn.Parameter((torch.randn(rows, cols) * 0.02).to(torch.bfloat16))]
            optimizer = orthojit.Muon([("layers.0.weight", params[0])], preset=args.preset, settings={"muon.threads": args.threads} if args.threads else None)
            print(f"{text:>12} {time_steps(optimizer, params, args.steps):10.2f} ms")
        return
    if args.grouping:
        grouping(args)
        return
    shapes = [tuple(p.shape) for p in model(args.hidden, 1)]
    print(f"torch {torch.__version__}, {threads} threads; f32 matmuls on {torch_openblas.describe()}; {args.layers} layers of {shapes}")
    results = {}
    params = model(args.hidden, args.layers)
    results["orthojit.Muon (keller, bf16 NS, cpu backend)"] = time_steps(
        orthojit.Muon([("w%d" % i, p) for i, p in enumerate(params)], preset="keller", settings={"muon.threads": threads}), params, args.steps)
    for dtype in (torch.bfloat16, torch.float32):
        params = model(args.hidden, args.layers)
        results[f"PyTorch formula Muon ({str(dtype).replace('torch.', '')} NS)"] = time_steps(FormulaMuon(params, dtype=dtype), params, args.steps)
    if hasattr(torch.optim, "Muon"):  # PyTorch >= 2.9: the peer itself (its NS in bf16)
        params = model(args.hidden, args.layers)
        results["torch.optim.Muon"] = time_steps(torch.optim.Muon(params, lr=0.02, weight_decay=0.0), params, args.steps)
    if threads > 1:
        # The f32 products run on OpenBLAS's threads; torch's own (OpenMP, for the element-wise
        # ops) spin between parallel regions and can take the cores OpenBLAS needs. One torch
        # thread beside OpenBLAS's is the baseline at its best where that happens.
        torch.set_num_threads(1)
        params = model(args.hidden, args.layers)
        results[f"PyTorch formula Muon (float32 NS, 1 torch thread)"] = time_steps(FormulaMuon(params, dtype=torch.float32), params, args.steps)
        torch.set_num_threads(threads)
    ours = next(iter(results.values()))
    print(f"\n{'implementation':<52} {'median ms':>10} {'orthojit speedup':>17}")
    for name, ms in results.items():
        print(f"{name:<52} {ms:>10.1f} {ms / ours:>16.2f}x")


if __name__ == "__main__":
    main()
