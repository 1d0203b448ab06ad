"""The comparison both launcher checks run (mpi_distributed_check.py under mpirun,
torchrun_distributed_check.py under torchrun): orthojit.DistributedMuon on every rank against the
single-process orthojit.Muon for every ZeRO stage and both modes, three steps with rank 0
supplying the gradient and the others zeros, summed without averaging (the reduction is exact),
step 1 with missing gradients (the keller preset steps them with zeros in both)."""
import torch

import orthojit


def compare_every_stage_and_mode(rank, model, settings, comm=None, memory_format=None):
    """Returns (the failure lines, the last optimizer): every parameter that is not bit-identical
    after a step, and every skipped step. `comm`: the communicator argument of DistributedMuon
    (None: its default, the torch.distributed group under torchrun). `memory_format`: the
    distributed model's (torch.channels_last: its filters; the reference stays contiguous), which
    every step must keep."""
    failures, distributed = [], None
    for stage in (1, 2, 3):
        for mode in ("deepspeed", "balanced"):
            distributed_model, reference_model = model(1), model(1)
            if memory_format is not None:
                distributed_model = distributed_model.to(memory_format=memory_format)
            arguments = (distributed_model.named_parameters(),) + ((comm,) if comm is not None else ())
            distributed = orthojit.DistributedMuon(*arguments, stage=stage, mode=mode, preset="keller", settings=settings, average_gradients=False)
            reference = orthojit.Muon(reference_model.named_parameters(), preset="keller", settings=settings)
            for step in range(3):
                torch.manual_seed(100 + step)
                gradients = {name: torch.randn_like(p) for name, p in reference_model.named_parameters()}
                missing = {"hidden.weight", "out.bias"} if step == 1 else set()
                for name, p in reference_model.named_parameters():
                    p.grad = None if name in missing else gradients[name].clone()
                for name, p in distributed_model.named_parameters():
                    p.grad = None if name in missing else gradients[name].clone() if rank == 0 else torch.zeros_like(p)
                report = distributed.step()
                if stage == 3:
                    distributed.gather_parameters()
                reference.step()
                if report["skipped"]:
                    failures.append(f"rank {rank}: stage {stage} {mode}: step skipped: {report['reason']}")
                failures += differences(rank, distributed_model, reference_model, f"stage {stage} {mode} step {step}")
                if memory_format is not None:
                    failures += [f"rank {rank}: stage {stage} {mode} step {step}: {name} lost its memory format"
                                 for name, p in distributed_model.named_parameters() if p.dim() == 4 and not p.is_contiguous(memory_format=memory_format)]
    return failures, distributed


def finish_under_torchrun(failures, title):
    """Prints every failure and, on rank 0, "<title>: OK" or the count over the ranks; tears down
    in order and exits non-zero on every rank when any rank failed. The caller drops its
    optimizers first (they hold the process group): left to interpreter shutdown, a garbage
    collection on another Python thread could destroy the group's gloo state and abort the
    process ("terminate called without an active exception", about 1 run in 5 on two loaded
    cores), after every check had passed."""
    import gc
    import sys

    import torch.distributed as dist

    count = torch.tensor([len(failures)])
    dist.all_reduce(count)
    for line in failures:
        print(line, flush=True)
    if dist.get_rank() == 0:
        print(f"{title}: {'OK' if count.item() == 0 else f'{count.item()} mismatches'}", flush=True)
    gc.collect()
    dist.barrier()
    dist.destroy_process_group()
    sys.exit(1 if count.item() else 0)


def differences(rank, a_model, b_model, where):
    """A line for every parameter of a_model that is not bit-identical to b_model's."""
    return [f"rank {rank}: {where}: {name} differs (max {(a - b).abs().max().item():.3g})"
            for (name, a), (_, b) in zip(a_model.named_parameters(), b_model.named_parameters()) if not torch.equal(a.detach(), b.detach())]
