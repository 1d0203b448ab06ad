#!/usr/bin/env python3
"""The end-to-end Muon step on CUDA parameters, for scripts/gpu-check: numerics against
torch.optim.Muon and against orthojit's own CPU step, then time against torch.optim.Muon.

    python3 scripts/gpu_muon_check.py --out DIR [--budget SECONDS] [--quick]
    python3 scripts/gpu_muon_check.py --out DIR --device cpu --smoke    (CI: every code path, small)

Phases (each writes its part of DIR/gpu_muon.json before the next starts, so a timeout keeps
what was measured):
  numerics   orthojit.Muon(preset="torch") on CUDA vs torch.optim.Muon on the same gradients
             (relative difference of the parameter updates; both run Newton-Schulz in bf16), and
             orthojit's CUDA step vs its CPU step (the same formulas; NS in f64 on the CPU) for
             every preset, bf16 and f32 parameters
  layer      one Muon step over the hidden matrices of one Llama-3-8B decoder layer (bf16): q, o
             4096x4096; k, v 1024x4096; gate, up 14336x4096; down 4096x14336 — orthojit vs
             torch.optim.Muon (the issue's target: >= 1.5x)
  experts    64 experts of 1408x2048 (DeepSeek-V2-Lite's MoE MLP) as one (64, 1408, 2048) tensor
             stepped by orthojit vs a loop of torch.optim.Muon over the 64 matrices (target: >= 3x)
Times are CUDA-event medians over repeats after warm-up (compilation excluded: the first step
compiles and caches the kernels). Exit 0 when every numerics check passed, 1 otherwise, 2 when
there is no CUDA device or no orthojit package.

--device cpu --smoke runs the same phases on CPU tensors with shapes 16 times smaller (4 experts),
timed with the wall clock, the CUDA graph check and the NCCL engine left out (DistributedMuon on
its MPI engine in one process instead): what CI can run of this script (ctest
gpu_muon_check_smoke_test), so that a lent GPU's minutes are not lost to an error in the script.
With PyTorch 1.13 (no torch.optim.Muon) the comparisons with it are skipped, as on the device
when it is missing.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time
import traceback


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", required=True, help="folder for gpu_muon.json and gpu_muon.txt")
    parser.add_argument("--budget", type=float, default=240.0, help="seconds for all phases (default 240)")
    parser.add_argument("--quick", action="store_true", help="fewer repeats and a smaller expert count")
    parser.add_argument("--device", choices=("cuda", "cpu"), default="cuda", help="where the parameters live (cpu: the smoke run of CI)")
    parser.add_argument("--smoke", action="store_true", help="shapes 16 times smaller, 4 experts, 2 repeats: every code path, quickly")
    args = parser.parse_args()
    if args.smoke:
        args.quick = True
    os.makedirs(args.out, exist_ok=True)
    started = time.time()
    report = {"phases": {}, "started": time.strftime("%Y-%m-%d %H:%M:%S")}
    lines = []

    def save():
        with open(os.path.join(args.out, "gpu_muon.json"), "w") as f:
            json.dump(report, f, indent=2)
        with open(os.path.join(args.out, "gpu_muon.txt"), "w") as f:
            f.write("\n".join(lines) + "\n")

    def say(text):
        print(text, flush=True)
        lines.append(text)

    try:
        import torch
    except ImportError as error:
        say(f"gpu_muon_check: no torch ({error})")
        report["error"] = "no torch"
        save()
        return 2
    on_gpu = args.device == "cuda"
    if on_gpu and not torch.cuda.is_available():
        say(f"gpu_muon_check: torch {torch.__version__} sees no CUDA device; nothing to check")
        report["error"] = "no CUDA device"
        save()
        return 2
    try:
        import orthojit
    except ImportError as error:
        say(f"gpu_muon_check: the orthojit package is not importable ({error}); put the build's python/ folder on PYTHONPATH")
        report["error"] = "no orthojit package"
        save()
        return 2
    device = torch.device(args.device)
    report["device"] = torch.cuda.get_device_name(0) if on_gpu else "cpu"
    report["smoke"] = args.smoke
    shrink = 16 if args.smoke else 1  # the layer's, the experts' and the timing matrices' sides

    def synchronize():
        if on_gpu:
            torch.cuda.synchronize()
    report["torch"] = torch.__version__
    report["has_torch_muon"] = hasattr(torch.optim, "Muon")
    say(f"device {report['device']}, torch {torch.__version__}, torch.optim.Muon: {report['has_torch_muon']}")
    save()

    def remaining():
        return args.budget - (time.time() - started)

    failures = 0

    # ------------------------------------------------------------------------- numerics
    def update_bound(dtype):
        # f32 parameters: what remains is 16-bit Newton-Schulz against another 16-bit or the exact
        # iteration, ~1e-2 relative on these shapes (the CPU demo's bf16-vs-f64 distance) with
        # margin. bf16 parameters (weights ~0.02, updates ~1e-3 per element, an ulp ~1e-4) add
        # the parameter's own rounding, which flips where the two updates differ slightly.
        return 0.08 if dtype == torch.float32 else 0.25

    def numerics():
        nonlocal failures
        results = []
        torch.manual_seed(0)
        shapes = [(256, 512), (512, 256), (128, 128)]
        if report["has_torch_muon"]:
            for dtype in (torch.float32, torch.bfloat16):
                weights = [(torch.randn(*s) * 0.02).to(dtype) for s in shapes]
                ours = [torch.nn.Parameter(w.clone().to(device)) for w in weights]
                theirs = [torch.nn.Parameter(w.clone().to(device)) for w in weights]
                opt = orthojit.Muon([(f"w{i}", p) for i, p in enumerate(ours)], preset="torch")
                ref = torch.optim.Muon(theirs, lr=1e-3, weight_decay=0.1, momentum=0.95, nesterov=True, adjust_lr_fn="original")
                for _ in range(3):
                    for a, b in zip(ours, theirs):
                        g = torch.randn_like(a)
                        a.grad, b.grad = g.clone(), g.clone()
                    opt.step()
                    ref.step()
                worst = 0.0
                for a, b, w in zip(ours, theirs, weights):
                    da, db = (a.detach().double().cpu() - w.double()), (b.detach().double().cpu() - w.double())
                    worst = max(worst, ((da - db).norm() / db.norm()).item())
                bound = update_bound(dtype)
                ok = worst < bound
                failures += not ok
                results.append({"check": "torch preset vs torch.optim.Muon", "dtype": str(dtype), "relative_update_difference": worst, "bound": bound,
                                "ok": ok})
                say(f"  torch preset vs torch.optim.Muon, {dtype}: relative update difference {worst:.3g} ({'ok' if ok else 'FAIL'}, bound {bound})")
        else:
            say("  torch.optim.Muon is missing in this torch: that comparison skipped")
        for preset in [entry["name"] for entry in orthojit.muon_presets()]:  # the runtime's one list
            for dtype in (torch.float32, torch.bfloat16):
                torch.manual_seed(1)
                weights = {n: (torch.randn(*s) * 0.02).to(dtype) for n, s in (("layers.0.q.weight", (256, 512)), ("layers.0.down.weight", (512, 256)),
                                                                            ("moe.experts", (4, 64, 128)), ("layers.0.norm.weight", (256,)))}
                cpu = {n: torch.nn.Parameter(w.clone()) for n, w in weights.items()}
                gpu = {n: torch.nn.Parameter(w.clone().to(device)) for n, w in weights.items()}
                cpu_opt = orthojit.Muon(list(cpu.items()), preset=preset, settings={"muon.backend": "ref", "muon.precision": "f64",
                                                                                       "muon.square_precision": "f64"})
                gpu_opt = orthojit.Muon(list(gpu.items()), preset=preset)
                for _ in range(3):
                    for n in weights:
                        g = torch.randn_like(cpu[n])
                        cpu[n].grad, gpu[n].grad = g, g.to(device, copy=True)
                    cpu_opt.step()
                    gpu_opt.step()
                worst = 0.0
                for n, w in weights.items():
                    dc = cpu[n].detach().double() - w.double()
                    dg = gpu[n].detach().double().cpu() - w.double()
                    worst = max(worst, ((dc - dg).norm() / max(dc.norm().item(), 1e-30)).item())
                on_device = all(v.device.type == device.type for s in gpu_opt.state.values() for k, v in s.items() if k != "step")
                bound = update_bound(dtype)
                ok = worst < bound and on_device
                failures += not ok
                results.append({"check": "CUDA step vs CPU step (f64 NS)", "preset": preset, "dtype": str(dtype), "relative_update_difference": worst,
                                "bound": bound, "state_on_device": on_device, "ok": ok})
                say(f"  {preset:9s} {str(dtype):15s} {args.device.upper()} vs CPU f64 step: relative update difference {worst:.3g}, state on device: {on_device} "
                    f"({'ok' if ok else 'FAIL'}, bound {bound})")
        # A step replayed from its CUDA graph must be the plain launches bit for bit (same kernels,
        # arguments from the uploaded block), over steps whose pointers and learning rate change.
        if not on_gpu:
            say("  CUDA graph replay: not on the CPU (skipped)")
            return results
        torch.manual_seed(2)
        shapes = {"a": (256, 512), "b": (256, 512), "c": (512, 256), "experts": (3, 64, 128)}
        weights = {n: (torch.randn(*s) * 0.02).to(torch.bfloat16).to(device) for n, s in shapes.items()}
        runs = {}
        for graphs in (True, False):
            params = {n: torch.nn.Parameter(w.clone()) for n, w in weights.items()}
            opt = orthojit.Muon(list(params.items()), preset="torch")
            opt.cuda_graphs = graphs
            torch.manual_seed(3)
            for step in range(4):
                for group in opt.param_groups:
                    group["lr"] = 0.02 / (1 + step)
                for p in params.values():
                    p.grad = torch.randn_like(p)  # new tensors: new addresses every step
                opt.step()
            torch.cuda.synchronize()
            runs[graphs] = {n: p.detach().clone() for n, p in params.items()}
        identical = all(torch.equal(runs[True][n], runs[False][n]) for n in shapes)
        failures += not identical
        results.append({"check": "CUDA graph replay vs plain launches", "bit_identical": identical, "ok": identical})
        say(f"  CUDA graph replay vs plain launches over 4 steps: {'bit-identical (ok)' if identical else 'DIFFERENT (FAIL)'}")
        return results

    # ------------------------------------------------------------------------- timing
    def time_steps(step, repeats):
        step()  # compile, allocate
        synchronize()
        times = []
        for _ in range(repeats):
            if not on_gpu:
                start = time.perf_counter()
                step()
                times.append(time.perf_counter() - start)
                continue
            start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            start.record()
            step()
            end.record()
            end.synchronize()
            times.append(start.elapsed_time(end) / 1e3)
        return statistics.median(times)

    def fill_grads(params):
        for p in params:
            if p.grad is None:
                p.grad = torch.randn_like(p)

    def layer():
        shapes = {"q_proj": (4096, 4096), "k_proj": (1024, 4096), "v_proj": (1024, 4096), "o_proj": (4096, 4096),
                  "gate_proj": (14336, 4096), "up_proj": (14336, 4096), "down_proj": (4096, 14336)}
        repeats = 2 if args.smoke else 3 if args.quick else 7
        shapes = {n: (r // shrink, c // shrink) for n, (r, c) in shapes.items()}
        ours = [(f"layers.0.{n}.weight", torch.nn.Parameter(torch.randn(*s, dtype=torch.bfloat16, device=device) * 0.02)) for n, s in shapes.items()]
        fill_grads([p for _, p in ours])
        opt = orthojit.Muon(ours, preset="torch")
        orthojit_s = time_steps(opt.step, repeats)
        opt.cuda_graphs = False  # no effect on the CPU, where nothing is captured
        plain_s = time_steps(opt.step, repeats)
        result = {"orthojit_s": orthojit_s, "orthojit_without_graphs_s": plain_s}
        scale = f" at 1/{shrink} of each side" if shrink > 1 else ""
        say(f"  Llama-3-8B layer{scale}, orthojit.Muon: {orthojit_s * 1e3:.1f} ms per step"
            + (f" ({plain_s * 1e3:.1f} ms without the CUDA graph)" if on_gpu else ""))
        if report["has_torch_muon"]:
            theirs = [torch.nn.Parameter(p.detach().clone()) for _, p in ours]
            fill_grads(theirs)
            ref = torch.optim.Muon(theirs, lr=1e-3, weight_decay=0.1, momentum=0.95, nesterov=True, adjust_lr_fn="original")
            torch_s = time_steps(ref.step, repeats)
            result.update(torch_muon_s=torch_s, speedup=torch_s / orthojit_s, target=1.5)
            say(f"  Llama-3-8B layer{scale}, torch.optim.Muon: {torch_s * 1e3:.1f} ms per step; orthojit {torch_s / orthojit_s:.2f}x (target 1.5x)")
        return result

    def experts():
        count = 4 if args.smoke else 16 if args.quick else 64
        repeats = 2 if args.smoke else 3 if args.quick else 5
        stack = torch.nn.Parameter(torch.randn(count, 1408 // shrink, 2048 // shrink, dtype=torch.bfloat16, device=device) * 0.02)
        fill_grads([stack])
        opt = orthojit.Muon([("mlp.experts.w1", stack)], preset="keller")  # trailing layout: a batch of 1408x2048
        orthojit_s = time_steps(opt.step, repeats)
        result = {"experts": count, "orthojit_s": orthojit_s}
        say(f"  {count} experts of {1408 // shrink}x{2048 // shrink}, orthojit.Muon (one batched call): {orthojit_s * 1e3:.1f} ms per step")
        if report["has_torch_muon"]:
            theirs = [torch.nn.Parameter(stack.detach()[e].clone()) for e in range(count)]
            fill_grads(theirs)
            ref = torch.optim.Muon(theirs, lr=1e-3, weight_decay=0.1, momentum=0.95, nesterov=True, adjust_lr_fn="original")
            torch_s = time_steps(ref.step, repeats)
            result.update(torch_muon_loop_s=torch_s, speedup=torch_s / orthojit_s, target=3.0)
            say(f"  {count} experts, torch.optim.Muon over {count} matrices: {torch_s * 1e3:.1f} ms per step; orthojit {torch_s / orthojit_s:.2f}x (target 3x)")
        return result

    def distributed():
        # orthojit.DistributedMuon on CUDA tensors over NCCL in one process (comm="local": no MPI
        # on these machines) against orthojit.Muon on the same tensors: deepspeed mode runs the
        # same compiled Muon steps, so the parameters must be bit-identical at every stage;
        # balanced mode's updates within a relative 3e-2 of Muon's (the bf16 iteration's roundings
        # in other places: tests/python/test_distributed_device.py argues the bound). Then a
        # step's time against Muon's. The cuda backend stores bf16 (it refuses f32); the host path
        # iterates in f32 and is bit-identical in both modes.
        nonlocal failures
        results = []
        settings = {"muon.precision": "bf16" if on_gpu else "f32", "muon.weight_decay": 0.01, "adam.weight_decay": 0.01}
        engine = "nccl" if on_gpu else "mpi"  # CPU tensors: the host engine, one process (comm "local")

        def build(seed, dtype):
            torch.manual_seed(seed)
            layers = torch.nn.ModuleDict({"embed": torch.nn.Embedding(301, 64), "hidden": torch.nn.Linear(64, 257), "out": torch.nn.Linear(257, 96)})
            layers.register_parameter("experts", torch.nn.Parameter(torch.randn(4, 96, 160) * 0.05))
            return layers.to(device=device, dtype=dtype)

        for dtype in (torch.float32, torch.bfloat16):
            for stage in (1, 2, 3):
                for mode in ("deepspeed", "balanced"):
                    if mode == "balanced" and dtype != torch.float32:
                        continue
                    a, b = build(1, dtype), build(1, dtype)
                    dist = orthojit.DistributedMuon(a.named_parameters(), "local", stage=stage, mode=mode, preset="keller", settings=settings,
                                                    engine=engine)
                    single = orthojit.Muon(b.named_parameters(), preset="keller", settings=settings)
                    largest, relative = 0.0, 0.0
                    for step in range(3):
                        torch.manual_seed(100 + step)
                        grads = {n: torch.randn_like(p) for n, p in b.named_parameters()}
                        for m in (a, b):
                            for n, p in m.named_parameters():
                                p.grad = grads[n].clone()
                        before = [(x.detach().float().clone(), y.detach().float().clone()) for (_, x), (_, y) in zip(a.named_parameters(), b.named_parameters())]
                        report_step = dist.step()
                        if report_step["skipped"]:
                            raise RuntimeError(f"stage {stage} {mode}: step skipped: {report_step['reason']}")
                        if stage == 3:
                            dist.gather_parameters()
                        single.step()
                        synchronize()
                        for ((n, x), (_, y)), (x0, y0) in zip(zip(a.named_parameters(), b.named_parameters()), before):
                            largest = max(largest, (x.detach().float() - y.detach().float()).abs().max().item())
                            dx, dy = x.detach().float() - x0, y.detach().float() - y0
                            relative = max(relative, ((dx - dy).norm() / dy.norm().clamp_min(1e-30)).item())
                    ok = largest == 0.0 if mode == "deepspeed" or not on_gpu else relative < 3e-2
                    failures += 0 if ok else 1
                    results.append({"dtype": str(dtype), "stage": stage, "mode": mode, "largest_difference": largest,
                                    "largest_relative_update_difference": relative, "ok": ok})
                    say(f"  {str(dtype):>14} stage {stage} {mode:>9}: largest difference from orthojit.Muon {largest:.3g}, "
                        f"relative update difference {relative:.3g} {'ok' if ok else 'FAIL'}")
        # One step's time on a Llama-like layer's hidden matrices, DistributedMuon (1 rank, stage 2) vs Muon.
        a = [torch.nn.Parameter(torch.randn(r // shrink, c // shrink, dtype=torch.bfloat16, device=device) * 0.02)
             for r, c in ((4096, 4096), (1024, 4096), (14336, 4096))]
        named = [(f"layer.w{i}", p) for i, p in enumerate(a)]
        fill_grads(a)
        dist = orthojit.DistributedMuon(named, "local", stage=2, preset="keller", engine=engine)
        single = orthojit.Muon(named, preset="keller")
        dist_s, single_s = time_steps(dist.step, 3), time_steps(single.step, 3)
        say(f"  3 hidden matrices (bf16): DistributedMuon 1 rank stage 2 {dist_s * 1e3:.1f} ms, orthojit.Muon {single_s * 1e3:.1f} ms per step")
        return {"checks": results, "timing": {"distributed_s": dist_s, "muon_s": single_s}}

    for name, phase, needs in (("numerics", numerics, 30), ("layer", layer, 40), ("experts", experts, 40), ("distributed", distributed, 40)):
        if remaining() < needs:
            say(f"{name}: skipped, {remaining():.0f} s of the budget left (needs about {needs} s)")
            report["phases"][name] = {"status": "skipped", "reason": "budget"}
            save()
            continue
        say(f"{name}:")
        phase_start = time.time()
        try:
            report["phases"][name] = {"status": "ok", "results": phase(), "seconds": time.time() - phase_start}
        except Exception as error:  # every phase keeps its own failure
            failures += 1
            report["phases"][name] = {"status": "failed", "error": f"{type(error).__name__}: {error}", "traceback": traceback.format_exc(),
                                      "seconds": time.time() - phase_start}
            say(f"  FAILED: {type(error).__name__}: {error}")
        save()
    report["failures"] = failures
    save()
    return 0 if failures == 0 else 1


if __name__ == "__main__":
    sys.exit(main())
