"""orthojit.Muon: the hybrid Muon + AdamW optimizer as a torch.optim.Optimizer.

Muon takes the hidden matrices, AdamW the rest (the preset's tagging rule: DeepSpeed's ndim >= 2
and a lower-cased name without "embed" or "lm_head", or Moonlight's case-sensitive
"embed_tokens" / "lm_head"; overridable). The arithmetic is the C++ runtime's (runtime/muon/update_rules.h,
the code the C++ and distributed optimizers run) applied to the tensors' memory in place, so a step
gives the bits a C++ step gives; the state lives in ordinary torch tensors (f32 momentum_buffer;
f32 exp_avg, exp_avg_sq and an int64 step), so state_dict() is native. See docs/muon.md.

    opt = orthojit.Muon(model.named_parameters(), preset="deepspeed", muon_lr=0.02, adam_lr=3e-4)
    for batch in data:
        loss = model(batch); loss.backward(); opt.step(); opt.zero_grad()
"""

from __future__ import annotations

import copy
import json as _json
import math
import os
import time
import warnings
from collections import defaultdict
from dataclasses import dataclass
from typing import Any, Callable, Dict, List, Mapping, Optional, Sequence, Tuple, Union

import torch

from . import _orthojit
from . import tensor_step as _tensor_step
from .file_progress import file_progress

__all__ = ["Muon", "StepReport", "convert_momentum_state"]

_PARAM_DTYPES = (torch.float32, torch.bfloat16, torch.float16)
_MATRIX_KEYS = ("layout", "row_splits", "head_rows")
_MUON_ONLY = ("momentum", "nesterov", "muon_lr")
_ADAM_ONLY = ("betas", "eps", "adam_lr")
_STATE_FORMAT = _orthojit.STATE_FORMAT  # "hybrid-optimizer-state/2": records the momentum form


@dataclass
class StepReport:
    """What the last step() did (the C++ runtime's StepReport)."""

    skipped: bool = False
    reason: str = ""  # why the step was skipped (the first NaN or infinity, naming the parameter)
    muon_updated: int = 0
    adam_updated: int = 0
    without_gradient: int = 0
    orthogonalize_seconds: float = 0.0


def muon_presets() -> List[Dict[str, str]]:
    """The optimizer presets, from the runtime's one table (runtime/muon/presets.h): a list of
    ``{"name", "description", "source"}``, the default (``deepspeed``) first."""
    return list(_orthojit.muon_presets())


def _count_in_place_change(p: torch.Tensor) -> None:
    """Bumps p's version counter (what an in-place torch op does) without touching its values."""
    bump = getattr(torch.autograd.graph, "increment_version", None)  # torch >= 2.1
    if bump is not None:
        bump(p)
        return
    with torch.no_grad():  # an in-place op on an empty view: the shared counter moves, no kernel runs
        p.detach().reshape(-1)[:0].zero_() if p.is_contiguous() else p.detach()[(slice(0, 0),)].zero_()


def _number(group: Dict[str, Any], key: str, value: Any, least: float, below: Optional[float] = None, above_least: bool = False,
            owner: str = "orthojit.Muon") -> None:
    try:
        if isinstance(value, bool) or isinstance(value, str):
            raise TypeError
        number = float(value)
    except (TypeError, ValueError):
        number = None
    bad = number is None or not math.isfinite(number) or number < least or (above_least and number == least) or \
        (below is not None and number >= below)
    if bad:
        bound = (f"> {least:g}" if above_least else f">= {least:g}") + (f" and < {below:g}" if below is not None else "")
        raise ValueError(f"{owner}: param group '{group.get('name', '?')}' "
                         f"({'Muon' if group.get('use_muon') else 'AdamW'}): {key} = {value!r}; expected a finite number {bound}")


def _check_group(group: Dict[str, Any], owner: str = "orthojit.Muon") -> None:
    """A group's hyperparameters, checked where torch's optimizers check theirs (construction,
    add_param_group) and again before each step (param_groups may be edited)."""
    _number(group, "lr", group.get("lr"), 0.0, owner=owner)
    _number(group, "weight_decay", group.get("weight_decay"), 0.0, owner=owner)
    if group.get("use_muon"):
        _number(group, "momentum", group.get("momentum"), 0.0, below=1.0, owner=owner)
        nesterov = group.get("nesterov")
        if not isinstance(nesterov, bool) and not (isinstance(nesterov, int) and nesterov in (0, 1)):
            raise ValueError(f"{owner}: param group '{group.get('name', '?')}' (Muon): nesterov = {nesterov!r}; expected True or False")
    else:
        betas = group.get("betas")
        if not isinstance(betas, (tuple, list)) or len(betas) != 2:
            raise ValueError(f"{owner}: param group '{group.get('name', '?')}' (AdamW): betas = {betas!r}; expected two numbers (beta1, beta2)")
        for key, beta in zip(("betas[0]", "betas[1]"), betas):
            _number(group, key, beta, 0.0, below=1.0, owner=owner)
        _number(group, "eps", group.get("eps"), 0.0, above_least=True, owner=owner)


def _channels_last(t: torch.Tensor) -> bool:
    """A 4-D tensor laid out channels_last (and not also plain contiguous: a 1x1 kernel is both)."""
    return t.dim() == 4 and not t.is_contiguous() and t.is_contiguous(memory_format=torch.channels_last)


def _physical(t: torch.Tensor) -> torch.Tensor:
    """The tensor's memory in order, as the runtime steps it: a channels_last (out, in, kh, kw)
    tensor as its contiguous (out, kh, kw, in) view; any other tensor as it is. Muon's matrix of
    such a filter, (out, in*kh*kw), is then stepped with its columns permuted: Newton-Schulz is
    equivariant under column permutations (NS(X P) = NS(X) P) and every other term is element-wise,
    so each element gets its own update (to the rounding of the products' sums)."""
    return t.permute(0, 2, 3, 1) if _channels_last(t) else t


def _in_format_of(t: torch.Tensor, p: torch.Tensor) -> torch.Tensor:
    """`t` (a gradient or a state tensor of p's shape) in p's memory format."""
    return t.contiguous(memory_format=torch.channels_last if _channels_last(p) else torch.contiguous_format)


def _check_not_sharded(owner: str, name: str, p: torch.Tensor) -> None:
    """Muon orthogonalizes whole matrices: a parameter that another framework holds as a shard
    (FSDP's flattened 1-D shards, a DTensor of FSDP2 or tensor parallelism) would be seen as a
    vector or as this rank's rows, and stepped with AdamW or orthogonalized in pieces, silently.
    Refused, saying what to use instead."""
    if getattr(p, "_fsdp_flattened", False):  # FSDP marks its FlatParameters and the views of use_orig_params
        raise ValueError(f"{owner}: {_label(name)} belongs to a FullyShardedDataParallel module, which keeps each parameter as a "
                         "1-D shard of a flattened buffer: Muon would see no matrix and step it with AdamW. Give the optimizer the "
                         "unwrapped model's parameters and partition with orthojit.DistributedMuon (ZeRO stages 1-3, each Muon "
                         "matrix orthogonalized whole by its owner), or use DistributedDataParallel")
    if type(p).__name__ == "DTensor" or (hasattr(p, "placements") and hasattr(p, "_local_tensor")):
        raise ValueError(f"{owner}: {_label(name)} is a DTensor (FSDP2's fully_shard or tensor parallelism): each rank holds a "
                         "shard, and Muon needs the whole matrix to orthogonalize it. Give the optimizer plain tensors (the unwrapped "
                         "model) and partition with orthojit.DistributedMuon, or use DistributedDataParallel")


def _state_device(p: torch.Tensor, key: str) -> torch.device:
    """Where a state tensor of ``p`` lives: step counts on the host, buffers with the parameter."""
    return torch.device("cpu") if key in ("step", "variant_step") else p.device


def _preset_name(preset: Any, owner: str) -> str:
    if not isinstance(preset, str):  # None gave a bare signature error
        raise TypeError(f"{owner}: preset must be a name from orthojit.muon_presets() (e.g. 'deepspeed'), got {preset!r}")
    return preset


def _setting_overrides(settings: Mapping[Any, Any], owner: str) -> Dict[str, Any]:
    for key in settings:
        if not isinstance(key, str):  # {3: 4} gave "std::bad_cast"
            raise TypeError(f"{owner}: settings keys are setting names (str, docs/muon.md), got {key!r}")
    return dict(settings)


def _label(name: str) -> str:
    return f"parameter '{name}'"


class Muon(torch.optim.Optimizer):
    """Hybrid Muon + AdamW with the runtime's presets (``orthojit.muon_presets()``; ``deepspeed``
    is the default; docs/muon.md has their formulas).

    Args:
        params: ``model.named_parameters()`` (names drive the tagging), a module, tensors, or
            param-group dicts. A group may hold tensors or ``(name, tensor)`` pairs (or give
            ``"param_names"``) and may set ``use_muon`` (True/False: the whole group), ``lr``,
            ``muon_lr`` / ``adam_lr`` (override ``lr`` in their part), ``momentum``,
            ``nesterov``, ``weight_decay``, ``betas``, ``eps``, and the matrix options
            ``layout`` ("auto" | "flatten" | "batch": experts as a batch | "trailing": DeepSpeed's
            and Keller's batch of trailing matrices, a 4-D filter as (out, in·kh·kw)), ``row_splits``
            (QKV split) and ``head_rows`` (per-head split). A group without ``use_muon`` is split
            by the tagging rule into a "muon-params" and an "adam-params" group (DeepSpeed's
            names; empty parts are dropped).
        preset: the starting point of every setting.
        lr: both groups' lr; ``muon_lr`` / ``adam_lr`` replace it in their group (DeepSpeed).
        momentum, nesterov: Muon's; betas, eps: AdamW's; weight_decay: both (decoupled).
        use_muon: explicit tags by parameter name, a mapping name -> bool or a callable
            (name, tensor) -> bool | None (None: the rule); wins over a group's ``use_muon``.
        matrix_options: per-name matrix options, e.g.
            ``{"attn.qkv.weight": {"row_splits": [q, k, v], "head_rows": 64},
            "moe.experts.w1": {"layout": "batch"}}``.
        settings: overrides of the runtime's settings, keys as in optimizer_settings.h
            (``{"muon.lr_adjust": "spectral", "muon.backend": "ref", "muon.precision": "f64",
            "adam.formula": "moonlight", "tensor_layout": "batch", "missing_grad": "skip",
            "tagging": "moonlight", "conv_scale": "matrix"}``).
        backend: the orthogonalization backend ("cpu", "cuda", "ref"); parameters stay in CPU
            memory either way.
        variant: ``"normuon"`` (NorMuon, arXiv 2510.05491) or ``"adamuon"`` (AdaMuon, arXiv
            2507.11005) rescale the orthogonalized update with a second moment (the setting
            ``muon.variant``, with ``muon.beta2``, ``muon.variant_eps``, ``muon.sign_momentum``;
            docs/muon.md); CPU parameters only. Default ``"muon"``.

    Unset hyperparameters come from the preset (after ``settings``); the values in
    ``param_groups`` are read at every step, so LR schedulers work. A NaN or infinity in any
    gradient skips the whole step (nothing changes); ``last_report`` says so. A parameter whose
    ``grad`` is None is skipped (``missing_grad`` "skip": moonlight, torch) or stepped with a zero
    gradient (``"zero"``: deepspeed, keller, whose code sets ``p.grad = torch.zeros_like(p)``;
    orthojit leaves ``p.grad`` as it is).
    """

    def __init__(
        self,
        params: Any,
        preset: str = "deepspeed",
        *,
        lr: Optional[float] = None,
        muon_lr: Optional[float] = None,
        adam_lr: Optional[float] = None,
        momentum: Optional[float] = None,
        nesterov: Optional[bool] = None,
        weight_decay: Optional[float] = None,
        betas: Optional[Tuple[float, float]] = None,
        eps: Optional[float] = None,
        use_muon: Union[None, Mapping[str, bool], Callable[[str, torch.Tensor], Optional[bool]]] = None,
        matrix_options: Optional[Mapping[str, Mapping[str, Any]]] = None,
        settings: Optional[Mapping[str, Any]] = None,
        backend: Optional[str] = None,
        variant: Optional[str] = None,
        _base_settings: Any = None,
    ):
        overrides = dict(settings or {})
        if backend is not None:
            overrides["muon.backend"] = backend
        if variant is not None:  # the setting muon.variant: "muon" | "normuon" | "adamuon"
            overrides["muon.variant"] = variant
        if _base_settings is not None:  # from_deepspeed_config: settings already read
            self._settings = _base_settings
            for key, value in overrides.items():
                self._settings.set(key, value)
        else:
            self._settings = _orthojit.MuonSettings(_preset_name(preset, "orthojit.Muon"), _setting_overrides(overrides, "orthojit.Muon"))
        if betas is not None and (not isinstance(betas, (tuple, list)) or len(betas) != 2):
            raise ValueError(f"orthojit.Muon: betas = {betas!r}; expected two numbers (beta1, beta2)")
        self._explicit = dict(lr=lr, muon_lr=muon_lr, adam_lr=adam_lr, momentum=momentum, nesterov=nesterov,
                              weight_decay=weight_decay, betas=betas, eps=eps)
        if use_muon is not None and not callable(use_muon) and not isinstance(use_muon, Mapping):
            raise TypeError("use_muon must be a mapping name -> bool or a callable (name, tensor) -> bool | None")
        self._use_muon = use_muon
        self._matrix_options = {k: dict(v) for k, v in (matrix_options or {}).items()}
        self._plans: Dict[int, Any] = {}  # id(param) -> MatrixPlan (Muon parameters)
        self._shapes: Dict[int, torch.Size] = {}  # id(param) -> its shape when added (what its plan and state are for)
        self._next_index = 0
        # Parameters stepped by the tensor path (orthojit/tensor_step.py): CUDA ones always; CPU
        # ones only when a test forces it (the same code then runs without a GPU).
        self._force_tensor_path = False
        # CUDA parameters: a step's compiled Muon steps captured once into a CUDA graph and
        # replayed (False: plain launches, e.g. to compare or to profile kernel by kernel).
        self.cuda_graphs = True
        self.steps_taken = 0
        self.last_report = StepReport()
        if isinstance(params, torch.nn.Module):
            params = params.named_parameters()
        super().__init__(params, {})
        # torch's schedulers read hyperparameters from defaults (OneCycleLR and CyclicLR cycle
        # "momentum" when it is there, and refuse an optimizer without it): the Muon group's.
        # Set after the groups are added, so that AdamW groups do not take Muon's keys.
        muon_defaults = self._defaults()["muon"]
        self.defaults = {key: muon_defaults[key] for key in ("lr", "momentum", "nesterov", "weight_decay")}
        unused = set(self._matrix_options) - {n for g in self.param_groups for n in g["param_names"]}
        if unused:
            raise ValueError(f"orthojit.Muon: matrix_options name parameters it was not given: {sorted(unused)}")

    def __getstate__(self):
        # torch.optim.Optimizer pickles only defaults, state and param_groups: a copy would have no
        # settings or matrix plans and fail at its first step. Refused here, where it is made.
        raise TypeError("orthojit.Muon cannot be pickled or deep-copied (torch.save(optimizer), copy.deepcopy); "
                        "save optimizer.state_dict() and load it with load_state_dict into a new orthojit.Muon")

    # ----------------------------------------------------------------------------- groups
    def _defaults(self) -> Dict[str, Any]:
        values = self._settings.values()
        e = self._explicit
        pick = lambda given, fallback: fallback if given is None else given  # noqa: E731
        return {
            "muon": {
                "lr": pick(e["muon_lr"], pick(e["lr"], values["muon.lr"])),
                "momentum": pick(e["momentum"], values["muon.momentum"]),
                "nesterov": pick(e["nesterov"], values["muon.nesterov"]),
                "weight_decay": pick(e["weight_decay"], values["muon.weight_decay"]),
            },
            "adam": {
                "lr": pick(e["adam_lr"], pick(e["lr"], values["adam.lr"])),
                "betas": tuple(pick(e["betas"], (values["adam.beta1"], values["adam.beta2"]))),
                "eps": pick(e["eps"], values["adam.eps"]),
                "weight_decay": pick(e["weight_decay"], values["adam.weight_decay"]),
            },
        }

    def add_param_group(self, param_group: Dict[str, Any]) -> None:
        """Adds a group; without ``use_muon`` it is split into its Muon and its AdamW part."""
        if not isinstance(param_group, dict):
            raise TypeError("param group must be a dict")
        group = dict(param_group)
        params = group.pop("params")
        if isinstance(params, torch.Tensor):
            params = [params]
        elif isinstance(params, set):
            raise TypeError("optimizer parameters need to be organized in ordered collections, but the ordering of "
                            "tensors in sets will change between runs. Please use a list instead.")
        params = list(params)
        names = group.pop("param_names", None)
        if names is None:
            names = group.pop("names", None)
        tensors: List[torch.Tensor] = []
        given: List[Optional[str]] = []
        for item in params:
            if isinstance(item, tuple) and len(item) == 2 and isinstance(item[0], str):
                given.append(item[0])
                tensors.append(item[1])
            else:
                given.append(None)
                tensors.append(item)
        if names is not None:
            names = list(names)
            if len(names) != len(tensors):
                raise ValueError(f"param_names has {len(names)} names for {len(tensors)} parameters")
        else:
            names = given
        for i, name in enumerate(names):
            if name is None:
                names[i] = f"params.{self._next_index}"
            self._next_index += 1
        for name, p in zip(names, tensors):
            self._check_parameter(name, p)
        # Refused before anything is added or planned (torch adds nothing when it refuses a group;
        # a refused AdamW part once left the Muon part added and a parameter's plan replaced).
        present = {id(p) for g in self.param_groups for p in g["params"]}
        present_names = {n for g in self.param_groups for n in g["param_names"]}
        seen: Dict[int, str] = {}
        seen_names = set()
        for name, p in zip(names, tensors):
            if id(p) in present or id(p) in seen:
                raise ValueError(f"orthojit.Muon: {_label(name)} is already a parameter of this optimizer"
                                 + (f" (as '{seen[id(p)]}' in this group)" if id(p) in seen else "")
                                 + "; some parameters appear in more than one parameter group")
            # Names key the state_dict's groups and the settings by name: two tensors under one
            # name would take each other's (the C++ optimizer refuses it too).
            if name in present_names or name in seen_names:
                raise ValueError(f"orthojit.Muon: two different tensors are named '{name}'; parameter names must be unique")
            seen[id(p)] = name
            seen_names.add(name)

        group_tag = group.pop("use_muon", None)
        if group_tag is not None and not isinstance(group_tag, bool):
            raise TypeError(f"orthojit.Muon: a param group's use_muon is {group_tag!r}; expected True, False or None (the tagging rule)")
        matrix = {k: group.pop(k) for k in _MATRIX_KEYS if k in group}
        defaults = self._defaults()
        parts = []
        for is_muon in (True, False):
            chosen = [(n, p) for n, p in zip(names, tensors) if self._tag(n, p, group_tag) == is_muon]
            if not chosen:  # empty groups are dropped (DeepSpeed)
                continue
            part = {k: v for k, v in group.items() if k not in (_ADAM_ONLY if is_muon else _MUON_ONLY)}
            lr = part.pop("muon_lr" if is_muon else "adam_lr", None)
            part.pop("adam_lr" if is_muon else "muon_lr", None)
            if lr is None:
                lr = part.get("lr")
            for key, value in defaults["muon" if is_muon else "adam"].items():
                part.setdefault(key, value)
            if lr is not None:
                part["lr"] = lr
            if "betas" in part:
                part["betas"] = tuple(part["betas"])
            part.setdefault("name", "muon-params" if is_muon else "adam-params")
            part["use_muon"] = is_muon
            part["params"] = [p for _, p in chosen]
            part["param_names"] = [n for n, _ in chosen]
            _check_group(part)
            if not is_muon:
                misplaced = sorted(n for n, _ in chosen if n in self._matrix_options)
                if misplaced:
                    raise ValueError(f"orthojit.Muon: matrix_options name {misplaced}, which are tagged AdamW (matrix options "
                                     "split Muon matrices); tag them Muon with use_muon, or drop their matrix options")
            parts.append(part)
        plans = {id(p): self._plan(n, p, matrix) for part in parts if part["use_muon"] for n, p in zip(part["param_names"], part["params"])}
        self._plans.update(plans)
        self._shapes.update({id(p): p.shape for p in tensors})
        # torch's add_param_group fills a group's missing keys from defaults (Muon's: above); each
        # part here already has its own, and an AdamW part must not take Muon's.
        defaults, self.defaults = self.defaults, {}
        try:
            for part in parts:
                super().add_param_group(part)
        finally:
            self.defaults = defaults

    def _check_parameter(self, name: str, p: Any) -> None:
        if not isinstance(p, torch.Tensor):
            raise TypeError(f"orthojit.Muon: {_label(name)} is a {type(p).__name__}, not a torch.Tensor")
        _check_not_sharded("orthojit.Muon", name, p)
        if p.dtype not in _PARAM_DTYPES:
            raise TypeError(f"orthojit.Muon: {_label(name)} has dtype {p.dtype}; the runtime updates "
                            "torch.float32, torch.bfloat16 and torch.float16 parameters")
        if p.device.type not in ("cpu", "cuda"):
            raise ValueError(f"orthojit.Muon: {_label(name)} is on {p.device}; orthojit steps parameters in CPU memory "
                             "or on CUDA devices")
        if p.layout != torch.strided or not (p.is_contiguous() or _channels_last(p)):
            raise ValueError(f"orthojit.Muon: {_label(name)} is not a contiguous dense tensor (contiguous, or a 4-D tensor in "
                             "torch.channels_last)")
        if p.device.type == "cuda":
            try:  # one device per process: the kernels, their caches and the context are that device's
                _orthojit.check_cuda_device(p.device.index if p.device.index is not None else torch.cuda.current_device())
            except ValueError as error:
                raise ValueError(f"orthojit.Muon: {_label(name)}: {error}") from None

    def _tag(self, name: str, p: torch.Tensor, group_tag: Optional[bool]) -> bool:
        tag = None
        if callable(self._use_muon):
            tag = self._use_muon(name, p)
        elif self._use_muon is not None:
            tag = self._use_muon.get(name)
        if tag is not None and not isinstance(tag, bool):  # bool("no") is True: a string would tag Muon
            raise TypeError(f"orthojit.Muon: use_muon gives {_label(name)} {tag!r}; expected True, False or None (the tagging rule)")
        if tag is None:
            tag = group_tag
        if tag is None:
            return bool(_orthojit.default_use_muon(name, list(p.shape), self._settings.values()["tagging"]))
        return tag

    def _check_channels_last_plan(self, name: str, p: torch.Tensor, plan: Any) -> None:
        """A channels_last filter is stepped in its memory order (_physical): right when its
        matrices are row blocks of one (out, in*kh*kw) matrix (the trailing and flatten layouts,
        row_splits, head_rows), not when a layout makes a batch of matrices out of it."""
        if _channels_last(p) and (plan.batch != 1 or plan.rows != p.shape[0]):
            raise ValueError(f"orthojit.Muon: {_label(name)} is channels_last, and its matrix plan ({plan.batch} x {plan.rows} x {plan.cols}) "
                             f"is not one ({p.shape[0]}, {p[0].numel()}) matrix: the layout 'batch' cuts its memory into matrices it does not "
                             "hold in this format. Use layout 'trailing' or 'flatten', or make the parameter contiguous")

    def _plan(self, name: str, p: torch.Tensor, group_matrix: Mapping[str, Any]):
        options = dict(group_matrix)
        options.update(self._matrix_options.get(name, {}))
        unknown = set(options) - set(_MATRIX_KEYS)
        if unknown:
            raise ValueError(f"orthojit.Muon: {_label(name)}: unknown matrix options {sorted(unknown)}; "
                             f"valid: {list(_MATRIX_KEYS)}")
        shape = list(p.shape) if p.dim() > 0 else [1]
        values = self._settings.values()
        plan = _orthojit.plan_matrices(name, shape, layout=str(options.get("layout", "auto")),
                                       row_splits=[int(r) for r in options.get("row_splits", [])],
                                       head_rows=int(options.get("head_rows", 0)),
                                       tensor_layout=values["tensor_layout"], conv_scale=values["conv_scale"])
        self._check_channels_last_plan(name, p, plan)
        return plan

    # ----------------------------------------------------------------------------- step
    @torch.no_grad()
    def step(self, closure: Optional[Callable[[], Any]] = None):
        """One step of every parameter with a gradient; returns the closure's loss (if any).
        A NaN or infinity in any gradient skips the whole step: see ``last_report``."""
        loss = None
        if closure is not None:
            with torch.enable_grad():
                loss = closure()
        report = StepReport()
        work = []
        values = self._settings.values()
        zero_missing = values["missing_grad"] == "zero"
        # Everything is checked before anything changes: the groups' hyperparameters (param_groups
        # may have been edited since they were added), the parameters' layouts (a model moved to
        # channels_last after construction), the gradients below.
        for group in self.param_groups:
            _check_group(group)
            for name, p in zip(group["param_names"], group["params"]):
                if id(p) not in self._shapes:  # a tensor put into param_groups by hand: no plan, no state
                    raise ValueError(f"orthojit.Muon: param group '{group.get('name', '?')}' holds a tensor at {_label(name)} that was not "
                                     "added to the optimizer (param_groups' parameters are fixed; add tensors with add_param_group); "
                                     "nothing was changed")
                if p.dtype not in _PARAM_DTYPES or not p.is_contiguous():  # what a model's .to() may change
                    self._check_parameter(name, p)  # raises, saying what is wrong
                    if group["use_muon"]:
                        self._check_channels_last_plan(name, p, self._plans[id(p)])
        for group in self.param_groups:
            for name, p in zip(group["param_names"], group["params"]):
                if not p.requires_grad:  # frozen: never touched (docs/muon.md), as the C++ optimizer
                    continue
                if p.grad is None:
                    report.without_gradient += 1
                    if zero_missing:  # DeepSpeed, Keller: zeros and the full step
                        work.append((group, name, p, torch.zeros(p.shape, dtype=torch.float32, device=p.device)))
                    continue
                g = p.grad
                if g.is_sparse:
                    raise RuntimeError(f"orthojit.Muon: {_label(name)} has a sparse gradient; Muon and AdamW need dense ones")
                work.append((group, name, p, _in_format_of(g.detach(), p)))
        for group, name, p, g in work:
            self._check_step_input(group, name, p, g)
        on_tensors, on_host = [], []
        for w in work:
            (on_tensors if w[2].device.type != "cpu" or self._force_tensor_path else on_host).append(w)
        for _, name, _, g in on_host:  # everything is checked before anything changes
            problem = _orthojit.find_nonfinite(_physical(g), name)
            if problem is not None:
                self.last_report = StepReport(skipped=True, reason=problem)
                return loss
        problem = _tensor_step.first_nonfinite([(name, g) for _, name, _, g in on_tensors])
        if problem is not None:
            self.last_report = StepReport(skipped=True, reason=problem)
            return loss
        variant = str(values["muon.variant"])
        if variant != "muon":
            name = next((n for group, n, _, _ in on_tensors if group["use_muon"]), None)
            if name is not None:
                raise ValueError(f"orthojit.Muon: {_label(name)} is on {on_tensors[0][2].device}: muon.variant = {variant} runs on CPU "
                                 "parameters only (the device path compiles the fused Muon step); move the Muon parameters to the CPU "
                                 "or use variant='muon'")
        # A tensor-path gradient moves to its parameter's device and memory format.
        on_tensors = [(group, name, p, _physical(_in_format_of(g.to(p.device), p))) for group, name, p, g in on_tensors]
        on_host = [(group, name, p, _physical(g)) for group, name, p, g in on_host]
        # Muon parameters step together, on the host and on devices alike: every block of every
        # parameter, grouped by shape and types into one compiled Muon step per group (the momentum
        # inside the first Newton-Schulz kernels, the update in the last one's epilogue). A model's
        # equal shapes (every layer's) run as one batch: on the CPU, whole rounds of one matrix per
        # core instead of a call per parameter with each small product split across the cores; on a
        # GPU, one launch sequence per shape and one CUDA graph per step. NorMuon / AdaMuon rescale
        # with whole-block reductions between Newton-Schulz and the update: per parameter, on the host.
        ema = values["muon.momentum_kind"] == "ema"
        fresh: Dict[torch.Tensor, torch.Tensor] = {}  # momentum buffers this step creates
        muon_items = []
        for group, name, p, g in (on_host + on_tensors if variant == "muon" else on_tensors):
            if not group["use_muon"]:
                continue
            buf = self.state.get(p, {}).get("momentum_buffer")
            if buf is None:
                buf = fresh[p] = torch.zeros_like(p, dtype=torch.float32)
            muon_items.append((self._plans[id(p)], _physical(p.detach()), g, _physical(buf), float(group["lr"]), float(group["momentum"]),
                               float(group["weight_decay"]), ema, bool(group["nesterov"])))
        # Every kernel the step runs is compiled before the first update (a compile that fails
        # leaves every parameter and state as it was).
        groups, stream = _tensor_step.group_muon_steps(muon_items, values["muon.lr_adjust"])
        _orthojit.muon_steps(self._settings, groups, stream, bool(self.cuda_graphs), run=False)
        for group, name, p, g in on_host:
            if group["use_muon"] and variant != "muon":
                _orthojit.muon_prepare(self._settings, self._plans[id(p)], _physical(p.detach()), g, name)
        for group, name, p, g in on_host + on_tensors:  # the state gains its entries in the parameters' order
            if p in fresh:
                self.state[p]["momentum_buffer"] = fresh[p]
            if group["use_muon"]:
                if variant != "muon":  # on the host (checked above)
                    state = self.state[p]
                    if "momentum_buffer" not in state:
                        state["momentum_buffer"] = torch.zeros_like(p, dtype=torch.float32)
                    report.orthogonalize_seconds += self._variant_update(group, name, p, g, state)
                continue
            self._adam_update(group, name, p, g, str(values["adam.formula"]), on_device=(p.device.type != "cpu" or self._force_tensor_path))
            report.adam_updated += 1
        started = time.perf_counter()
        _orthojit.muon_steps(self._settings, groups, stream, bool(self.cuda_graphs))
        report.orthogonalize_seconds += time.perf_counter() - started  # host time to enqueue (CUDA) or run (CPU)
        report.muon_updated += sum(1 for group, _, _, _ in work if group["use_muon"])
        # The updates went through raw memory, which autograd does not see: each counts as the
        # in-place change it is, so a graph that saved a parameter before the step fails in its
        # backward (as after torch's own optimizers) instead of silently using the new values.
        for _, _, p, _ in work:
            _count_in_place_change(p)
        self.steps_taken += 1
        self.last_report = report
        return loss

    def _check_step_input(self, group: Dict[str, Any], name: str, p: torch.Tensor, g: torch.Tensor) -> None:
        """Raises, before anything changes, when a parameter, its gradient or its state is not what
        the step reads: the runtime steps raw memory, so a shape that differs from the plan's (a
        parameter whose .data was replaced, a gradient or buffer of another size) would be read or
        written past its end."""
        shape = self._shapes[id(p)]
        if p.shape != shape:
            raise ValueError(f"orthojit.Muon: {_label(name)} has shape {tuple(p.shape)}, but it had {tuple(shape)} when it was added to the "
                             "optimizer (its matrix plan and state are for that shape); give a parameter new values in place "
                             "(p.data.copy_(...)), or build a new optimizer for the new shape. Nothing was changed")
        if g.shape != p.shape:
            raise ValueError(f"orthojit.Muon: {_label(name)}: its gradient has shape {tuple(g.shape)}, the parameter {tuple(p.shape)}; "
                             "nothing was changed")
        state = self.state.get(p)
        if not state:
            return
        expected = _expected_state(p, group["use_muon"], self._variant_state)
        present = [key for key in expected if key in state]
        if not group["use_muon"] and present and len(present) != len(expected):
            raise ValueError(f"orthojit.Muon: {_label(name)}: its AdamW state has {sorted(present)} of {sorted(expected)} (all or none); "
                             "nothing was changed")
        for key in present:
            problem = _state_problem(state[key], *expected[key], device=_state_device(p, key))
            if problem is None and key in ("step", "variant_step") and int(state[key]) < 0:
                problem = f"is {int(state[key])}, a negative step count"
            if problem is not None:
                raise ValueError(f"orthojit.Muon: {_label(name)}: state '{key}' {problem}; nothing was changed")

    def _adam_update(self, group: Dict[str, Any], name: str, p: torch.Tensor, g: torch.Tensor, formula: str, on_device: bool) -> None:
        """One AdamW step of p in place: the C++ update rules on host memory, the generated
        kernel (or the same rules) on the tensor path."""
        state = self.state[p]
        if "step" not in state:
            state["step"] = torch.zeros((), dtype=torch.int64)
            state["exp_avg"] = torch.zeros_like(p, dtype=torch.float32)
            state["exp_avg_sq"] = torch.zeros_like(p, dtype=torch.float32)
        beta1, beta2 = group["betas"]
        if on_device:
            _tensor_step.adam_step(self._settings, _physical(p), g, _physical(state["exp_avg"]), _physical(state["exp_avg_sq"]),
                                   int(state["step"]) + 1, float(group["lr"]), float(beta1), float(beta2), float(group["eps"]),
                                   float(group["weight_decay"]), formula)
        else:
            _orthojit.adam_update(self._settings, int(state["step"]) + 1, _physical(p.detach()), g, _physical(state["exp_avg"]),
                                  _physical(state["exp_avg_sq"]), float(group["lr"]), float(beta1), float(beta2), float(group["eps"]),
                                  float(group["weight_decay"]), name)
        state["step"] += 1

    def _variant(self) -> str:
        return str(self._settings.values()["muon.variant"])

    def _variant_state(self, p: torch.Tensor) -> Dict[str, Tuple[torch.dtype, Tuple[int, ...]]]:
        """The state a variant adds to a Muon parameter's momentum_buffer (runtime/muon/variant_state.h):
        NorMuon's per-row second moment, AdaMuon's per-element one and its step count."""
        variant = self._variant()
        if variant == "normuon":
            plan = self._plans[id(p)]
            return {"second_momentum_buffer": (torch.float32, (plan.batch * plan.rows, 1))}
        if variant == "adamuon":
            return {"v_buffer": (torch.float32, tuple(p.shape)), "variant_step": (torch.int64, ())}
        return {}

    def _variant_update(self, group: Dict[str, Any], name: str, p: torch.Tensor, g: torch.Tensor, state: Dict[str, Any]) -> float:
        for key, (dtype, shape) in self._variant_state(p).items():
            if key not in state:
                # p's shape: p's memory format too (a channels_last filter's per-element moment)
                state[key] = torch.zeros_like(p, dtype=dtype) if tuple(shape) == tuple(p.shape) else torch.zeros(shape, dtype=dtype)
        variant = self._variant()
        moment = state["second_momentum_buffer" if variant == "normuon" else "v_buffer"]
        step = int(state["variant_step"]) + 1 if variant == "adamuon" else 0
        seconds = _orthojit.muon_variant_update(self._settings, self._plans[id(p)], _physical(p.detach()), g, _physical(state["momentum_buffer"]),
                                                _physical(moment), step,
                                                float(group["lr"]), float(group["momentum"]), float(group["weight_decay"]),
                                                bool(group["nesterov"]), name)
        if variant == "adamuon":
            state["variant_step"] += 1
        return seconds

    @property
    def step_skipped(self) -> bool:
        """Whether the last step() was skipped for a non-finite gradient."""
        return self.last_report.skipped

    # ----------------------------------------------------------------------------- QK-clip
    def _resolve(self, which: Union[str, torch.Tensor]) -> Tuple[str, torch.Tensor]:
        for group in self.param_groups:
            for name, p in zip(group["param_names"], group["params"]):
                if (isinstance(which, str) and which == name) or (isinstance(which, torch.Tensor) and which is p):
                    return name, p
        if isinstance(which, str):
            raise ValueError(f"no optimized parameter named '{which}'")
        raise ValueError("QK-clip: the tensor is not a parameter of this optimizer")

    @torch.no_grad()
    def qk_clip(self, q_param: Union[str, torch.Tensor], k_param: Union[str, torch.Tensor], head_rows: int,
                s_max: Union[Sequence[float], torch.Tensor], tau: float) -> None:
        """QK-clip (MuonClip, Kimi K2), after a step: for each head h, gamma = min(1, tau / s_max[h])
        and head h's rows (head_rows each) of W_q and W_k are scaled by sqrt(gamma)."""
        q_name, q = self._resolve(q_param)
        k_name, k = self._resolve(k_param)
        if isinstance(s_max, torch.Tensor):
            s_max = s_max.detach().double().cpu().reshape(-1).tolist()
        if q.device.type != "cpu" or k.device.type != "cpu" or self._force_tensor_path:
            # On the device: the runtime's checks (check_qk_clip and the shapes), then the rows
            # scaled in place there.
            s_max = [float(s) for s in s_max]
            if not (tau > 0 and math.isfinite(tau)):
                raise ValueError("QK-clip: tau must be a positive number")
            if head_rows <= 0:
                raise ValueError("QK-clip: head_rows must be positive")
            if any(not math.isfinite(s) or s < 0 for s in s_max):
                raise ValueError("QK-clip: every S_max must be finite and >= 0")
            for name, tensor in ((q_name, q), (k_name, k)):
                if tensor.dim() < 2 or tensor.shape[0] % head_rows or tensor.shape[0] // head_rows != len(s_max):
                    raise ValueError(f"QK-clip: {_label(name)} {tuple(tensor.shape)} does not split into {len(s_max)} heads of {head_rows} rows")
            if q.data_ptr() == k.data_ptr():
                raise ValueError("QK-clip: W_q and W_k are the same tensor")
            for tensor in (q, k):
                _tensor_step.qk_clip(tensor, int(head_rows), [float(s) for s in s_max], float(tau))
            return
        _orthojit.qk_clip(q.detach(), k.detach(), int(head_rows), [float(s) for s in s_max], float(tau), q_name, k_name)

    # ----------------------------------------------------------------------------- state
    def state_dict(self) -> Dict[str, Any]:
        """torch's layout (state by parameter index, param_groups) with copies of the state
        tensors, plus ``orthojit`` (format, preset, steps_taken)."""
        packed = super().state_dict()
        packed["state"] = {k: {n: (v.clone() if isinstance(v, torch.Tensor) else copy.deepcopy(v)) for n, v in s.items()}
                           for k, s in packed["state"].items()}
        packed["param_groups"] = copy.deepcopy(packed["param_groups"])
        values = self._settings.values()
        packed["orthojit"] = {"format": _STATE_FORMAT, "preset": self._settings.preset, "steps_taken": self.steps_taken,
                              "momentum_kind": values["muon.momentum_kind"], "muon_variant": values["muon.variant"]}
        return packed

    def load_state_dict(self, state_dict: Dict[str, Any]) -> None:
        """Loads a state_dict() (this optimizer's or orthojit.DistributedMuon's, of any world size)
        bit-exactly: f32 state stays f32 (torch's own load casts it to the parameter's dtype).
        Every group, name, shape and dtype is checked before anything changes."""
        matched, new_groups, meta = _match_saved_state(self.param_groups, state_dict, self._variant(), self._variant_state,
                                                      self._settings.values()["muon.momentum_kind"])
        self._install_state(matched, new_groups, meta, lambda p, key, value: value.detach().to(_state_device(p, key)).clone())

    def _install_state(self, matched: Dict[torch.Tensor, Dict[str, torch.Tensor]], new_groups: List[Dict[str, Any]], meta: Dict[str, Any],
                       place: Callable[[torch.Tensor, str, torch.Tensor], torch.Tensor], check: Optional[Callable[[], None]] = None) -> None:
        """Replaces the state by ``place(p, key, saved)`` for every matched tensor (a new tensor on
        the parameter's device, in its memory format) and the groups by ``new_groups``, once
        ``check()`` (when given) has passed on the new state: what it raises changes nothing."""
        state: Dict[Any, Dict[str, Any]] = defaultdict(dict)
        for p, values in matched.items():
            for key, value in values.items():
                value = place(p, key, value)
                state[p][key] = _in_format_of(value, p) if value.shape == p.shape else value.contiguous()
        if check is not None:
            check()
        self.__setstate__({"state": state, "param_groups": new_groups})
        self.steps_taken = int(meta.get("steps_taken", 0))

    def save_state(self, path: Union[str, "os.PathLike[str]"], progress: Union[bool, Callable[[str, int, int], None], None] = False) -> None:
        """Writes the state to the safetensors file ``path``, atomically: the C++ optimizers' state
        file (docs/muon.md "State": ``<name>.momentum_buffer``, ``.exp_avg``, ``.exp_avg_sq``,
        ``.step``, a variant's buffers, the SHA-256 of the data) with the param_groups'
        hyperparameters in its metadata. It loads into orthojit.Muon (``load_state``), into an
        orthojit.DistributedMuon of any world size, stage or mode, and into the C++ and C
        optimizers. A parameter not yet stepped is saved as zeros (its state's starting value).
        ``progress``: True for a progress line on stderr, or a callable ``progress(phase, done,
        total)`` (orthojit.file_progress: phases "write" and "sync", in bytes); what it raises
        stops the save and leaves ``path`` as it was."""
        groups = _json_groups(self.param_groups)
        values = self._settings.values()
        metadata = {"orthojit.format": _STATE_FORMAT, "orthojit.preset": self._settings.preset, "orthojit.steps_taken": str(int(self.steps_taken)),
                    "orthojit.momentum_kind": values["muon.momentum_kind"], "orthojit.momentum": repr(float(values["muon.momentum"])),
                    "orthojit.muon_variant": values["muon.variant"], _GROUPS_KEY: groups}
        # Tensor by tensor: a CUDA state tensor is copied to the host alone, so the host holds
        # one state tensor at a time (a CPU one in f32 and contiguous is written from its memory).
        layout, sources = [], []
        for group in self.param_groups:
            for name, p in zip(group["param_names"], group["params"]):
                expected = {"momentum_buffer": (torch.float32, tuple(p.shape))} if group["use_muon"] else \
                    {"exp_avg": (torch.float32, tuple(p.shape)), "exp_avg_sq": (torch.float32, tuple(p.shape)), "step": (torch.int64, ())}
                if group["use_muon"]:
                    expected.update(self._variant_state(p))
                for key, (dtype, shape) in expected.items():
                    layout.append((f"{name}.{key}", "F32" if dtype == torch.float32 else "I64", list(shape)))
                    sources.append((p, key, dtype, shape))
        with file_progress(progress, f"saving {os.fspath(path)}") as report:
            writer = _orthojit.StateFileWriter(os.fspath(path), layout, metadata, report)
            try:
                for (tensor_name, _, _), (p, key, dtype, shape) in zip(layout, sources):
                    value = self.state.get(p, {}).get(key)
                    value = torch.zeros(shape, dtype=dtype) if value is None else torch.as_tensor(value)
                    value = value.detach().to("cpu", dtype).reshape(shape).contiguous()
                    writer.write(tensor_name, value.data_ptr(), value.numel() * value.element_size())
                writer.commit()
            finally:
                # A writer left uncommitted removes its temporary file when it goes: now, not when
                # a traceback that holds this frame (an interrupted save at a prompt) lets go.
                del writer

    def load_state(self, path: Union[str, "os.PathLike[str]"], progress: Union[bool, Callable[[str, int, int], None], None] = False) -> None:
        """Loads a state file of ``save_state``, of orthojit.DistributedMuon.save_state (any world
        size) or of the C++ and C optimizers (whose files carry no param_groups: the groups then
        keep their hyperparameters), bit-exactly, under load_state_dict's checks; the file's
        checksum is verified before anything changes. The file is read once, tensor by tensor, into
        a new state (a CPU state tensor directly, a CUDA one through one host tensor at a time),
        which replaces the old one when the checksum matches. ``progress``: as save_state's
        (phase "read"; "checksum" for what was not read in the file's order); what it raises
        stops the load with nothing changed."""
        path = os.fspath(path)
        with file_progress(progress, f"loading {path}") as report:
            self._load_state_file(path, _orthojit.StateFileReader(path, report))

    def _load_state_file(self, path: str, reader: Any) -> None:
        metadata, listed = reader.metadata, reader.tensors
        names = {name for group in self.param_groups for name in group["param_names"]}
        saved_groups = _saved_groups(metadata, self.param_groups)
        index_of = {name: index for group in saved_groups for index, name in zip(group["params"], group.get("param_names", []))}
        # The checks run on shapes alone (meta tensors hold no memory); then the tensors are read,
        # in the file's order, into a new state, hashed as they are read (one pass over the file,
        # where a checksum pass first would read it twice); the new state replaces the old one
        # only when the whole file's checksum matches.
        state: Dict[int, Dict[str, torch.Tensor]] = defaultdict(dict)
        dtypes = {"F32": torch.float32, "I64": torch.int64}
        for tensor_name, dtype, shape in listed:
            name, _, key = tensor_name.rpartition(".")
            if name not in names or name not in index_of:
                raise ValueError(f"optimizer state {path} does not match this optimizer: it holds state for '{name}', "
                                 "which this optimizer does not have; nothing was loaded")
            if dtype not in dtypes:
                raise ValueError(f"optimizer state {path}: '{tensor_name}' is {dtype}; a state file holds F32 and I64; nothing was loaded")
            state[index_of[name]][key] = torch.empty(shape, dtype=dtypes[dtype], device="meta")
        matched, new_groups, meta = _match_saved_state(self.param_groups, {"state": dict(state), "param_groups": saved_groups, "orthojit": _file_meta(metadata)},
                                                      self._variant(), self._variant_state, self._settings.values()["muon.momentum_kind"])
        name_of_param = {p: name for group in self.param_groups for name, p in zip(group["param_names"], group["params"])}

        def read(p: torch.Tensor, key: str, saved: torch.Tensor) -> torch.Tensor:
            host = torch.empty(saved.shape, dtype=saved.dtype)
            reader.read(f"{name_of_param[p]}.{key}", host.data_ptr(), host.numel() * host.element_size())
            return host.to(_state_device(p, key))

        self._install_state(matched, new_groups, meta, read, check=reader.verify_checksum)

    # ----------------------------------------------------------------------------- DeepSpeed
    @classmethod
    def from_deepspeed_config(cls, named_parameters: Any, config: Union[str, "os.PathLike[str]", Mapping[str, Any]], *,
                              strict: bool = False, **kwargs: Any) -> "Muon":
        """An optimizer configured as DeepSpeed reads ``config``: a path to a JSON file, JSON text,
        or a dict; the whole DeepSpeed config or only its ``"optimizer"`` section
        (``{"type": "muon", "params": {...}}``). The settings come from ``optimizer.params``
        (runtime/muon/deepspeed_config.h: lr, muon_lr, adam_lr, momentum, weight_decay,
        ns_method, betas, eps, nesterov, and orthojit's own keys). DeepSpeed ignores keys it does
        not know, and so does this: each ignored key is named in a warning with the keys valid
        at its place; ``strict=True`` makes it a ValueError. ``kwargs`` go to :class:`Muon`
        (``settings=`` overrides apply on top of the config)."""
        data, origin = _read_deepspeed_config(config)
        for key in ("preset", "_base_settings"):
            if key in kwargs:
                raise TypeError(f"from_deepspeed_config takes the preset from the config (optimizer.params.orthojit_preset), not {key}=")
        base = _deepspeed_settings(data, origin, strict)
        return cls(named_parameters, preset=base.preset, _base_settings=base, **kwargs)

    # ----------------------------------------------------------------------------- info
    @property
    def settings(self) -> Dict[str, Any]:
        """The runtime settings (preset plus overrides); group hyperparameters live in param_groups."""
        return self._settings.values()

    def describe(self) -> str:
        return self._settings.describe()

    def parameter_info(self) -> List[Dict[str, Any]]:
        """One dict per parameter: name, shape, muon, plan (Muon: MatrixPlan), group, state_bytes."""
        info = []
        for group in self.param_groups:
            for name, p in zip(group["param_names"], group["params"]):
                muon = group["use_muon"]
                info.append({"name": name, "shape": tuple(p.shape), "muon": muon, "plan": self._plans.get(id(p)),
                             "group": group.get("name"), "state_bytes": p.numel() * (4 if muon else 8)})
        return info

    def state_bytes(self) -> Dict[str, int]:
        """Optimizer state bytes per group (Muon 4 per element, AdamW 8) and in total."""
        muon = sum(i["state_bytes"] for i in self.parameter_info() if i["muon"])
        adam = sum(i["state_bytes"] for i in self.parameter_info() if not i["muon"])
        return {"muon": muon, "adam": adam, "total": muon + adam}


def _read_deepspeed_config(config: Any) -> Tuple[Dict[str, Any], str]:
    """(the config as a dict, where it came from) from a path, JSON text or a dict; the optimizer
    section alone is taken as {"optimizer": section}."""
    origin = "the DeepSpeed configuration"
    if isinstance(config, Mapping):
        data: Any = dict(config)
    elif isinstance(config, (str, os.PathLike)):
        text = os.fspath(config)
        if text.lstrip().startswith(("{", "[")):  # JSON text (an array is refused below as not an object)
            try:
                data = _json.loads(text)
            except ValueError as error:
                raise ValueError(f"the DeepSpeed configuration text is not valid JSON: {error}") from None
        else:
            if os.path.isdir(text):
                raise ValueError(f"DeepSpeed configuration {text!r} is a directory; give the path of its JSON file")
            if not os.path.isfile(text):
                raise FileNotFoundError(f"DeepSpeed configuration {text!r}: no such file (give a path, JSON text or a dict)")
            origin = text
            with open(text, "r", encoding="utf-8") as f:
                try:
                    data = _json.load(f)
                except ValueError as error:
                    raise ValueError(f"{text}: not valid JSON: {error}") from None
    else:
        raise TypeError(f"config must be a path, JSON text or a dict, not {type(config).__name__}")
    if not isinstance(data, dict):
        raise ValueError(f"{origin}: expected a JSON object, found {type(data).__name__}")
    if "optimizer" not in data and "type" in data:
        data = {"optimizer": data}  # the optimizer section alone
    return data, origin


def _deepspeed_settings(data: Dict[str, Any], origin: str, strict: bool) -> Any:
    """The MuonSettings of a config's optimizer section; each ignored key named in a warning."""
    if not isinstance(strict, bool):  # bool("no") is True
        raise TypeError(f"strict must be True or False, got {strict!r}")
    base, ignored = _orthojit.deepspeed_settings(_json.dumps(data), bool(strict), origin)
    for path, valid in ignored:
        warnings.warn(f"{origin}: ignored unknown key {path} (DeepSpeed ignores it too; strict=True refuses it); "
                      f"valid keys there: {valid}", UserWarning, stacklevel=3)
    return base


# The state file's metadata key of the param_groups (hyperparameters and names, as JSON), next to
# the C++ state file's own keys: written by Muon.save_state and DistributedMuon.save_state.
_GROUPS_KEY = "orthojit.python.param_groups"


def _json_groups(param_groups: List[Dict[str, Any]]) -> str:
    """The groups without their tensors, as JSON: every value a number, string, bool, None or a
    list/tuple of them (a 0-d tensor becomes its number). Raises ValueError naming anything else."""
    def plain(value: Any, where: str) -> Any:
        if isinstance(value, torch.Tensor) and value.dim() == 0:
            return value.item()
        if value is None or isinstance(value, (bool, int, float, str)):
            return value
        if isinstance(value, (list, tuple)):
            return [plain(item, where) for item in value]
        raise ValueError(f"save_state: param_groups value {where} is a {type(value).__name__}, which a state file cannot hold "
                         "(numbers, strings, bools, None and lists of them); use state_dict() and torch.save for it")
    return _json.dumps([{key: plain(value, f"{key!r} of group {i}") for key, value in group.items() if key != "params"}
                        for i, group in enumerate(param_groups)])


def _saved_groups(metadata: Dict[str, str], groups: List[Dict[str, Any]]) -> List[Dict[str, Any]]:
    """A state file's param_groups in state_dict form (params numbered in order), or, for a file
    without them (the C++ and C optimizers'), these groups' own hyperparameters."""
    if _GROUPS_KEY in metadata:
        saved = _json.loads(metadata[_GROUPS_KEY])
    else:
        saved = [{key: copy.deepcopy(value) for key, value in group.items() if key != "params"} for group in groups]
    index = 0
    for group in saved:
        group["params"] = list(range(index, index + len(group.get("param_names", []))))
        index += len(group["params"])
        if isinstance(group.get("betas"), list):
            group["betas"] = tuple(group["betas"])
    return saved


def _file_meta(metadata: Dict[str, str]) -> Dict[str, Any]:
    """A state file's metadata as a state_dict's "orthojit" record."""
    steps = metadata.get("orthojit.steps_taken", "0")
    return {"format": metadata.get("orthojit.format", ""), "preset": metadata.get("orthojit.preset", ""),
            "momentum_kind": metadata.get("orthojit.momentum_kind", ""), "muon_variant": metadata.get("orthojit.muon_variant", "muon"),
            "steps_taken": int(steps) if steps.isdigit() else 0}


# State that only grows from zero: step counts and second moments (sums of squares).
_NONNEGATIVE_STATE = ("step", "variant_step", "exp_avg_sq", "second_momentum_buffer", "v_buffer")


def _expected_state(p: torch.Tensor, is_muon: bool,
                    variant_state: Callable[[torch.Tensor], Dict[str, Tuple[torch.dtype, Tuple[int, ...]]]]) -> Dict[str, Tuple[torch.dtype, torch.Size]]:
    """The state a parameter has once stepped: each key's dtype and shape."""
    if not is_muon:
        return {"exp_avg": (torch.float32, p.shape), "exp_avg_sq": (torch.float32, p.shape), "step": (torch.int64, torch.Size([]))}
    expected = {"momentum_buffer": (torch.float32, p.shape)}
    for key, (dtype, shape) in variant_state(p).items():
        expected[key] = (dtype, torch.Size(shape))
    return expected


def _state_problem(value: Any, dtype: torch.dtype, shape: torch.Size, device: Optional[torch.device] = None, values: bool = False,
                   nonnegative: bool = False) -> Optional[str]:
    """What is wrong with one state tensor ("is float64 (4, 4), expected ..."), or None. The
    dtype, shape and device are checked at every step; the values (finite, and >= 0 for counts
    and second moments) only when a state is loaded: a pass over the whole state."""
    if not isinstance(value, torch.Tensor) or value.dtype != dtype or value.shape != shape:
        what = f"{value.dtype} {tuple(value.shape)}" if isinstance(value, torch.Tensor) else f"a {type(value).__name__}"
        return f"is {what}, expected {dtype} {tuple(shape)}"
    if device is not None and value.device != device:
        return f"is on {value.device}, expected {device}"
    values = values and value.device.type != "meta"  # a state file's tensors, matched before they are read (their checksum covers them)
    if values and value.is_floating_point() and not bool(torch.isfinite(value).all()):
        return "holds a NaN or an infinity"
    if values and nonnegative and bool((value < 0).any()):
        return "holds a negative value (a step count or a second moment is never negative)"
    return None


def _match_saved_state(groups: List[Dict[str, Any]], state_dict: Dict[str, Any], variant: str,
                      variant_state: Callable[[torch.Tensor], Dict[str, Tuple[torch.dtype, Tuple[int, ...]]]],
                      momentum_kind: str) -> Tuple[Dict[torch.Tensor, Dict[str, torch.Tensor]], List[Dict[str, Any]], Dict[str, Any]]:
    """Checks a saved state_dict (orthojit.Muon's or orthojit.DistributedMuon's: the same layout)
    against an optimizer's ``groups`` and returns, changing nothing: each parameter's saved
    state tensors (as saved; parameters without an entry are left out), the groups with the saved
    hyperparameters and this optimizer's parameters, and the ``orthojit`` metadata. Raises
    ValueError saying what does not match."""
    problem = lambda what: ValueError(f"optimizer state does not match this optimizer: {what}; nothing was loaded")  # noqa: E731
    if not isinstance(state_dict, Mapping) or not isinstance(state_dict.get("state"), Mapping) or \
            not isinstance(state_dict.get("param_groups"), (list, tuple)):
        given = sorted(map(str, state_dict)) if isinstance(state_dict, Mapping) else f"a {type(state_dict).__name__}"
        raise ValueError(f"optimizer state must be a dict with 'state' (a dict) and 'param_groups' (a list), as state_dict() returns; "
                         f"got {given}; nothing was loaded")
    saved_groups = state_dict["param_groups"]
    for i, saved in enumerate(saved_groups):
        if not isinstance(saved, Mapping) or not isinstance(saved.get("params"), (list, tuple)):
            raise problem(f"param_groups[{i}] is not a dict with a list 'params'")
    meta = state_dict.get("orthojit", {})
    if not isinstance(meta, Mapping) or (isinstance(meta.get("steps_taken", 0), bool) or not isinstance(meta.get("steps_taken", 0), int)
                                         or meta.get("steps_taken", 0) < 0):
        raise problem(f"its 'orthojit' entry {meta!r} is not a dict with a whole number steps_taken >= 0")
    if len(groups) != len(saved_groups):
        raise problem(f"it has {len(saved_groups)} parameter groups, this optimizer {len(groups)}")
    saved_variant = str(state_dict.get("orthojit", {}).get("muon_variant", "muon"))
    if saved_variant != variant and any(g["use_muon"] for g in groups):
        raise ValueError(f"the optimizer state was saved by the Muon variant '{saved_variant}' but this optimizer runs "
                         f"'{variant}' (their second-moment state differs); nothing was loaded. Load it with "
                         f"variant='{saved_variant}' (the setting muon.variant)")
    index_to_param: Dict[Any, Tuple[str, torch.Tensor, bool]] = {}
    for i, (group, saved) in enumerate(zip(groups, saved_groups)):
        if len(group["params"]) != len(saved["params"]):
            raise problem(f"group {i} has {len(saved['params'])} parameters, this optimizer's {len(group['params'])}")
        if "use_muon" in saved and bool(saved["use_muon"]) != group["use_muon"]:
            raise problem(f"group {i} is {'Muon' if saved['use_muon'] else 'AdamW'} there, "
                          f"{'Muon' if group['use_muon'] else 'AdamW'} here")
        saved_names = saved.get("param_names")
        for j, (index, name, p) in enumerate(zip(saved["params"], group["param_names"], group["params"])):
            if saved_names is not None and saved_names[j] != name:
                raise problem(f"group {i} position {j} is '{saved_names[j]}' there, '{name}' here")
            index_to_param[index] = (name, p, group["use_muon"])
    matched: Dict[torch.Tensor, Dict[str, torch.Tensor]] = {}
    for index, values in state_dict["state"].items():
        if index not in index_to_param:
            raise problem(f"it holds state for parameter index {index!r}, which this optimizer does not have")
        name, p, is_muon = index_to_param[index]
        if not values:  # an entry made by reading opt.state[p] of a parameter not yet stepped
            continue
        expected = _expected_state(p, is_muon, variant_state)
        if not isinstance(values, Mapping) or set(values) != set(expected):
            held = sorted(values) if isinstance(values, Mapping) else f"a {type(values).__name__}"
            raise problem(f"{_label(name)} has state {held}, expected {sorted(expected)} "
                          f"(muon.variant = {variant}; a state saved under another variant holds other buffers)")
        for key, (dtype, shape) in expected.items():
            what = _state_problem(values[key], dtype, shape, values=True, nonnegative=key in _NONNEGATIVE_STATE)
            if what is not None:
                raise problem(f"'{name}.{key}' {what}")
        matched[p] = dict(values)
    new_groups = []
    for group, saved in zip(groups, saved_groups):
        merged = copy.deepcopy({k: v for k, v in saved.items() if k != "params"})
        merged["params"] = group["params"]
        merged["param_names"] = group["param_names"]
        merged["use_muon"] = group["use_muon"]
        try:
            _check_group(merged, owner="the saved param_groups")
        except ValueError as error:
            raise ValueError(f"{error}; nothing was loaded") from None
        new_groups.append(merged)
    if any(g["use_muon"] for g in groups) and meta:
        saved_kind = _orthojit.saved_momentum_kind(str(meta.get("format", "")), str(meta.get("preset", "")),
                                                   str(meta.get("momentum_kind", "")))
        if saved_kind != momentum_kind:
            raise ValueError(_orthojit.momentum_mismatch_message("the optimizer state", str(meta.get("format", "")), saved_kind, momentum_kind))
    return matched, new_groups, meta


def convert_momentum_state(state_dict: Dict[str, Any], to: str, momentum: float) -> Dict[str, Any]:
    """A copy of an :meth:`Muon.state_dict` with every ``momentum_buffer`` converted to the
    momentum form ``to`` ("ema" or "sum"). The forms satisfy M_t = (1 - beta) * B_t for the EMA
    M and the sum B after the same gradients with a constant ``momentum`` beta, so the buffer is
    multiplied by that factor (in float64, rounded once to float32); under a momentum schedule no
    conversion is exact. Use it for states saved by the keller preset before it followed the
    current KellerJordan/Muon (format 1: the sum form)."""
    meta = dict(state_dict.get("orthojit", {}))
    saved = _orthojit.saved_momentum_kind(str(meta.get("format", "")), str(meta.get("preset", "")), str(meta.get("momentum_kind", "")))
    factor = _orthojit.momentum_conversion_factor(saved, to, float(momentum))
    converted = dict(state_dict)
    converted["state"] = {k: {n: ((v.double() * factor).float() if n == "momentum_buffer" else
                                  (v.clone() if isinstance(v, torch.Tensor) else copy.deepcopy(v))) for n, v in s.items()}
                          for k, s in state_dict["state"].items()}
    converted["param_groups"] = copy.deepcopy(state_dict["param_groups"])
    meta.update(format=_STATE_FORMAT, momentum_kind=to)
    converted["orthojit"] = meta
    return converted
