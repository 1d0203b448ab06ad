#!/usr/bin/env python3
"""Data-parallel training with orthojit.DistributedMuon under torchrun: ZeRO partitioning, an LR
schedule (linear warmup, cosine decay), and checkpoints that resume exactly.

    torchrun --nproc_per_node 2 examples/python/train_distributed_torchrun.py --steps 200 --checkpoint /tmp/run.pt
    torchrun --nproc_per_node 2 examples/python/train_distributed_torchrun.py --steps 200 --checkpoint /tmp/run.pt --resume

(With PYTHONPATH=build/python and Debian's python3: `/usr/bin/python3 -m torch.distributed.run ...`.)
CPU tensors over gloo by default; `--device cuda` puts each rank on its own GPU (LOCAL_RANK) over
NCCL, with nothing else changed in the loop.

Each rank draws its own batches of a synthetic task (the labels of a random teacher network),
from a generator seeded by (rank, step), so a resumed run sees exactly the batches the
uninterrupted run would have. DistributedMuon reduces and averages the gradients, runs Muon on
the hidden matrices and AdamW on the rest, and all-gathers the parameters (stage 3: call
gather_parameters() before each forward). Its state_dict() gathers the partitioned optimizer state
into orthojit.Muon's layout (collective: every rank calls it); rank 0 writes the checkpoint.

`--stop-after N` stops after step N (a checkpoint is written there), as an interrupted job would;
`--digest` prints a SHA-256 of the final parameters, so that a resumed run can be compared bit
for bit with an uninterrupted one (tests/python/test_torch_distributed.py does).
"""

import argparse
import hashlib
import math
import os
import sys

import torch
import torch.distributed as dist
from torch import nn

import orthojit


class MLP(nn.Module):
    def __init__(self, inputs=32, hidden=64, classes=10):
        super().__init__()
        self.embed = nn.Linear(inputs, hidden)  # AdamW (by name, DeepSpeed's rule)
        self.hidden = nn.Linear(hidden, hidden)  # Muon
        self.out = nn.Linear(hidden, classes)  # Muon (its bias: AdamW)

    def forward(self, x):
        return self.out(torch.relu(self.hidden(torch.relu(self.embed(x)))))


def batch(step, rank, size, device):
    """Rank `rank`'s batch at `step`: inputs and a random teacher's labels (the teacher is fixed)."""
    teacher = torch.Generator().manual_seed(1234)
    w1, w2 = torch.randn(32, 64, generator=teacher) / 32 ** 0.5, torch.randn(64, 10, generator=teacher) / 8
    generator = torch.Generator().manual_seed(1_000_003 * (rank + 1) + step)
    x = torch.randn(size, 32, generator=generator)
    y = (torch.tanh(x @ w1) @ w2).argmax(dim=1)
    return x.to(device), y.to(device)


def warmup_cosine(warmup, total):
    def factor(step):
        if step < warmup:
            return (step + 1) / warmup
        progress = min(1.0, (step - warmup) / max(1, total - warmup))
        return 0.1 + 0.9 * 0.5 * (1 + math.cos(math.pi * progress))
    return factor


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--steps", type=int, default=200)
    parser.add_argument("--batch", type=int, default=64, help="samples per rank and step")
    parser.add_argument("--stage", type=int, default=2, choices=(1, 2, 3))
    parser.add_argument("--mode", default="deepspeed", choices=("deepspeed", "balanced"))
    parser.add_argument("--preset", default="deepspeed")
    parser.add_argument("--device", default="cpu", choices=("cpu", "cuda"))
    parser.add_argument("--checkpoint", help="where to write the checkpoint (and read it with --resume)")
    parser.add_argument("--save-every", type=int, default=50)
    parser.add_argument("--resume", action="store_true", help="continue from --checkpoint")
    parser.add_argument("--stop-after", type=int, help="stop after this step, writing a checkpoint (an interrupted job)")
    parser.add_argument("--digest", action="store_true", help="print a SHA-256 of the final parameters")
    args = parser.parse_args()
    if (args.resume or args.stop_after is not None) and not args.checkpoint:
        parser.error("--resume and --stop-after need --checkpoint")

    device = torch.device("cpu")
    if args.device == "cuda":
        device = torch.device("cuda", int(os.environ.get("LOCAL_RANK", 0)))
        torch.cuda.set_device(device)
    dist.init_process_group("nccl" if args.device == "cuda" else "gloo")
    rank, world = dist.get_rank(), dist.get_world_size()

    torch.manual_seed(0)  # the same initialization on every rank
    model = MLP().to(device)
    optimizer = orthojit.DistributedMuon(model.named_parameters(), stage=args.stage, mode=args.mode, preset=args.preset,
                                         muon_lr=0.02, adam_lr=3e-3, engine="mpi")
    scheduler = torch.optim.lr_scheduler.LambdaLR(optimizer, warmup_cosine(max(1, args.steps // 10), args.steps))
    first = 0
    if args.resume:
        saved = torch.load(args.checkpoint, map_location=device)
        model.load_state_dict(saved["model"])
        optimizer.load_state_dict(saved["optimizer"])  # collective: every rank loads its part
        scheduler.load_state_dict(saved["scheduler"])
        first = saved["step"]
        if rank == 0:
            print(f"resumed at step {first} from {args.checkpoint} (saved on {saved['world']} ranks)", flush=True)

    def save(step):
        state = optimizer.state_dict()  # collective: every rank gathers the whole state
        if args.stage == 3:
            optimizer.gather_parameters()
        if rank == 0:
            torch.save({"model": model.state_dict(), "optimizer": state, "scheduler": scheduler.state_dict(), "step": step,
                        "world": world}, args.checkpoint + ".tmp")
            os.replace(args.checkpoint + ".tmp", args.checkpoint)  # a crash mid-write keeps the last one
        dist.barrier()

    last = args.steps if args.stop_after is None else min(args.steps, args.stop_after)
    losses = []
    for step in range(first, last):
        x, y = batch(step, rank, args.batch, device)
        optimizer.zero_grad(set_to_none=True)
        loss = nn.functional.cross_entropy(model(x), y)
        loss.backward()
        report = optimizer.step()
        if report["skipped"]:
            print(f"rank {rank}: step {step} skipped: {report['reason']}", flush=True)
        if args.stage == 3:
            optimizer.gather_parameters()  # the next forward needs every parameter
        scheduler.step()
        losses.append(loss.item())
        if rank == 0 and (step % 25 == 0 or step == last - 1):
            print(f"step {step:4d}  loss {loss.item():.4f}  muon lr {optimizer.param_groups[0]['lr']:.5f}", flush=True)
        if args.checkpoint and ((step + 1) % args.save_every == 0 or step + 1 == last):
            save(step + 1)

    if args.digest:
        digest = hashlib.sha256()
        for name, p in model.named_parameters():
            digest.update(name.encode())
            digest.update(p.detach().cpu().contiguous().numpy().tobytes())
        if rank == 0:
            print(f"parameters sha256 {digest.hexdigest()}", flush=True)
    dropped = len(losses) >= 20 and sum(losses[-5:]) / 5 < sum(losses[:5]) / 5
    del optimizer
    dist.barrier()
    dist.destroy_process_group()
    if len(losses) >= 20 and not dropped:
        print("the training loss did not drop", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
