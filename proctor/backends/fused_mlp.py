"""Gated MLPs (Llama's SwiGLU) with their gate and up projections as one matmul.

A Llama-family MLP computes `down(act(gate(x)) * up(x))`: two matmuls of the same input.
One matmul with both weights side by side reads the input once, runs one larger (more
efficient) GEMM, and on a decode step is one weight pass instead of two. The product
`act(g) * u` is then taken in place.

The two projections' weights become views of the one stacked tensor, so nothing is
stored twice and the model keeps its modules, parameters and state dict. Each output
column is the same dot product as before, so the results are bitwise those of the
unfused MLP (tests/test_fused_mlp.py). With gradients on, the MLP runs its own forward:
the stacked tensor is not a parameter.

Only models proctor loads itself are fused (`load_backend`); a model a caller passes
(in-loop evaluation) keeps its parameters, which its optimizer holds.
"""

from __future__ import annotations

import types
from typing import Any

import torch

from proctor.backends.decode_linear import linear, packable

_FUSED = "_proctor_gate_up"


def fuse_gated_mlps(model: torch.nn.Module) -> int:
    """Stack every plain gated MLP's gate and up weights (in place); return how many were fused.

    A plain gated MLP has bias-free `gate_proj`, `up_proj` and `down_proj` linears of one
    input width and an `act_fn`, and its forward is `down(act(gate(x)) * up(x))`: each is
    checked on a probe input before its forward and weights are replaced. Anything else is
    left as it is.
    """
    fused = 0
    for module in model.modules():
        if _is_plain_gated_mlp(module) and _fuse(module):
            fused += 1
    return fused


def _is_plain_gated_mlp(module: torch.nn.Module) -> bool:
    gate, up, down = (getattr(module, name, None) for name in ("gate_proj", "up_proj", "down_proj"))
    if not all(isinstance(p, torch.nn.Linear) and p.bias is None for p in (gate, up, down)):
        return False
    assert isinstance(gate, torch.nn.Linear) and isinstance(up, torch.nn.Linear)
    return (callable(getattr(module, "act_fn", None)) and not hasattr(module, _FUSED)
            and gate.weight.shape == up.weight.shape and gate.weight.dtype == up.weight.dtype
            and gate.weight.device == up.weight.device)


def _fuse(mlp: Any) -> bool:
    gate, up = mlp.gate_proj, mlp.up_proj
    width = gate.weight.shape[0]
    with torch.no_grad():
        stacked = torch.cat([gate.weight, up.weight])
    unfused = mlp.forward

    def forward(self: Any, x: torch.Tensor) -> torch.Tensor:
        if torch.is_grad_enabled():
            return unfused(x)
        g, u = linear(x, stacked).split(width, dim=-1)
        return self.down_proj(self.act_fn(g).mul_(u))

    # a class that only looks like a gated MLP (another order, a scale, a dropout) keeps its own forward
    with torch.no_grad():
        probe = torch.randn(3, gate.weight.shape[1], generator=torch.Generator().manual_seed(0))
        probe = probe.to(device=gate.weight.device, dtype=gate.weight.dtype)
        mine, theirs = forward(mlp, probe), unfused(probe)
    if mine.shape != theirs.shape or not torch.allclose(mine.float(), theirs.float(), rtol=1e-2, atol=1e-4):
        return False
    # the projections' weights become views of the stacked tensor: stored once
    gate.weight = torch.nn.Parameter(stacked[:width], requires_grad=gate.weight.requires_grad)
    up.weight = torch.nn.Parameter(stacked[width:], requires_grad=up.weight.requires_grad)
    setattr(mlp, _FUSED, stacked)
    packable(mlp, stacked)
    mlp.forward = types.MethodType(forward, mlp)
    return True
