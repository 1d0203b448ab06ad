"""Run under torchrun by test_torch_distributed.py (gloo, CPU tensors): orthojit.DistributedMuon as a
torch optimizer in a trainer's loop, against the single-process orthojit.Muon on the same reduced
gradients (rank 0 supplies them, the others zeros, summed without averaging: exact).

1. Schedules: a LambdaLR scheduler on both, and momentum and weight decay edited in param_groups
   between steps; after every step every rank's parameters are bit-identical to orthojit.Muon's.
2. Checkpoints: DistributedMuon.state_dict() is orthojit.Muon's state_dict, tensor for tensor, bit
   for bit; it loads into a fresh orthojit.Muon, and orthojit.Muon's into a DistributedMuon of
   another stage and mode (through torch.save / torch.load), and both continue bit-identically.
3. A state that does not fit on one rank only is refused on every rank, nothing changed anywhere.
   State files: save_state streams the state to rank 0's file without gathering it; load_state
   into a DistributedMuon of another stage and mode gives the same state_dict and param_groups
   and continues bit-identically; a file missing on one rank only is refused on every rank.
4. QK-clip with each rank's own S_max clips with each head's largest over the ranks.
Exits non-zero on any mismatch (on every rank)."""
import io
import os
import shutil
import tempfile

import torch
import torch.distributed as dist

import orthojit
from distributed_steps import differences, finish_under_torchrun

dist.init_process_group("gloo")
rank, world = dist.get_rank(), dist.get_world_size()
SETTINGS = {"muon.backend": "ref", "muon.precision": "f32"}
failures = []


def model(seed=1):
    torch.manual_seed(seed)
    layers = torch.nn.ModuleDict({"embed": torch.nn.Embedding(11, 6), "hidden": torch.nn.Linear(6, 13), "out": torch.nn.Linear(13, 7)})
    layers.register_parameter("experts", torch.nn.Parameter(torch.randn(3, 5, 9) * 0.2))
    return layers


def give_gradients(step, distributed_model, reference_model):
    torch.manual_seed(500 + step)
    for (_, p), (_, q) in zip(distributed_model.named_parameters(), reference_model.named_parameters()):
        g = torch.randn_like(q)
        q.grad = g.clone()
        p.grad = g.clone() if rank == 0 else torch.zeros_like(p)


def step_both(steps, first, distributed, distributed_model, reference, reference_model, where, schedulers=()):
    for step in range(first, first + steps):
        distributed.zero_grad(set_to_none=True)
        reference.zero_grad(set_to_none=True)
        give_gradients(step, distributed_model, reference_model)
        report = distributed.step()
        reference.step()
        if report["skipped"]:
            failures.append(f"rank {rank}: {where}: step {step} skipped: {report['reason']}")
        for scheduler in schedulers:
            scheduler.step()
        failures.extend(differences(rank, distributed_model, reference_model, f"{where} step {step}"))


def same_state(a, b, where):
    """Every state tensor and every group hyperparameter of two state_dicts, bit for bit."""
    if set(a["state"]) != set(b["state"]):
        failures.append(f"rank {rank}: {where}: state indices {sorted(a['state'])} vs {sorted(b['state'])}")
        return
    for index in a["state"]:
        for key, value in b["state"][index].items():
            mine = a["state"][index].get(key)
            if mine is None or mine.dtype != value.dtype or mine.shape != value.shape or not torch.equal(mine, value.to(mine.device)):
                failures.append(f"rank {rank}: {where}: state[{index}][{key}] differs")
    for mine, theirs in zip(a["param_groups"], b["param_groups"]):
        for key in ("lr", "weight_decay", "param_names", "use_muon"):
            if mine.get(key) != theirs.get(key):
                failures.append(f"rank {rank}: {where}: group {mine.get('name')} {key}: {mine.get(key)!r} vs {theirs.get(key)!r}")


# 1. Schedules.
distributed_model, reference_model = model(), model()
distributed = orthojit.DistributedMuon(distributed_model.named_parameters(), stage=2, mode="balanced", preset="keller", settings=SETTINGS,
                                       average_gradients=False)
reference = orthojit.Muon(reference_model.named_parameters(), preset="keller", settings=SETTINGS)
if [g["name"] for g in distributed.param_groups] != [g["name"] for g in reference.param_groups] or \
        [g["param_names"] for g in distributed.param_groups] != [g["param_names"] for g in reference.param_groups]:
    failures.append(f"rank {rank}: the groups differ from orthojit.Muon's: {[g['param_names'] for g in distributed.param_groups]}")
decay = lambda step: 0.5 ** step  # noqa: E731
schedulers = [torch.optim.lr_scheduler.LambdaLR(distributed, decay), torch.optim.lr_scheduler.LambdaLR(reference, decay)]
step_both(2, 0, distributed, distributed_model, reference, reference_model, "LambdaLR", schedulers)
for optimizer in (distributed, reference):
    for group in optimizer.param_groups:
        group["weight_decay"] = 0.03
        if group["use_muon"]:
            group["momentum"] = 0.8
        else:
            group["betas"] = (0.85, 0.97)
step_both(2, 2, distributed, distributed_model, reference, reference_model, "edited groups", schedulers)
if distributed.param_groups[0]["lr"] == distributed.param_groups[0]["initial_lr"]:
    failures.append(f"rank {rank}: the scheduler did not change the learning rate")

# 2. Checkpoints.
saved, expected = distributed.state_dict(), reference.state_dict()
same_state(saved, expected, "DistributedMuon.state_dict vs Muon.state_dict")
if saved["orthojit"]["steps_taken"] != 4:
    failures.append(f"rank {rank}: steps_taken {saved['orthojit']['steps_taken']}")
# rank0_only: the same state on rank 0, nothing on the others.
on_rank0 = distributed.state_dict(rank0_only=True)
if rank == 0:
    same_state(on_rank0, expected, "DistributedMuon.state_dict(rank0_only=True) on rank 0 vs Muon.state_dict")
elif on_rank0 != {}:
    failures.append(f"rank {rank}: state_dict(rank0_only=True) returned {sorted(on_rank0)} on a rank other than 0")
# Distributed -> single process: a fresh orthojit.Muon on copies of the parameters.
single_model = model()
single_model.load_state_dict(distributed_model.state_dict())
single = orthojit.Muon(single_model.named_parameters(), preset="keller", settings=SETTINGS)
single.load_state_dict(saved)
twin_model = model()
twin_model.load_state_dict(reference_model.state_dict())
twin = orthojit.Muon(twin_model.named_parameters(), preset="keller", settings=SETTINGS)
twin.load_state_dict(expected)
for step in range(4, 6):
    give_gradients(step, single_model, twin_model)
    for (_, p), (_, q) in zip(single_model.named_parameters(), twin_model.named_parameters()):
        p.grad = q.grad.clone()
    single.step()
    twin.step()
    failures.extend(differences(rank, single_model, twin_model, f"Muon resumed from the distributed state, step {step}"))
# Single process -> distributed, another stage and mode, through torch.save / torch.load.
buffer = io.BytesIO()
torch.save(expected, buffer)
buffer.seek(0)
resumed_model = model()
resumed_model.load_state_dict(reference_model.state_dict())
resumed = orthojit.DistributedMuon(resumed_model.named_parameters(), stage=3, mode="deepspeed", preset="keller", settings=SETTINGS,
                                   average_gradients=False)
resumed.load_state_dict(torch.load(buffer))
same_state(resumed.state_dict(), expected, "DistributedMuon loaded from Muon's state")
for step in range(4, 7):
    resumed.zero_grad(set_to_none=True)
    reference.zero_grad(set_to_none=True)
    give_gradients(step, resumed_model, reference_model)
    resumed.step()
    resumed.gather_parameters()
    reference.step()
    failures.extend(differences(rank, resumed_model, reference_model, f"DistributedMuon resumed from Muon's state, step {step}"))

# 3. A state wrong on the last rank only: every rank refuses it, nothing changes anywhere.
before = resumed.state_dict()
broken = resumed.state_dict()
if rank == world - 1:
    broken["state"][0]["momentum_buffer"] = broken["state"][0]["momentum_buffer"][:1]
try:
    resumed.load_state_dict(broken)
    failures.append(f"rank {rank}: a state wrong on rank {world - 1} was loaded")
except (ValueError, RuntimeError) as error:
    expected_text = "does not match" if rank == world - 1 else "failed on 1 other rank(s)"
    if expected_text not in str(error):
        failures.append(f"rank {rank}: the refusal says {error}")
same_state(resumed.state_dict(), before, "after a refused load")

# State files: streamed to rank 0, read in parts; the param_groups ride in the metadata.
folder = [tempfile.mkdtemp() if rank == 0 else None]
dist.broadcast_object_list(folder, src=0)
path = os.path.join(folder[0], "state.safetensors")
# Progress: rank 0 alone writes (every byte, then the flush); each rank reports its own reads,
# which together cover the file (balanced mode: each element read by one rank; an AdamW step
# count by every rank holding a part of its tensor), and rank 0 the checksum of the whole file.
saving, loading = [], []
resumed.save_state(path, progress=lambda phase, done, total: saving.append((phase, done, total)))
from_file_model = model()
from_file_model.load_state_dict(resumed_model.state_dict())
from_file = orthojit.DistributedMuon(from_file_model.named_parameters(), stage=1, mode="balanced", preset="keller", settings=SETTINGS,
                                     average_gradients=False)
from_file.load_state(path, progress=lambda phase, done, total: loading.append((phase, done, total)))
data_bytes = os.path.getsize(path) - 8 - int.from_bytes(open(path, "rb").read(8), "little")
if rank == 0:
    writes = [done for phase, done, _ in saving if phase == "write"]
    if not writes or writes[-1] != data_bytes or saving[-1] != ("sync", 1, 1):
        failures.append(f"rank 0: the save's progress ended at {saving[-1:]} (last write {writes[-1:]}), the file holds {data_bytes} bytes")
    if ("checksum", data_bytes, data_bytes) not in loading:
        failures.append(f"rank 0: the load's checksum was not reported to its end ({data_bytes} bytes)")
elif saving:
    failures.append(f"rank {rank}: a save reported progress on a rank that writes nothing: {saving[:3]}")
read_bytes = [max([done for phase, done, _ in loading if phase == "read"] or [0])]
everyone = [None] * world
dist.all_gather_object(everyone, read_bytes[0])
step_counts = len(orthojit.inspect_state(path, verify=False)["adam"])
if rank == 0 and not (data_bytes <= sum(everyone) <= data_bytes + 8 * step_counts * (world - 1)):
    failures.append(f"the ranks' reads sum to {sum(everyone)} bytes (each {everyone}) of a {data_bytes}-byte file with {step_counts} step counts")
same_state(from_file.state_dict(), resumed.state_dict(), "DistributedMuon loaded from a state file")
for mine, theirs in zip(from_file.param_groups, resumed.param_groups):
    for key in ("momentum", "betas", "eps", "nesterov", "initial_lr", "name"):
        if mine.get(key) != theirs.get(key):
            failures.append(f"rank {rank}: the state file's group {theirs.get('name')} {key}: {mine.get(key)!r} vs {theirs.get(key)!r}")
if from_file.steps_taken != resumed.steps_taken:
    failures.append(f"rank {rank}: steps_taken {from_file.steps_taken} from the file, {resumed.steps_taken} saved")
step_both(2, 7, from_file, from_file_model, reference, reference_model, "DistributedMuon resumed from a state file")
# Missing on the last rank only: every rank refuses, nothing changes anywhere.
before = from_file.state_dict()
try:
    from_file.load_state(path if rank != world - 1 else path + ".missing")
    failures.append(f"rank {rank}: a state file missing on rank {world - 1} was loaded")
except (OSError, ValueError, RuntimeError) as error:
    expected_text = "No such file" if rank == world - 1 else "failed on 1 other rank(s)"
    if expected_text not in str(error):
        failures.append(f"rank {rank}: the refusal of a missing file says {error}")
same_state(from_file.state_dict(), before, "after refusing a missing state file")
dist.barrier()
if rank == 0:
    shutil.rmtree(folder[0])

# 4. QK-clip with each rank's own S_max: every rank clips with each head's largest over the ranks.
def attention(seed=2):
    torch.manual_seed(seed)
    return torch.nn.ModuleDict({"q": torch.nn.Linear(8, 12), "k": torch.nn.Linear(8, 12)})


clip_model, clip_reference_model = attention(), attention()
clip = orthojit.DistributedMuon(clip_model.named_parameters(), stage=2, preset="keller", settings=SETTINGS, average_gradients=False)
clip_reference = orthojit.Muon(clip_reference_model.named_parameters(), preset="keller", settings=SETTINGS)
step_both(1, 0, clip, clip_model, clip_reference, clip_reference_model, "before QK-clip")
logits = [[4.0 + 3.0 * h + 5.0 * ((r + h) % world) + 0.25 * r for h in range(4)] for r in range(world)]
clip.qk_clip("q.weight", clip_model.k.weight, 3, torch.tensor(logits[rank]), 10.0)
clip_reference.qk_clip("q.weight", "k.weight", 3, [max(column) for column in zip(*logits)], 10.0)
failures.extend(differences(rank, clip_model, clip_reference_model, "QK-clip with every rank's own S_max"))

del distributed, resumed, clip  # the optimizers hold the process group: gone before the teardown
finish_under_torchrun(failures, f"checkpoints and schedules, {world} ranks")
