"""The Muon + AdamW step on tensors where they live (CUDA parameters, gradients and state), for
orthojit.Muon (muon.py).

Everything stays on the parameter's device and runs on torch's current stream: the element-wise
parts are orthojit's generated kernels (compiler/cuda/elementwise_codegen.h: momentum and
Nesterov in one launch, the update in one, AdamW in one), and Newton-Schulz is orthojit's CUDA
kernels, all launched on that stream through DLPack device pointers (no copy, no
synchronization). Blocks of equal shape across the step's parameters (layers, heads, experts,
QKV parts) are orthogonalized in one batched launch. Host memory is touched only for scalars:
the hyperparameters and one flag that says whether any gradient is non-finite (the step must be
skipped before anything changes, which costs one stream synchronization per step).

The element-wise arithmetic is float64 in the order the C++ update rules use
(runtime/muon/update_rules.cpp), rounded once to the f32 state and once to the parameter's dtype,
so a CUDA step computes what a CPU step computes up to the Newton-Schulz kernels' rounding (the
kernels are checked bit for bit against the C++ rules in the host emulation,
tests/cuda_elementwise_test.cpp). The same code runs on CPU tensors, the element-wise parts then
as float64 torch operations of the same order and NS on the settings' host backend, which is how
the grouping, splits and state handling are tested without a GPU (tests/python/test_muon.py).
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


def momentum_and_update(settings: Any, kind: str, beta: float, nesterov: bool, g: torch.Tensor, buf: torch.Tensor) -> torch.Tensor:
    """Updates the f32 momentum ``buf`` in place and returns U (f32), as update_rules.cpp
    muon_momentum: EMA M + (1-b)(g - M) or sum b*M + g; Nesterov lerp(g, M, b) or g + b*M."""
    if buf.is_cuda:
        u = torch.empty(buf.shape, dtype=torch.float32, device=buf.device)
        _orthojit.device_momentum(settings, g.contiguous(), buf, u, float(beta), bool(nesterov), _stream(buf.device))
        return u
    g64, m64 = g.to(torch.float32).to(torch.float64), buf.to(torch.float64)
    nxt = m64 + (1.0 - beta) * (g64 - m64) if kind == "ema" else beta * m64 + g64
    buf.copy_(nxt)  # one rounding to f32
    if not nesterov:
        return buf.clone()
    m32 = buf.to(torch.float64)
    u = g64 + beta * (m32 - g64) if kind == "ema" else g64 + beta * m32
    return u.to(torch.float32)


def orthogonalize_blocks(settings: Any, items: List[Tuple[Any, torch.Tensor]]) -> List[torch.Tensor]:
    """O = NS(U) for every block of every (plan, U) item, blocks of equal (rows, cols) on one
    device stacked into one batched call. Returns O per item, shaped (batch, rows, cols)."""
    outputs = [torch.empty((plan.batch, plan.rows, plan.cols), dtype=torch.float32, device=u.device) for plan, u in items]
    groups: "OrderedDict[Tuple[int, int, torch.device], List[Tuple[int, int, int]]]" = OrderedDict()
    views = []
    for index, (plan, u) in enumerate(items):
        views.append(u.reshape(plan.batch, plan.rows, plan.cols))
        for offset, height in plan.blocks:
            groups.setdefault((height, plan.cols, u.device), []).append((index, offset, height))
    for (height, cols, device), entries in groups.items():
        chunks = [views[i][:, offset:offset + height, :] for i, offset, _ in entries]
        stacked = torch.cat(chunks, dim=0).contiguous() if len(chunks) > 1 else chunks[0].contiguous()
        result = torch.empty_like(stacked)
        _orthojit.orthogonalize_batch(settings, stacked, result, _stream(device) if device.type == "cuda" else 0)
        start = 0
        for i, offset, _ in entries:
            count = views[i].shape[0]
            outputs[i][:, offset:offset + height, :].copy_(result[start:start + count])
            start += count
    return outputs


def row_steps(plan: Any, adjust: str, lr: float) -> List[float]:
    """lr * s for every row of a plan's matrix (s from the row's block, or the plan's scale shape)."""
    steps = [0.0] * plan.rows
    override = plan.scale_shape
    for offset, height in plan.blocks:
        rows, cols = override if override is not None else (height, plan.cols)
        value = lr * _orthojit.lr_scale(adjust, int(rows), int(cols))
        for r in range(offset, offset + height):
            steps[r] = value
    return steps


def apply_muon(p: torch.Tensor, plan: Any, orthogonal: torch.Tensor, lr: float, weight_decay: float, adjust: str) -> None:
    """p <- p(1 - lr wd) - lr s O, in float64, rounded once to p's dtype (update_rules.cpp apply_muon)."""
    steps = row_steps(plan, adjust, lr)
    if p.is_cuda:
        uniform = len(set(steps)) == 1
        column = None if uniform else torch.tensor(steps, dtype=torch.float64).to(p.device, non_blocking=True)
        _orthojit.device_apply(p.detach(), orthogonal.contiguous(), column, float(steps[0]), float(lr), float(weight_decay), int(plan.rows),
                               int(plan.cols), _stream(p.device))
        return
    # One block (the usual case): a scalar; split blocks: a (rows, 1) column, a few host scalars.
    step: Any = steps[0] if len(set(steps)) == 1 else torch.tensor(steps, dtype=torch.float64).reshape(plan.rows, 1).to(p.device)
    data = p.detach()
    new = data.reshape(plan.batch, plan.rows, plan.cols).to(torch.float64) * (1.0 - lr * weight_decay) - step * orthogonal.to(torch.float64)
    data.copy_(new.reshape(data.shape))


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
