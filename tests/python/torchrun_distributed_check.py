"""Run under torchrun by test_torch_distributed.py (gloo, CPU tensors): orthojit.DistributedMuon over
the torch.distributed process group torchrun set up, against the single-process orthojit.Muon.

1. Every stage and both modes, rank 0 supplying the gradient and the others zeros, summed without
   averaging (the reduction is exact): after every step every rank's parameters are bit-identical
   to orthojit.Muon's on that gradient (one step with missing gradients); and a model whose
   filters are channels_last against the same model contiguous under orthojit.Muon.
2. With DistributedDataParallel: each rank's own batch, DDP averages the gradients in backward,
   DistributedMuon(gradients_reduced=True) takes them as they are; the parameters are
   bit-identical to orthojit.Muon stepped on the same averaged gradients, on every rank. Without
   gradients_reduced (and average_gradients off) the gradients would be summed again: the test
   checks that this is visible (the contract is not a no-op).
Exits non-zero on any mismatch (on every rank)."""

import torch
import torch.distributed as dist

import orthojit
from distributed_steps import compare_every_stage_and_mode, differences, finish_under_torchrun

dist.init_process_group("gloo")
rank, world = dist.get_rank(), dist.get_world_size()
SETTINGS = {"muon.backend": "ref", "muon.precision": "f32", "muon.weight_decay": 0.01, "adam.weight_decay": 0.01}


def model(seed):
    torch.manual_seed(seed)
    layers = torch.nn.ModuleDict({
        "embed": torch.nn.Embedding(11, 6),
        "hidden": torch.nn.Linear(6, 13),
        "out": torch.nn.Linear(13, 7),
    })
    layers.register_parameter("experts", torch.nn.Parameter(torch.randn(3, 5, 9) * 0.2))
    return layers


failures, distributed = compare_every_stage_and_mode(rank, model, SETTINGS)
assert distributed.describe().startswith("torch.distributed (gloo)"), distributed.describe()


def vision_model(seed):
    torch.manual_seed(seed)
    return torch.nn.ModuleDict({"stem": torch.nn.Conv2d(3, 8, 3), "hidden": torch.nn.Linear(6, 13), "out": torch.nn.Linear(13, 7),
                                "head": torch.nn.Conv2d(8, 5, (3, 2))})


# Its filters channels_last (the partitions cut through them), against the contiguous model.
failures += compare_every_stage_and_mode(rank, vision_model, SETTINGS, memory_format=torch.channels_last)[0]


def ddp_run(gradients_reduced, average):
    """Three DDP steps; returns (the DDP model's parameters' differences from the reference)."""
    torch.manual_seed(7)
    net = torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.Tanh(), torch.nn.Linear(16, 4))
    twin = torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.Tanh(), torch.nn.Linear(16, 4))
    twin.load_state_dict(net.state_dict())
    wrapped = torch.nn.parallel.DistributedDataParallel(net)
    optimizer = orthojit.DistributedMuon(net.named_parameters(), stage=2, preset="keller", settings=SETTINGS,
                                         gradients_reduced=gradients_reduced, average_gradients=average)
    reference = orthojit.Muon(twin.named_parameters(), preset="keller", settings=SETTINGS)
    found = []
    for step in range(3):
        torch.manual_seed(1000 * step + rank)  # each rank its own batch
        x, y = torch.randn(5, 8), torch.randn(5, 4)
        wrapped.zero_grad(set_to_none=True)
        torch.nn.functional.mse_loss(wrapped(x), y).backward()  # DDP averages the gradients here
        for (_, p), (_, q) in zip(net.named_parameters(), twin.named_parameters()):
            q.grad = p.grad.clone()  # the averaged gradient, the same on every rank
        optimizer.step()
        reference.step()
        found += differences(rank, net, twin, f"DDP (gradients_reduced={gradients_reduced}) step {step}")
    return found


failures += ddp_run(gradients_reduced=True, average=True)
if world > 1 and not ddp_run(gradients_reduced=False, average=False):
    failures.append(f"rank {rank}: reducing DDP's averaged gradients again (summed over {world} ranks) went unnoticed")

del distributed  # the optimizers hold the process group: gone before the teardown
finish_under_torchrun(failures, f"torch.distributed gloo, {world} ranks")
