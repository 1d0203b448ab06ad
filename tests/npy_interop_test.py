#!/usr/bin/env python3
"""orthojit run on .npy files written by NumPy itself, checked against Newton–Schulz written in
NumPy (float64): an independent reader/writer and an independent implementation of the math.
Usage: npy_interop_test.py path/to/orthojit"""
import os
import subprocess
import sys
import tempfile

import numpy as np

ORTHOJIT = sys.argv[1]
JORDAN = [(3.4445, -4.7750, 2.0315)] * 5
POLAR = [(8.156554524902461, -22.48329292557795, 15.878769915207462),
         (4.042929935166739, -2.808917465908714, 0.5000178451051316),
         (3.8916678022926607, -2.772484153217685, 0.5060648178503393),
         (3.285753657755655, -2.3681294933425376, 0.46449024233003106),
         (2.3465413258596377, -1.7097828382687081, 0.42323551169305323)]


def newton_schulz(g, steps, safety, eps):
    x = g.astype(np.float64)
    tall = x.shape[-2] > x.shape[-1]
    if tall:
        x = np.swapaxes(x, -1, -2)
    x = x / (np.linalg.norm(x, axis=(-2, -1), keepdims=True) * safety + eps)
    for a, b, c in steps:
        A = x @ np.swapaxes(x, -1, -2)
        B = b * A + c * A @ A
        x = a * x + B @ x
    return np.swapaxes(x, -1, -2) if tall else x


def run(args):
    return subprocess.run([ORTHOJIT, "run", *args], capture_output=True, text=True)


failures = 0


def check(condition, message):
    global failures
    print(("ok: " if condition else "FAIL: ") + message)
    failures += 0 if condition else 1


with tempfile.TemporaryDirectory() as work:
    rng = np.random.default_rng(1234)
    cases = [("wide_f32", rng.standard_normal((12, 40)).astype(np.float32)),
             ("tall_f64", rng.standard_normal((36, 10))),
             ("batch_f32", rng.standard_normal((3, 9, 20)).astype(np.float32))]
    for name, g in cases:
        src, dst = os.path.join(work, name + ".npy"), os.path.join(work, name + "_out.npy")
        np.save(src, g)
        for program, steps, safety, eps in [("jordan_ns5", JORDAN, 1.0, 1e-7), ("polar_express5", POLAR, 1.02, 1e-6)]:
            # The f32 input is what both sides see; the reference widens it exactly.
            expected = newton_schulz(g, steps, safety, eps)
            for strategy in ["standard", "gram"]:
                result = run(["--program", program, "--input", src, "--output", dst, "--precision", "f64", "--strategy", strategy])
                check(result.returncode == 0, f"{name} {program} {strategy} f64 runs ({result.stderr.strip()})")
                y = np.load(dst)
                check(y.dtype == g.dtype and y.shape == g.shape, f"{name}: output dtype {y.dtype} and shape {y.shape} match the input")
                # f64 iteration on both sides; an f32 output file adds its own rounding (2^-24).
                tolerance = 1e-6 if g.dtype == np.float32 else 1e-10
                error = np.linalg.norm(y - expected) / np.linalg.norm(expected)
                check(error < tolerance, f"{name} {program} {strategy}: relative error vs NumPy {error:.2e} < {tolerance:g}")
            # The CPU backend in f32: f32 accumulation over at most 40 terms, a few steps of
            # amplification: well inside 1e-4 of the f64 iteration.
            result = run(["--program", program, "--input", src, "--output", dst, "--backend", "cpu", "--precision", "f32"])
            error = np.linalg.norm(np.load(dst) - expected) / np.linalg.norm(expected)
            check(result.returncode == 0 and error < 1e-4, f"{name} {program} cpu f32: relative error vs NumPy {error:.2e} < 1e-4")
            # The program's own bf16 policy: near the exact iteration, but visibly rounded.
            result = run(["--program", program, "--input", src, "--output", dst])
            error = np.linalg.norm(np.load(dst) - expected) / np.linalg.norm(expected)
            check(result.returncode == 0 and 1e-4 < error < 5e-2, f"{name} {program} bf16: distance to the f64 iteration {error:.2e} in (1e-4, 5e-2)")

    fortran = os.path.join(work, "fortran.npy")
    np.save(fortran, np.asfortranarray(rng.standard_normal((4, 6)).astype(np.float32)))
    result = run(["--program", "jordan_ns5", "--input", fortran, "--output", os.path.join(work, "f_out.npy")])
    check(result.returncode == 2 and "Fortran order" in result.stderr, "a Fortran-order array is refused with exit code 2")

print(f"{failures} failure(s)")
sys.exit(1 if failures else 0)
