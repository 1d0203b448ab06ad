"""The Muon + AdamW step on tensors where they live (CUDA parameters, gradients and state), for
orthojit.Muon (muon.py).

Everything stays on the parameter's device and runs on torch's current stream. A Muon parameter's
whole update is a compiled Muon step (compiler/ir/muon_step.h): the momentum and Nesterov are
computed inside the first Newton-Schulz kernels and the update p <- p(1 - lr wd) - lr s O is
written by the last one's epilogue, in p's dtype, so the step of one matrix is the Newton-Schulz
launches and nothing else. Blocks of equal shape across the step's parameters (layers, heads,
experts, QKV parts) form one batched launch sequence, and a step's sequences are one CUDA graph,
captured once and replayed (the addresses and scalars live in an argument block uploaded before
each replay). AdamW's element-wise step is a generated kernel too (elementwise_codegen.h). Host
memory is touched only for scalars: the hyperparameters and one flag that says whether any
gradient is non-finite (the step must be skipped before anything changes, which costs one stream
synchronization per step).

The element-wise arithmetic is float64 in the order the C++ update rules use
(runtime/muon/update_rules.cpp), rounded once to the f32 state and once to the parameter's dtype,
so a CUDA step computes what a CPU step computes up to the Newton-Schulz kernels' rounding (the
generated step is checked bit for bit against the separate rules in the host emulation,
tests/cuda_muon_step_test.cpp). The same code runs on CPU tensors (host addresses, the settings'
host backend compiling the same Muon step), which is how the grouping, the addresses of blocks
and splits, and the state handling are tested without a GPU (tests/python/test_muon.py).
"""

from __future__ import annotations

import math
from collections import OrderedDict
from typing import Any, List, Optional, Sequence, Tuple

import torch

from . import _orthojit


def first_nonfinite(items: Sequence[Tuple[str, torch.Tensor]]) -> Optional[str]:
    """None when every gradient is finite, else the report the C++ step gives for the first bad
    element. One device-to-host flag for all tensors; the element is located only on failure."""
    if not items:
        return None
    flags = torch.stack([torch.isfinite(g).all() for _, g in items])
    if bool(flags.all()):  # the one synchronization of a step
        return None
    for name, g in items:
        bad = (~torch.isfinite(g)).reshape(-1).nonzero()
        if bad.numel():
            index = int(bad[0])
            value = float(g.reshape(-1)[index])
            return (f"parameter '{name}': gradient element {index} is {'NaN' if math.isnan(value) else 'infinite'}; "
                    "the step was skipped and no parameter or state changed")
    return None


def _stream(device: torch.device) -> int:
    return int(torch.cuda.current_stream(device).cuda_stream)


_DTYPES = {torch.float32: "f32", torch.bfloat16: "bf16", torch.float16: "f16"}


def _dtype_name(t: torch.Tensor, what: str) -> str:
    if t.dtype not in _DTYPES:
        raise TypeError(f"{what}: expected float32, bfloat16 or float16, got {t.dtype}")
    return _DTYPES[t.dtype]


MuonItem = Tuple[Any, torch.Tensor, torch.Tensor, torch.Tensor, float, float, float, bool, bool]


def group_muon_steps(items: List[MuonItem], adjust: str) -> Tuple[List[Tuple[Any, ...]], int]:
    """The groups of a step's compiled Muon steps, and the CUDA stream they run on (0: none), for
    every (plan, p, g, momentum_buffer, lr, beta, weight_decay, ema, nesterov) item: M and p will
    change in place by one compiled Muon step per group of equal blocks (compiler/ir/muon_step.h:
    the momentum inside the first Newton-Schulz kernels, the update in the last one's epilogue).
    Blocks of equal (rows, cols, dtypes, momentum form) across all items form one batched group;
    the addresses of each block's first elements and its scalars (beta, lr*s, 1 - lr*wd) are
    arguments, so a schedule never recompiles. The tensors must stay alive until the groups ran."""
    groups: "OrderedDict[Tuple[Any, ...], List[Tuple[int, int, int, float, float, float]]]" = OrderedDict()
    stream = 0
    checked = set()
    for plan, p, g, buf, lr, beta, weight_decay, ema, nesterov in items:
        device = p.device.type == "cuda"
        if device:
            if p.device not in checked:  # raw addresses follow: the device must be orthojit's
                _orthojit.check_cuda_device(p.device.index if p.device.index is not None else torch.cuda.current_device())
                checked.add(p.device)
            stream = _stream(p.device)
        if not (p.is_contiguous() and g.is_contiguous() and buf.is_contiguous()):
            raise ValueError("the parameter, its gradient and momentum_buffer must be contiguous")
        if buf.dtype != torch.float32 or buf.device != p.device or g.device != p.device:
            raise ValueError("momentum_buffer must be float32 on the parameter's device, and the gradient there too")
        grad_type, param_type = _dtype_name(g, "the gradient"), _dtype_name(p, "the parameter")
        gp, mp, pp = g.data_ptr(), buf.data_ptr(), p.data_ptr()
        gs, ps = g.element_size(), p.element_size()
        decay = 1.0 - lr * weight_decay
        override = plan.scale_shape
        for offset, height in plan.blocks:
            rows, cols = override if override is not None else (height, plan.cols)
            step = lr * _orthojit.lr_scale(adjust, int(rows), int(cols))
            key = (device, int(height), int(plan.cols), grad_type, param_type, bool(ema), bool(nesterov))
            entries = groups.setdefault(key, [])
            for z in range(plan.batch):
                first = z * plan.rows * plan.cols + offset * plan.cols
                entries.append((gp + first * gs, mp + first * 4, pp + first * ps, float(beta), float(step), float(decay)))
    return [key + (entries,) for key, entries in groups.items()], stream


def adam_step(settings: Any, p: torch.Tensor, g: torch.Tensor, exp_avg: torch.Tensor, exp_avg_sq: torch.Tensor, step: int, lr: float,
              beta1: float, beta2: float, eps: float, weight_decay: float, formula: str) -> None:
    """One AdamW step in place (update_rules.cpp adam_step), float64 arithmetic, one rounding each."""
    if p.is_cuda:
        _orthojit.device_adam(settings, int(step), p.detach(), g.contiguous(), exp_avg, exp_avg_sq, float(lr), float(beta1), float(beta2),
                              float(eps), float(weight_decay), _stream(p.device))
        return
    g64 = g.to(torch.float32).to(torch.float64)
    m64, v64 = exp_avg.to(torch.float64), exp_avg_sq.to(torch.float64)
    exp_avg.copy_(m64 + (1.0 - beta1) * (g64 - m64))
    exp_avg_sq.copy_(v64 + (1.0 - beta2) * (g64 * g64 - v64))
    m, v = exp_avg.to(torch.float64), exp_avg_sq.to(torch.float64)
    bias1, bias2 = 1.0 - beta1 ** step, 1.0 - beta2 ** step
    if formula == "standard":
        delta = lr * (m / bias1) / (torch.sqrt(v / bias2) + eps)
    else:
        delta = (lr * math.sqrt(bias2) / bias1) * (m / (eps + torch.sqrt(v)))
    data = p.detach()
    data.copy_(data.to(torch.float64) * (1.0 - lr * weight_decay) - delta)


def qk_clip(tensor: torch.Tensor, head_rows: int, s_max: Sequence[float], tau: float) -> None:
    """Head h's rows scaled by sqrt(tau / s_max[h]) where s_max[h] > tau, one rounding; heads at
    or below tau untouched (update_rules.cpp qk_clip_rows)."""
    data = tensor.detach()
    heads = data.reshape(len(s_max), head_rows, -1)
    for head, s in enumerate(s_max):
        if s > tau:
            heads[head].copy_(heads[head].to(torch.float64) * math.sqrt(tau / s))
