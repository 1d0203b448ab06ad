#!/usr/bin/env python3
"""What DistributedMuon holds per rank at ZeRO stages 1, 2 and 3: torchrun with 2 processes (gloo,
CPU tensors), a model of f32 parameters: an R x 1024 AdamW embedding (--embedding-rows R, 8192 by
default) and eight 1024 x 1024 Muon matrices (--muon-layers; 16.8M elements in all by default). For each stage, in a fresh pair of processes: the optimizer's own allocations
(memory_bytes()), the plan's per-rank gradient bytes, and the resident memory the optimizer added
(VmRSS after construction and after two steps, and the peak VmHWM, each less VmRSS before the
optimizer was built, when the model's parameters and gradients already exist), and the median
time of five more steps (OMP_NUM_THREADS=1 per process).

    MALLOC_MMAP_THRESHOLD_=1048576 PYTHONPATH=build/python /usr/bin/python3 bench/distributed_memory.py \
        [--ranks 2] [--bucket-size N] [--embedding-rows R] [--muon-layers L]

MALLOC_MMAP_THRESHOLD_ makes glibc map every large block and unmap it when freed, so that the
resident memory measures what is live (by default glibc keeps freed blocks of up to 32 MiB in its
heap, and the temporaries of the gloo collectives inflate VmRSS by whatever it kept).
"""
import argparse
import json
import os
import statistics
import subprocess
import sys
import time

from resident_memory import status_kib  # bench/ is the script's folder

MIB = 1 << 20


def worker(stage, bucket_size, embedding_rows, muon_layers):
    import torch
    import torch.distributed as dist

    import orthojit

    dist.init_process_group("gloo")
    torch.manual_seed(0)
    shapes = {"embed.weight": (embedding_rows, 1024)}
    shapes.update({f"layer.{i}.weight": (1024, 1024) for i in range(muon_layers)})
    parameters = [(name, torch.nn.Parameter(torch.randn(*shape) * 0.02)) for name, shape in shapes.items()]
    for _, parameter in parameters:
        parameter.grad = torch.randn_like(parameter) * 1e-3
    use_muon = {name: name != "embed.weight" for name in shapes}
    before = status_kib("VmRSS")
    # bucket_size only when asked: the same script measures builds from before it existed.
    extra = {"bucket_size": bucket_size} if bucket_size else {}
    optimizer = orthojit.DistributedMuon(parameters, "torch", stage=stage, use_muon=use_muon, **extra)
    built = status_kib("VmRSS")
    for _ in range(2):
        optimizer.step()
        if stage == 3:
            optimizer.gather_parameters()
    stepped, peak = status_kib("VmRSS"), status_kib("VmHWM")
    times = []
    for _ in range(5):
        dist.barrier()
        started = time.perf_counter()
        optimizer.step()
        if stage == 3:
            optimizer.gather_parameters()
        times.append(time.perf_counter() - started)
    rank = dist.get_rank()
    plan = optimizer.plan()
    row = {"stage": stage, "rank": rank, "memory_bytes": optimizer.memory_bytes() if hasattr(optimizer, "memory_bytes") else None, "elements": sum(p.numel() for _, p in parameters),
           "plan_gradient_bytes": plan["ranks"][rank]["gradient_bytes"] if "ranks" in plan else None,
           "rss_built_kib": built - before, "rss_stepped_kib": stepped - before, "peak_kib": peak - before,
           "step_seconds": statistics.median(times)}
    print("ROW " + json.dumps(row), flush=True)
    dist.destroy_process_group()


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--ranks", type=int, default=2)
    parser.add_argument("--bucket-size", type=int, default=None, help="DistributedMuon's bucket_size (default: its own)")
    parser.add_argument("--embedding-rows", type=int, default=8192)
    parser.add_argument("--muon-layers", type=int, default=8)
    parser.add_argument("--worker-stage", type=int, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.worker_stage:
        worker(args.worker_stage, args.bucket_size, args.embedding_rows, args.muon_layers)
        return
    rows = []
    for stage in (1, 2, 3):
        command = [sys.executable, "-m", "torch.distributed.run", "--nproc_per_node", str(args.ranks), "--standalone", "--tee", "1",
                   "--redirects", "2", os.path.abspath(__file__), "--worker-stage", str(stage),
                   "--embedding-rows", str(args.embedding_rows), "--muon-layers", str(args.muon_layers)]
        if args.bucket_size:
            command += ["--bucket-size", str(args.bucket_size)]
        print(f"stage {stage}: {args.ranks} processes ...", file=sys.stderr, flush=True)
        result = subprocess.run(command, capture_output=True, text=True, timeout=900, env=dict(os.environ, OMP_NUM_THREADS="1"))
        if result.returncode != 0:
            sys.exit(f"stage {stage} failed:\n{result.stdout[-3000:]}\n{result.stderr[-3000:]}")
        for line in result.stdout.splitlines():
            if "ROW " in line:
                rows.append(json.loads(line.split("ROW ", 1)[1]))
    rows.sort(key=lambda row: (row["stage"], row["rank"]))
    print(f"{rows[0]['elements'] / 1e6:.1f}M f32 elements, {args.ranks} ranks; MiB per rank, added by the optimizer")
    print("stage rank  memory_bytes  plan gradient  RSS built  RSS after 2 steps  peak  step (median of 5, s)")
    for row in rows:
        plan = row["plan_gradient_bytes"]
        held = "-" if row["memory_bytes"] is None else f"{row['memory_bytes'] / MIB:.1f}"
        print(f"{row['stage']:>5} {row['rank']:>4}  {held:>12}  {(plan or 0) / MIB:>13.1f}  {row['rss_built_kib'] / 1024:>9.1f}"
              f"  {row['rss_stepped_kib'] / 1024:>17.1f}  {row['peak_kib'] / 1024:>5.1f}  {row['step_seconds']:>8.3f}")


if __name__ == "__main__":
    main()
