"""orthojit.DistributedMuon: hybrid Muon + AdamW with ZeRO partitioning across the ranks of an
MPI communicator (mpi4py), for data-parallel programs (docs/distributed.md).

CPU tensors run over MPI (or NCCL, staged through the GPU); CUDA tensors over NCCL, with
parameters, gradients, the optimizer state and every buffer of the step on the device, on
torch's current stream.

Every rank builds it with the same parameters (names, shapes, order). After backward, ``step()``
reduces the gradients across the ranks (all-reduce at stage 1, reduce-scatter at stages 2-3,
averaged), runs Muon where the plan says (``mode="deepspeed"``: every owner of a matrix;
``"balanced"``: each matrix once) and AdamW on each rank's slice, and all-gathers the parameters
(stages 1-2; at stage 3 call ``gather_parameters()`` before the next forward). Given the same
reduced gradients the result is bit-identical to the single-process optimizer's.

It is a ``torch.optim.Optimizer`` with orthojit.Muon's two groups ("muon-params", "adam-params"):
``param_groups`` are read at every step (LR schedulers, momentum and weight-decay schedules),
``zero_grad()`` works, and ``state_dict()`` gathers the partitioned state into orthojit.Muon's
layout, so a checkpoint loads into a DistributedMuon of any world size, stage or mode, or into
orthojit.Muon, and back.
"""

import contextlib
import copy
import json as _json
import os
import time

import torch

from . import _orthojit
from .file_progress import file_progress
from .muon import (_GROUPS_KEY, _MATRIX_KEYS, _STATE_FORMAT, _channels_last, _check_group, _check_not_sharded, _file_meta, _json_groups, _match_saved_state,
                   _preset_name, _saved_groups, _setting_overrides)

__all__ = ["DistributedMuon"]


def _overrides(settings, *, lr, muon_lr, adam_lr, momentum, nesterov, weight_decay, betas, eps, backend):
    """orthojit.Muon's constructor vocabulary as settings keys (the explicit arguments win)."""
    overrides = {str(k): v for k, v in (settings or {}).items()}
    explicit = {
        "muon.lr": muon_lr if muon_lr is not None else lr,
        "adam.lr": adam_lr if adam_lr is not None else lr,
        "muon.momentum": momentum,
        "muon.nesterov": nesterov,
        "muon.weight_decay": weight_decay,
        "adam.weight_decay": weight_decay,
        "adam.eps": eps,
        "muon.backend": backend,
    }
    for key, value in explicit.items():  # numbers as orthojit.Muon takes them: "0.1" is refused, not converted
        if value is not None and key not in ("muon.nesterov", "muon.backend") and (isinstance(value, (bool, str)) or not isinstance(value, (int, float))):
            raise TypeError(f"orthojit.DistributedMuon: {key} = {value!r}; expected a number")
    if nesterov is not None and not isinstance(nesterov, bool):
        raise TypeError(f"orthojit.DistributedMuon: nesterov = {nesterov!r}; expected True or False")
    if betas is not None:
        if not isinstance(betas, (tuple, list)) or len(betas) != 2 or any(isinstance(b, (bool, str)) or not isinstance(b, (int, float)) for b in betas):
            raise ValueError(f"betas must be a pair of numbers (beta1, beta2), got {betas!r}")
        explicit["adam.beta1"], explicit["adam.beta2"] = float(betas[0]), float(betas[1])
    overrides.update({key: value for key, value in explicit.items() if value is not None})
    return overrides


def _matrix_options(matrix_options, names):
    """{name: (layout, row_splits, head_rows)} from orthojit.Muon's matrix_options vocabulary."""
    result = {}
    for name, options in (matrix_options or {}).items():
        if name not in names:
            raise ValueError(f"orthojit.DistributedMuon: matrix_options name '{name}', which is not a trainable parameter given here")
        options = dict(options)
        unknown = set(options) - set(_MATRIX_KEYS)
        if unknown:
            raise ValueError(f"orthojit.DistributedMuon: parameter '{name}': unknown matrix options {sorted(unknown)}; valid: {list(_MATRIX_KEYS)}")
        result[name] = (str(options.get("layout", "auto")), [int(r) for r in options.get("row_splits", [])], int(options.get("head_rows", 0)))
    return result


# Tensors a torch.distributed worker still held when the collectives that handed them over went
# (_TorchCollectives.__del__): referenced until the process ends, so that no worker frees them last.
_HELD_UNTIL_EXIT = []


class _TorchCollectives:
    """The collectives of the C++ optimizer (bindings/python/torch_communicator.h) on a
    torch.distributed process group; tensors come in as views of the optimizer's buffers."""

    def __init__(self, group, dist=None):
        if dist is None:  # a stand-in only in tests (tests/python/test_torch_collectives.py)
            import torch.distributed as dist

        self.dist = dist
        self.group = group
        self.rank = dist.get_rank(group)
        self.world = dist.get_world_size(group)
        self.backend = str(dist.get_backend(group))
        # One backend for both kinds of tensor ("gloo", "nccl"), or one per device type
        # ("cpu:gloo,cuda:nccl", torch >= 2.0): which moves CUDA tensors (NCCL) and which host ones.
        if ":" in self.backend:
            backends = dict(part.split(":", 1) for part in self.backend.split(","))
        else:
            backends = {"cpu": self.backend, "cuda": self.backend}
        self.moves_cuda_tensors = backends.get("cuda") == "nccl"
        self.moves_cpu_tensors = backends.get("cpu") not in (None, "nccl")
        self._kept = []  # the tensors of the last calls (_keep)
        self.gloo_reduce_scatter = True  # until gloo refuses it (reduce_scatter)

    # How many calls' tensors may wait for a backend thread before the oldest are let go anyway
    # (a reference that never goes would otherwise keep reduce_scatter's full-size sum forever).
    _KEPT_CALLS = 8

    # How long the collectives, when they go, wait for a backend thread to let go of the last
    # calls' tensors before leaving them referenced for the rest of the process (__del__).
    _LAST_WAIT_SECONDS = 5.0

    def _still_held(self):
        # The kept calls a backend thread still holds a tensor of (Tensor._use_count() > 1: a
        # reference besides this Python object's); none where torch cannot tell (1.13).
        def held(tensor):
            count = getattr(tensor, "_use_count", None)
            return count is not None and count() > 1

        return [call for call in self._kept if any(map(held, call))]

    def _release(self):
        # At the start of every call: lets go of the tensors of earlier calls that no backend
        # thread holds any more (see _keep), before this call allocates its own.
        self._kept = self._still_held()[-(self._KEPT_CALLS - 1):]

    def __del__(self):
        # The optimizer is going (often just before the job's last barrier and its exit): the last
        # calls' tensors, too, must not be let go of while a worker still holds them. A worker that
        # finished but was not scheduled since may hold them a while (a job's end under load:
        # the last all-gather's work, which the trainer's final barrier had taken hold of as
        # well). Wait for it, briefly; what a worker still holds after that stays referenced for
        # the rest of the process.
        try:
            deadline = time.monotonic() + self._LAST_WAIT_SECONDS
            while self._still_held() and time.monotonic() < deadline:
                time.sleep(0.0005)
            _HELD_UNTIL_EXIT.extend(self._still_held())
        except Exception:  # noqa: BLE001 - interpreter shutdown may have torn down what this needs
            pass

    def _keep(self, passed):
        # A backend's worker thread (gloo's runLoop, NCCL's watchdog) lets go of a work's tensors
        # just after the work completes, so after wait() returns it may still hold them. If this
        # thread drops its Python references first, torch hands the Python object to the tensor,
        # and the worker's release becomes the last: it must take the GIL to free the object, and
        # during interpreter shutdown that ends the process with std::terminate (seen at the exit
        # of torchrun jobs on torch 2.15 under load: "terminate called without an active
        # exception", a backtrace from ProcessGroupGloo::runLoop through decref_pyobject). So the
        # tensors handed to torch.distributed stay referenced here until a later call finds the
        # worker done with them (Tensor._use_count() == 1, torch >= 2.0), or until the next call
        # where torch cannot tell. (A view's base needs nothing: the view keeps it, and the view
        # is let go of here, on this thread.)
        self._kept.append(tuple(passed))

    def _global(self, rank):
        # broadcast and point-to-point take global ranks; a subgroup's ranks map to them
        get = getattr(self.dist, "get_global_rank", None) or self.dist.distributed_c10d._get_global_rank
        return rank if self.group is None or self.group == self.dist.group.WORLD else get(self.group, rank)

    def _staged(self, tensor):
        # A host scalar (the step's non-finite flag) on a group that moves only CUDA tensors goes
        # through the device.
        return tensor.cuda() if not tensor.is_cuda and not self.moves_cpu_tensors else tensor

    def all_reduce(self, tensor):
        self._release()
        work = self._staged(tensor)
        self.dist.all_reduce(work, group=self.group)
        self._keep([work])
        if work is not tensor:
            tensor.copy_(work.cpu())

    def reduce_scatter(self, source, destination):
        self._release()
        scatter = getattr(self.dist, "reduce_scatter_tensor", None) or getattr(self.dist, "_reduce_scatter_base", None)
        if source.is_cuda and self.moves_cuda_tensors:
            scatter(destination, source, group=self.group)
            self._keep([destination, source])
            return
        if self.gloo_reduce_scatter and scatter is not None and not source.is_cuda and self.moves_cpu_tensors:
            # gloo's own reduce-scatter (recent PyTorch; torch 2.15 has it): (N-1)/N of the data
            # per rank instead of an all-reduce's twice that, and no full-size sum. Older gloo
            # refuses it before anything moves, the same way on every rank (same torch), so the
            # first refusal switches every rank to the ring below for good.
            try:
                scatter(destination, source, group=self.group)
                self._keep([destination, source])
                return
            except RuntimeError as error:
                if "does not support" not in str(error) and "not supported" not in str(error):
                    raise
                self.gloo_reduce_scatter = False
        if not source.is_cuda and self.moves_cpu_tensors:
            return self._ring_reduce_scatter(source, destination)
        # Any other pairing of tensor and backend: the sum of everything, then this rank's block.
        total = source.clone()
        self.dist.all_reduce(total, group=self.group)
        self._keep([total])
        count = destination.numel()
        destination.copy_(total[self.rank * count:(self.rank + 1) * count])

    def _ring_round(self, outgoing, incoming):
        # One round of a ring: `outgoing` to the next rank while `incoming` arrives from the
        # previous one (one peer for both on two ranks).
        following, preceding = ((self.rank + step) % self.world for step in (1, -1))
        ops = [self.dist.P2POp(self.dist.isend, outgoing, self._global(following), self.group),
               self.dist.P2POp(self.dist.irecv, incoming, self._global(preceding), self.group)]
        for request in self.dist.batch_isend_irecv(ops):
            request.wait()
        self._keep([outgoing, incoming])

    def _blocks(self, tensor, count, what):
        # The world blocks of `count` elements of a flat tensor, as views (none when empty).
        if tensor.numel() != count * self.world:
            raise ValueError(f"{what}: {tensor.numel()} elements are not {self.world} blocks of {count}")
        return list(tensor.split(count)) if count else []

    def _ring_reduce_scatter(self, source, destination):
        # Where gloo has no reduce-scatter (torch 1.13): a ring of point-to-point transfers. In
        # each of world-1 rounds every rank passes a block's partial sum to the next rank and adds
        # its own part to the block it receives from the previous one, so block r is complete at
        # rank r after the last round. Each rank sends (world-1)/world of the data, half an
        # all-reduce's traffic, and holds two blocks instead of a full-size sum.
        world, rank = self.world, self.rank
        blocks = self._blocks(source, destination.numel(), "reduce_scatter")
        if world == 1 or not blocks:
            destination.copy_(source)
            return
        outgoing = blocks[(rank - 1) % world].clone()
        incoming = torch.empty_like(outgoing)
        for step in range(world - 1):
            # the last round receives block `rank` itself, straight into the destination
            target = destination if step == world - 2 else incoming
            self._ring_round(outgoing, target)
            target.add_(blocks[(rank - step - 2) % world])
            outgoing, incoming = target, outgoing

    def all_gather(self, source, destination):
        self._release()
        if not source.is_cuda and self.moves_cpu_tensors:
            return self._ring_all_gather(source, destination)
        blocks = list(destination.chunk(self.world))
        self.dist.all_gather(blocks, source, group=self.group)
        self._keep(blocks + [source])

    def _ring_all_gather(self, source, destination):
        # gloo's all-gather (torch 1.13 and 2.x) gathers into a flat temporary of the whole
        # result and then copies it into the blocks. A ring of point-to-point transfers writes
        # every block in place: in round s each rank passes on the block it received in round
        # s-1 (its own first), so after world-1 rounds it holds them all. Same traffic, no
        # full-size temporary, one pass over the result fewer.
        world, rank = self.world, self.rank
        blocks = self._blocks(destination, source.numel(), "all_gather")
        if not blocks:
            return
        blocks[rank].copy_(source)
        for step in range(world - 1):
            self._ring_round(blocks[(rank - step) % world], blocks[(rank - step - 1) % world])

    def broadcast(self, tensor, root):
        self._release()
        work = self._staged(tensor)
        self.dist.broadcast(work, src=self._global(root), group=self.group)
        self._keep([work])
        if work is not tensor:
            tensor.copy_(work.cpu())

    def exchange(self, sends, receives):
        self._release()
        ops = [self.dist.P2POp(self.dist.isend, t, self._global(peer), self.group) for peer, t in sends]
        ops += [self.dist.P2POp(self.dist.irecv, t, self._global(peer), self.group) for peer, t in receives]
        if ops:
            for request in self.dist.batch_isend_irecv(ops):
                request.wait()
            self._keep([t for _, t in sends] + [t for _, t in receives])


def _torch_group(comm):
    """The torch.distributed process group `comm` stands for, or None when it is not one."""
    try:
        import torch.distributed as dist
    except ImportError:  # pragma: no cover - torch without distributed
        return None
    if not dist.is_available():
        return None
    if comm is None or (isinstance(comm, str) and comm == "torch"):
        return dist.group.WORLD if dist.is_initialized() else None
    if isinstance(comm, dist.ProcessGroup):
        return comm
    return None


def _mpi_handle(comm):
    if isinstance(comm, str) and comm == "local":
        return None, 0  # one process, no MPI: a world of one rank
    try:
        from mpi4py import MPI
    except ImportError as error:  # pragma: no cover - depends on the machine
        raise ImportError("orthojit.DistributedMuon needs mpi4py (Debian: python3-mpi4py; pip install mpi4py)") from error
    comm = MPI.COMM_WORLD if comm is None else comm
    if not isinstance(comm, MPI.Comm):
        raise TypeError(f"comm must be an mpi4py communicator (MPI.Comm), got {type(comm).__name__}")
    return comm, MPI._handleof(comm)


class DistributedMuon(torch.optim.Optimizer):
    """Distributed hybrid Muon + AdamW.

    Args:
        named_parameters: ``model.named_parameters()`` or ``(name, tensor)`` pairs; contiguous
            (or 4-D filters in ``torch.channels_last``, which are partitioned and stepped as
            contiguous copies the runtime holds: their contiguous twins' steps, bit for bit),
            float32 / bfloat16 / float16, all on the CPU or all on the GPU (``cuda:0`` of each
            process: one GPU per rank, e.g. with CUDA_VISIBLE_DEVICES). CUDA tensors need
            ``engine="nccl"``. Frozen tensors (``requires_grad=False``) are left out.
        comm: a ``torch.distributed`` process group (gloo for CPU tensors, NCCL for CUDA tensors;
            ``"torch"`` or the default when torch.distributed is initialized, as under torchrun: the
            default group), an mpi4py communicator (the default otherwise: ``MPI.COMM_WORLD``; it
            is duplicated), or ``"local"``: one process without either (a world of one rank).
        stage: ZeRO stage 1, 2 or 3.
        mode: ``"deepspeed"`` or ``"balanced"``.
        preset: a name from ``orthojit.muon_presets()`` (``"deepspeed"`` by default).
        settings: runtime settings, e.g. ``{"muon.lr": 0.01, "adam.lr": 1e-4}`` (docs/muon.md), read
            as orthojit.Muon reads them (``"muon.precision": "f64"`` too).
        lr, muon_lr, adam_lr, momentum, nesterov, weight_decay, betas, eps, backend: orthojit.Muon's
            arguments, with its meaning and defaults (the preset's): ``lr`` sets both groups'
            rates unless ``muon_lr`` / ``adam_lr`` is given, ``weight_decay`` both groups'; they
            take precedence over ``settings``.
        use_muon: ``{name: bool}`` overriding DeepSpeed's tagging rule.
        max_grad_norm: clip the reduced gradient's global norm to this before momentum and AdamW
            (torch.nn.utils.clip_grad_norm_'s rule on the gradient every rank reduces; the
            step's report gives ``gradient_norm``). Calling clip_grad_norm_ on ``.grad`` before
            ``step()`` would clip each rank's unreduced gradient by its own norm instead. With
            ``gradients_reduced`` (DDP) either works. None: no clipping.
        bucket_size: the staging buffer of the bucketed gradient reduce-scatter and parameter
            all-gather, in f32 elements over all ranks (DeepSpeed's ``reduce_bucket_size``; None:
            2**24, 64 MiB). At stages 2 and 3 each rank holds the reduced gradient of its own
            partition only (plus, in deepspeed mode, the rest of the Muon matrices it
            orthogonalizes whole) and this bucket: larger means fewer, larger messages.
        matrix_options: per-name matrix options, as orthojit.Muon's: ``{"attn.qkv.weight":
            {"row_splits": [q, k, v], "head_rows": 64}, "moe.experts.w1": {"layout": "batch"}}``
            (Muon parameters only).
        average_gradients: divide the reduced gradients by the world size (DeepSpeed does).
        offload: optimizer state in host memory with the orthogonalization on the host.
        engine: with an MPI ``comm``: ``"mpi"`` (collectives over it) or ``"nccl"`` (one GPU per
            rank; NCCL's unique id is exchanged over ``comm``; host buffers are staged through the
            device). With a process group the group's own backend moves the data (leave ``engine``
            at its default).
        gradients_reduced: the gradients are already reduced and equal on every rank
            (DistributedDataParallel averaged them in backward): they are taken as they are,
            neither reduced nor averaged again. Off (the default): each rank's own gradients are
            reduced, and averaged when ``average_gradients``; under DDP that would reduce twice.

    ``param_groups``: a "muon-params" group (lr, momentum, nesterov, weight_decay) and an
    "adam-params" group (lr, betas, eps, weight_decay), as orthojit.Muon makes them from
    ``named_parameters``; empty ones are left out. Their values are read before every step and
    must be the same on every rank (as every rank's scheduler makes them); ``nesterov`` and the
    groups' parameters are fixed at construction (the partition layout is): ``add_param_group``
    is refused. ``state`` stays empty: the optimizer state lives in the runtime's partitions, and
    ``state_dict()`` gathers it.
    """

    def __init__(self, named_parameters, comm=None, *, stage=2, mode="deepspeed", preset="deepspeed", settings=None, use_muon=None,
                 average_gradients=True, offload=False, engine="mpi", gradients_reduced=False, lr=None, muon_lr=None, adam_lr=None,
                 momentum=None, nesterov=None, weight_decay=None, betas=None, eps=None, backend=None, matrix_options=None,
                 max_grad_norm=None, bucket_size=None, _base_settings=None):
        if engine not in ("mpi", "nccl"):
            raise ValueError(f"engine must be 'mpi' or 'nccl', got {engine!r}")
        group = _torch_group(comm)
        if group is not None:
            if engine != "mpi":
                raise ValueError(f"engine={engine!r} with a torch.distributed process group: the group's backend moves the data; "
                                 "leave engine at its default")
            self._comm, handle, collectives, engine = group, 0, _TorchCollectives(group), "torch"
        else:
            if isinstance(comm, str) and comm == "torch":
                raise ValueError("comm='torch' but torch.distributed is not initialized: call torch.distributed.init_process_group "
                                 "(torchrun sets up its environment) first")
            self._comm, handle = _mpi_handle(comm)
            collectives = None
        if isinstance(stage, bool) or not isinstance(stage, int) or stage not in (1, 2, 3):
            raise ValueError(f"stage must be 1, 2 or 3, got {stage!r}")
        # bool() of a string is True: "false" from a config file would turn a switch on.
        for flag, value in (("average_gradients", average_gradients), ("offload", offload), ("gradients_reduced", gradients_reduced)):
            if not isinstance(value, bool):
                raise TypeError(f"{flag} must be True or False, got {value!r}")
        if mode not in ("deepspeed", "balanced"):
            raise ValueError(f"mode must be 'deepspeed' or 'balanced', got {mode!r}")
        use_muon = dict(use_muon or {})
        for name, tag in use_muon.items():
            if not isinstance(tag, bool):  # bool("no") is True: a string would tag Muon
                raise TypeError(f"orthojit.DistributedMuon: use_muon['{name}'] = {tag!r}; expected True or False")
        self._parameters = []
        given = set()
        for item in named_parameters:
            if not (isinstance(item, tuple) and len(item) == 2 and isinstance(item[0], str)):
                raise TypeError("named_parameters must yield (name, tensor) pairs, e.g. model.named_parameters()")
            name, tensor = item
            given.add(name)
            if not isinstance(tensor, torch.Tensor):
                raise TypeError(f"orthojit.DistributedMuon: parameter '{name}' is a {type(tensor).__name__}, not a torch.Tensor")
            if not tensor.requires_grad:
                continue
            _check_not_sharded("orthojit.DistributedMuon", name, tensor)
            self._parameters.append((name, tensor))
        # Names key each tensor's gradient and state (two tensors under one name once stepped the
        # first with the second's gradient and the second with zeros), as in orthojit.Muon.
        names, tensors = {}, {}
        for name, tensor in self._parameters:
            if name in names:
                raise ValueError(f"two tensors are named '{name}'; parameter names must be unique (e.g. prefix each module's "
                                 "named_parameters with its name)")
            if id(tensor) in tensors:
                raise ValueError(f"'{name}' is the tensor already given as '{tensors[id(tensor)]}'")
            names[name], tensors[id(tensor)] = tensor, name
        if not self._parameters:
            raise ValueError("DistributedMuon was given no trainable parameters")
        unknown = sorted(set(use_muon) - given)
        if unknown:  # a misspelt name would leave its parameter to the tagging rule, silently
            raise ValueError(f"orthojit.DistributedMuon: use_muon names parameters it was not given: {unknown}")
        options = _matrix_options(matrix_options, names)
        if max_grad_norm is not None and (isinstance(max_grad_norm, (bool, str)) or not isinstance(max_grad_norm, (int, float))
                                          or not max_grad_norm > 0 or max_grad_norm == float("inf")):
            raise ValueError(f"max_grad_norm must be a finite number > 0 (or None: no clipping), got {max_grad_norm!r}")
        if bucket_size is not None and (isinstance(bucket_size, bool) or not isinstance(bucket_size, int) or bucket_size < 1):
            raise ValueError(f"bucket_size must be a whole number of elements >= 1 (or None: 2**24), got {bucket_size!r}")
        self._accumulated = False
        _preset_name(preset, "orthojit.DistributedMuon")
        _setting_overrides(settings or {}, "orthojit.DistributedMuon")
        overrides = _overrides(settings, lr=lr, muon_lr=muon_lr, adam_lr=adam_lr, momentum=momentum, nesterov=nesterov,
                               weight_decay=weight_decay, betas=betas, eps=eps, backend=backend)
        if _base_settings is not None:  # from_deepspeed_config: the config's settings, the overrides on top
            for key, value in overrides.items():
                _base_settings.set(key, value)
            overrides, preset = {}, _base_settings.preset
        # A channels_last filter (a vision model after model.to(memory_format=torch.channels_last))
        # is partitioned and stepped as a contiguous copy of itself, which the runtime holds:
        # the partition layout, the state and the state file are those of the contiguous model,
        # and each step is its contiguous twin's, bit for bit. The copy takes the parameter's
        # values before every call that reads them and gives them back after every call that
        # writes them (two copies of each such filter per step, on the parameter's device).
        self._shadows = [(tensor, tensor.detach().contiguous()) for _, tensor in self._parameters if _channels_last(tensor)]
        contiguous = {id(tensor): shadow for tensor, shadow in self._shadows}
        # What the runtime holds of each parameter: its address (a shadowed filter's is its copy's),
        # dtype and shape. A parameter whose storage is replaced afterwards (model.to(dtype),
        # p.data = ...) is refused at the next call, not written through a stale address.
        self._bound = {name: (None if id(tensor) in contiguous else tensor.data_ptr(), tensor.dtype, tensor.shape, tensor.device)
                       for name, tensor in self._parameters}
        self._core = _orthojit.Distributed([(name, contiguous.get(id(tensor), tensor.detach()), use_muon.get(name))
                                            for name, tensor in self._parameters], handle, preset,
                                           overrides, stage, mode, bool(average_gradients), bool(offload), engine, collectives,
                                           bool(gradients_reduced), options, float(max_grad_norm or 0.0), int(bucket_size or 0), _base_settings)
        values = (_base_settings if _base_settings is not None else _orthojit.MuonSettings(preset, dict(overrides))).values()
        # missing_grad = zero (deepspeed, keller): a parameter without a gradient is stepped with
        # zeros, as their code sets p.grad = zeros; under skip every rank must give every gradient.
        self._zero_missing = values["missing_grad"] == "zero"
        self._preset, self._momentum_kind, self._nesterov = preset, values["muon.momentum_kind"], bool(values["muon.nesterov"])
        self._layout = {"stage": stage, "mode": mode}
        self._device = self._parameters[0][1].device if self._core.cuda else None
        self.last_report = None
        self.steps_taken = 0
        # The groups orthojit.Muon makes from named_parameters (the tagging is the runtime's), with
        # the runtime's current hyperparameters: so state_dicts move between the two.
        tags = dict(self._core.muon_tags())
        current = self._core.hyperparameters()
        groups = [
            {"name": "muon-params", "use_muon": True, "lr": current["muon.lr"], "momentum": current["muon.momentum"],
             "nesterov": self._nesterov, "weight_decay": current["muon.weight_decay"]},
            {"name": "adam-params", "use_muon": False, "lr": current["adam.lr"], "betas": (current["adam.beta1"], current["adam.beta2"]),
             "eps": current["adam.eps"], "weight_decay": current["adam.weight_decay"]},
        ]
        for group in groups:
            chosen = [(name, tensor) for name, tensor in self._parameters if tags[name] == group["use_muon"]]
            group["params"] = [tensor for _, tensor in chosen]
            group["param_names"] = [name for name, _ in chosen]
        self._building = True
        super().__init__([group for group in groups if group["params"]], {})
        self._building = False
        # torch's schedulers read defaults (OneCycleLR and CyclicLR cycle "momentum" when it is
        # there): the Muon group's, as orthojit.Muon's.
        self.defaults = {"lr": current["muon.lr"], "momentum": current["muon.momentum"], "nesterov": self._nesterov,
                         "weight_decay": current["muon.weight_decay"]}

    @classmethod
    def from_deepspeed_config(cls, named_parameters, config, comm=None, *, strict=False, **kwargs):
        """A DistributedMuon configured as DeepSpeed reads ``config`` (a path, JSON text or a dict):
        the optimizer's settings from ``optimizer.params`` (as orthojit.Muon.from_deepspeed_config),
        the ZeRO stage, the optimizer offload and ``reduce_bucket_size`` from ``zero_optimization``, and
        ``gradient_clipping`` as ``max_grad_norm`` (the reduced gradient clipped, not DeepSpeed's
        clipping of the Muon update: docs/distributed.md). Ignored keys are named in warnings
        (``strict=True``: a ValueError). ``kwargs`` go to the constructor (``mode``, ``settings``,
        ``engine``, ...), except what the config decides."""
        from .muon import _deepspeed_settings, _read_deepspeed_config

        for key in ("preset", "stage", "offload", "max_grad_norm", "bucket_size", "_base_settings"):
            if key in kwargs:
                raise TypeError(f"from_deepspeed_config takes {key} from the config, not {key}= (edit the config, or build "
                                "DistributedMuon directly)")
        data, origin = _read_deepspeed_config(config)
        base = _deepspeed_settings(data, origin, strict)
        zero = _orthojit.deepspeed_distributed_settings(_json.dumps(data), origin)
        return cls(named_parameters, comm, stage=zero["stage"], offload=zero["offload"], max_grad_norm=zero["max_gradient_norm"] or None,
                   bucket_size=zero["bucket_elements"], _base_settings=base, **kwargs)

    def add_param_group(self, param_group):
        if not getattr(self, "_building", False):
            raise ValueError("orthojit.DistributedMuon: parameters cannot be added after construction (every rank's partition "
                             "layout is fixed then); build a new DistributedMuon with every parameter")
        super().add_param_group(param_group)

    def __getstate__(self):
        raise TypeError("orthojit.DistributedMuon cannot be pickled or deep-copied (torch.save(optimizer), copy.deepcopy); "
                        "save optimizer.state_dict() and load it with load_state_dict into a new optimizer")

    def _apply_groups(self):
        """The groups' hyperparameters, checked, for the next step (every rank sets the same)."""
        values = {}
        for group in self.param_groups:
            _check_group(group, owner="orthojit.DistributedMuon")
            if group["use_muon"]:
                if bool(group["nesterov"]) != self._nesterov:
                    raise ValueError(f"orthojit.DistributedMuon: param group '{group['name']}': nesterov = {group['nesterov']!r}, but it "
                                     f"was {self._nesterov} at construction and is fixed there (the compiled Muon steps depend on it)")
                values.update({"muon.lr": group["lr"], "muon.momentum": group["momentum"], "muon.weight_decay": group["weight_decay"]})
            else:
                values.update({"adam.lr": group["lr"], "adam.beta1": group["betas"][0], "adam.beta2": group["betas"][1],
                               "adam.eps": group["eps"], "adam.weight_decay": group["weight_decay"]})
        self._core.set_hyperparameters({key: float(value) for key, value in values.items()})

    @contextlib.contextmanager
    def _through_shadows(self):
        """Around a runtime call that reads or writes the parameters: the channels_last ones'
        contiguous copies take their values before it and give them back after it (also when it
        raises: a refused step changed nothing, so the parameters stay as they were)."""
        with torch.no_grad():
            for tensor, shadow in self._shadows:
                shadow.copy_(tensor)
        try:
            yield
        finally:
            with torch.no_grad():
                for tensor, shadow in self._shadows:
                    tensor.copy_(shadow)

    def _stream(self):
        if self._device is None:
            return 0
        import torch

        return int(torch.cuda.current_stream(self._device).cuda_stream)

    @property
    def rank(self):
        return self._core.rank

    @property
    def world(self):
        return self._core.world

    def describe(self):
        """The communicator, e.g. 'MPI (Open MPI v4.1.4), rank 0 of 2'."""
        return self._core.describe()

    def memory_bytes(self):
        """Bytes this rank's optimizer holds in its memory (host or CUDA): the optimizer state, the
        reduced gradient of its range and the bucket; the model's parameters and ``.grad`` are
        not counted."""
        return self._core.memory_bytes

    def plan(self):
        """The partition plan (as ``orthojit.plan`` returns it) of these parameters."""
        import json

        return json.loads(self._core.plan_json())

    def _parameter_problem(self, name, tensor):
        """Why the runtime can no longer step this parameter (its storage was replaced after
        construction), or None."""
        address, dtype, shape, device = self._bound[name]
        now = (tensor.dtype, tensor.shape, tensor.device)
        if now != (dtype, shape, device) or (address is not None and tensor.data_ptr() != address):
            changed = ", ".join(f"{what} {before} -> {after}" for what, before, after in
                                zip(("dtype", "shape", "device"), (dtype, tuple(shape), device), (now[0], tuple(now[1]), now[2]))
                                if before != after) or "its storage"
            return (f"parameter '{name}' is no longer the tensor memory DistributedMuon was built on ({changed}: e.g. model.to(...) or "
                    "p.data = ... after construction); the runtime's partitions address the old memory. Change parameters in place "
                    "(p.data.copy_(...)), or build the optimizer after the change (state_dict / load_state_dict carry its state over); "
                    "nothing was changed")
        return None

    def _require_parameters_bound(self, doing, gradients=()):
        """Raises on every rank when any rank's parameters moved or its gradients do not have their
        parameters' shapes (one all-reduce with more than one rank: a rank that raised alone would
        leave the others waiting in the next collective)."""
        problem = next((p for p in (self._parameter_problem(name, tensor) for name, tensor in self._parameters) if p), None)
        if problem is None:
            shapes = {name: tensor.shape for name, tensor in self._parameters}
            problem = next((f"the gradient of '{name}' has shape {tuple(grad.shape)}, the parameter {tuple(shapes[name])}; nothing was "
                            "changed" for name, grad in gradients if grad.shape != shapes[name]), None)
        if self.world > 1:
            self._core.require_on_every_rank(problem or "", doing)
        elif problem:
            raise ValueError(problem)

    def _gradients(self, after_accumulation=False):
        """The (name, gradient) pairs to step on, and the names without a gradient under
        missing_grad = skip, which the runtime refuses on every rank together (so that the other
        ranks do not wait for this one in the reduction)."""
        gradients, missing = [], []
        for name, tensor in self._parameters:
            if not tensor.requires_grad:
                # Its place in every rank's layout is fixed at construction: stepping it with zeros
                # would still move it (momentum, weight decay), and a frozen tensor is never touched.
                raise ValueError(f"parameter '{name}' was frozen (requires_grad=False) after DistributedMuon was built; build the "
                                 "optimizer again (frozen tensors are left out at construction); nothing was changed")
            grad = getattr(tensor, "grad", None)
            if grad is None:
                if self._zero_missing or after_accumulation:
                    import torch

                    gradients.append((name, torch.zeros(tensor.shape, dtype=torch.float32, device=tensor.device)))
                    continue
                missing.append(name)
                continue
            gradients.append((name, grad.detach().contiguous()))
        return gradients, missing

    def accumulate(self):
        """Adds the current gradients as one micro-batch. Call it for every micro-batch, the last one
        included; the next ``step()`` then applies Muon once to their sum and does not read ``.grad``.
        At stages 2 and 3 each micro-batch is reduce-scattered here (a collective: every rank calls
        it as often), and the reduced micro-batches are summed."""
        gradients, missing = self._gradients()
        self._require_parameters_bound("accumulating gradients", gradients)
        self._core.step(gradients, True, self._stream(), missing)
        self._accumulated = True

    def step(self, closure=None):
        """One optimizer step on every rank, with the hyperparameters in ``param_groups``; returns
        the report (skipped, reason, counts, bytes sent; also ``last_report``), or the closure's
        loss when a closure is given (torch's convention; the closure runs first, with grad
        enabled). After ``accumulate()``: the step of the accumulated micro-batches (``.grad``
        is not read)."""
        loss = None
        if closure is not None:
            with torch.enable_grad():
                loss = closure()
        self._apply_groups()
        gradients, missing = self._gradients(self._accumulated)
        self._require_parameters_bound("the step", gradients)
        with self._through_shadows():
            self.last_report = self._core.step(gradients, False, self._stream(), missing)
        self._accumulated = False
        if not self.last_report["skipped"]:
            self.steps_taken += 1
        return loss if closure is not None else self.last_report

    def qk_clip(self, q_param, k_param, head_rows, s_max, tau):
        """QK-clip (MuonClip, Kimi K2) after a step, collective: ``s_max`` is this rank's largest
        attention logit per head (its own batch); every rank clips with each head's largest value
        over the ranks, so the ranks' parameters stay equal (orthojit.Muon.qk_clip of those
        maxima, bit for bit). ``q_param`` / ``k_param``: names or the tensors. Wrong arguments on
        any rank raise on every rank, with nothing changed."""
        names = {id(tensor): name for name, tensor in self._parameters}

        def resolve(param):
            if isinstance(param, str):
                return param
            if id(param) not in names:
                raise ValueError("QK-clip: the tensor is not a parameter of this optimizer")
            return names[id(param)]

        if isinstance(s_max, torch.Tensor):
            s_max = s_max.detach().double().cpu().reshape(-1).tolist()
        self._require_parameters_bound("QK-clip")
        with self._through_shadows():
            self._core.qk_clip(resolve(q_param), resolve(k_param), int(head_rows), [float(s) for s in s_max], float(tau))

    def state_dict(self, rank0_only=False):
        """The whole state, gathered from every rank's partition (collective: every rank calls it
        and every rank receives all of it, on the CPU; 8 bytes per Muon element and 12 per AdamW
        element of host memory), in orthojit.Muon's layout: loads into orthojit.Muon or into a
        DistributedMuon of any world size, stage or mode. ``rank0_only=True`` (as FSDP's full
        state dict): still called on every rank, but only rank 0 receives the state (the others
        send it their partitions and get ``{}``), so only rank 0 holds it."""
        if not isinstance(rank0_only, bool):
            raise ValueError(f"rank0_only must be True or False, got {rank0_only!r}")
        state, steps = self._core.gather_state(0 if rank0_only else None)
        if rank0_only and self.rank != 0:
            return {}
        packed, groups, index = {}, [], 0
        for group in self.param_groups:
            saved = {key: copy.deepcopy(value) for key, value in group.items() if key != "params"}
            saved["params"] = list(range(index, index + len(group["params"])))
            for name, p in zip(group["param_names"], group["params"]):
                values = state[name]
                if group["use_muon"]:
                    packed[index] = {"momentum_buffer": values["momentum_buffer"].reshape(p.shape)}
                else:
                    packed[index] = {"exp_avg": values["exp_avg"].reshape(p.shape), "exp_avg_sq": values["exp_avg_sq"].reshape(p.shape),
                                     "step": torch.tensor(values["step"], dtype=torch.int64)}
                index += 1
            groups.append(saved)
        meta = {"format": _STATE_FORMAT, "preset": self._preset, "steps_taken": int(steps), "momentum_kind": self._momentum_kind,
                "muon_variant": "muon", "distributed": dict(self._layout, world=self.world)}
        return {"state": packed, "param_groups": groups, "orthojit": meta}

    def _check_saved_groups(self, groups):
        """Raises ValueError when saved param_groups cannot drive this optimizer."""
        for group in groups:
            _check_group(group, owner="orthojit.DistributedMuon (the saved param_groups)")
            if group["use_muon"] and bool(group["nesterov"]) != self._nesterov:
                raise ValueError(f"optimizer state does not match this optimizer: its Muon group has nesterov = {group['nesterov']!r}, "
                                 f"this optimizer {self._nesterov} (fixed at construction: build it with nesterov="
                                 f"{bool(group['nesterov'])}); nothing was loaded")

    def load_state_dict(self, state_dict):
        """Loads a state_dict() of orthojit.Muon or of a DistributedMuon (any world size, stage or
        mode); collective. Every rank checks everything first and the ranks agree: when anything
        does not match on any rank, every rank raises and nothing changes (parameters the saved
        state has no entry for start from zeros, as in orthojit.Muon)."""
        try:
            matched, new_groups, meta = _match_saved_state(self.param_groups, state_dict, "muon", lambda p: {}, self._momentum_kind)
            self._check_saved_groups(new_groups)
            state = {}
            for group in self.param_groups:
                for name, p in zip(group["param_names"], group["params"]):
                    values = matched.get(p)
                    flat = lambda key: values[key].detach().to("cpu", torch.float32).reshape(-1).contiguous()  # noqa: E731
                    if group["use_muon"]:
                        state[name] = {"momentum_buffer": flat("momentum_buffer") if values else torch.zeros(p.numel())}
                    else:
                        state[name] = {"exp_avg": flat("exp_avg"), "exp_avg_sq": flat("exp_avg_sq"), "step": int(values["step"])} if values else \
                            {"exp_avg": torch.zeros(p.numel()), "exp_avg_sq": torch.zeros(p.numel()), "step": 0}
            steps = int(meta.get("steps_taken", 0))
        except Exception:
            # This rank cannot load: it still takes part in the ranks' agreement (with a state that
            # every rank refuses), so that the others raise too instead of waiting for it.
            try:
                self._core.load_state({"": {}}, -1)
            except Exception:  # noqa: BLE001 - the agreement's error; this rank's own is raised below
                pass
            raise
        self._core.load_state(state, steps)
        self.param_groups = new_groups
        self.steps_taken = steps

    def save_state(self, path, progress=False):
        """Writes the optimizer state to the safetensors file ``path`` without gathering it anywhere
        (collective: every rank calls it; rank 0 alone writes, atomically): each rank streams its
        partition to rank 0 in chunks (``bucket_size / world`` floats), which rank 0 writes in
        place, so no rank holds more than its own state and a few chunks, where ``state_dict()``
        gathers all of it. The file is the C++ optimizers' state file (``<name>.momentum_buffer``,
        ``.exp_avg``, ``.exp_avg_sq``, ``.step``; docs/muon.md "State") with the param_groups'
        hyperparameters in its metadata; ``load_state`` reads it into a DistributedMuon of any
        world size, stage or mode. A failure on rank 0 raises on every rank. ``progress``: True
        for a progress line on rank 0's stderr, or a callable ``progress(phase, done, total)``
        (orthojit.file_progress; rank 0 alone writes, so only rank 0's is called: phases
        "write", then "sync"); what it raises fails the save
        on every rank, with ``path`` as it was."""
        try:
            groups, problem = _json_groups(self.param_groups), ""
        except ValueError as error:
            groups, problem = None, str(error)
        # Every rank learns of a problem on any rank (one all-reduce) before the chunks move.
        self._core.require_on_every_rank(problem, "preparing the state file's param_groups")
        with file_progress(progress, f"saving {os.fspath(path)}", show_line=self.rank == 0) as report:
            self._core.save_state_file(os.fspath(path), {_GROUPS_KEY: groups}, report)

    def load_state(self, path, progress=False):
        """Loads a state file of ``save_state`` (or of the C++/C distributed or single-rank
        optimizer, whose param_groups are then kept as they are); collective, the file on a file
        system every rank sees. Each rank reads only its own part and rank 0 checks the whole
        file's checksum; when anything does not match on any rank, every rank raises and nothing
        changes. ``progress``: True for a progress line on rank 0's stderr, or a callable
        ``progress(phase, done, total)`` called on every rank for its own reads ("read", of the
        whole file's bytes: a rank reads its part) and on rank 0 for the checksum."""
        path = os.fspath(path)
        try:
            metadata, _ = _orthojit.read_state_header(path)
            meta = _file_meta(metadata)
            _, new_groups, _ = _match_saved_state(self.param_groups, {"param_groups": _saved_groups(metadata, self.param_groups), "state": {},
                                                                      "orthojit": meta}, "muon", lambda p: {}, self._momentum_kind)
            self._check_saved_groups(new_groups)
        except Exception as error:
            # This rank cannot load: it still takes part in load_state_file's collectives, reading
            # nothing, so that the others raise too instead of waiting for it.
            try:
                self._core.load_state_file(path, refusal=str(error) or type(error).__name__)
            except Exception:  # noqa: BLE001 - the agreement's error; this rank's own is raised below
                pass
            raise
        with file_progress(progress, f"loading {path}", show_line=self.rank == 0) as report:
            steps = self._core.load_state_file(path, progress=report)
        self.param_groups = new_groups
        self.steps_taken = steps

    def gather_parameters(self):
        """Stage 3: every rank's parameters receive the other ranks' slices (collective). Stages 1-2:
        nothing to do, the parameters are whole after every step."""
        self._require_parameters_bound("gathering the parameters")
        with self._through_shadows():
            self._core.gather_parameters(self._stream())
