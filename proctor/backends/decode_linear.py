"""Thin matmuls (decode steps) through oneDNN, on weights packed once per generation call.

A decode step multiplies a few rows, one per live sample, by every weight of the model,
so it runs at the rate weights are read. On a CPU, MKL's sgemm (what `F.linear` calls)
reads them at 6-9 GB/s for 2 to 32 rows, about half of what its own one-row gemv reaches,
while oneDNN on a weight reordered once into its blocked layout reads them at 18-28 GB/s
(docs/benchmarks.md, "A decode step against the memory floor"). So inside `packed_linears(model)`
every float32 CPU linear of at most `MAX_ROWS` rows runs `torch.ops.mkldnn._linear_pointwise`
on a packed copy of its weight; larger products (packed prompt prefills) stay with
`F.linear`, which is as fast there. oneDNN's result for a row does not depend on how
many rows share the product; it differs from MKL's by rounding (about 1e-6 relative).

The copies exist only inside the block and the model's parameters are untouched. They
take as much memory as the weights, so they are made only when twice that is free.
"""

from __future__ import annotations

import contextlib
import types
from contextvars import ContextVar
from typing import Iterator, Optional

import torch
import torch.nn.functional as F

MAX_ROWS = 64  # rows of a product sent to oneDNN; more go to F.linear
_EXTRA = "_proctor_packable"  # a module's weights, beside its linears', that its forward runs through `linear`

Key = tuple[int, tuple[int, ...], tuple[int, ...]]
_PACKED: ContextVar[Optional[dict[Key, torch.Tensor]]] = ContextVar("proctor_packed_linears", default=None)


def _key(weight: torch.Tensor) -> Key:
    # by storage, shape and strides: the fused MLP's gate and up weights are views of one tensor
    return weight.data_ptr(), tuple(weight.shape), tuple(weight.stride())


def linear(x: torch.Tensor, weight: torch.Tensor, bias: Optional[torch.Tensor] = None) -> torch.Tensor:
    """`F.linear(x, weight, bias)`; inside `packed_linears`, through oneDNN when `weight` is packed and x is thin."""
    packed = _PACKED.get()
    if packed is not None and x.dtype == torch.float32 and x.numel() <= MAX_ROWS * x.shape[-1]:
        weight_packed = packed.get(_key(weight))
        if weight_packed is not None:
            return torch.ops.mkldnn._linear_pointwise(x, weight_packed, bias, "none", [], "")
    return F.linear(x, weight, bias)


def packable(module: torch.nn.Module, weight: torch.Tensor) -> None:
    """Have `packed_linears` pack `weight` too: `module`'s forward multiplies by it through `linear`."""
    setattr(module, _EXTRA, (*getattr(module, _EXTRA, ()), weight))


def _linear_forward(self: torch.nn.Linear, x: torch.Tensor) -> torch.Tensor:
    return linear(x, self.weight, self.bias)


def _packable(weight: torch.Tensor) -> bool:
    return weight.device.type == "cpu" and weight.dtype == torch.float32 and weight.dim() == 2


def _enough_memory(nbytes: int) -> bool:
    import psutil

    return psutil.virtual_memory().available > 2 * nbytes


@contextlib.contextmanager
def packed_linears(model: torch.nn.Module) -> Iterator[int]:
    """Within this block, thin products with `model`'s float32 CPU linears run through oneDNN.

    Covers every `nn.Linear` of the model and every weight marked `packable` (the fused
    MLPs' stacked gate/up weights); a linear whose weight is a view of such a weight is
    not run by its module's forward, so it is left out. Yields how many weights were
    packed: 0 where oneDNN is missing, the model is not a float32 CPU one or the copies
    would not fit in memory; then nothing changes.
    """
    extra = [w for m in model.modules() for w in getattr(m, _EXTRA, ()) if _packable(w)]
    within = {w.untyped_storage().data_ptr() for w in extra}
    linears = [m for m in model.modules() if isinstance(m, torch.nn.Linear) and _packable(m.weight)
               and m.weight.untyped_storage().data_ptr() not in within]
    weights = {_key(w): w for w in [*(m.weight for m in linears), *extra]}
    nbytes = sum(w.numel() * w.element_size() for w in weights.values())
    if not weights or not torch.backends.mkldnn.is_available() or not _enough_memory(nbytes):
        yield 0
        return
    with torch.no_grad():
        packed = {key: torch.ops.mkldnn._reorder_linear_weight(w.detach()) for key, w in weights.items()}
    patched = [m for m in linears if "forward" not in vars(m)]
    for module in patched:
        module.forward = types.MethodType(_linear_forward, module)  # type: ignore[method-assign]
    token = _PACKED.set(packed)
    try:
        yield len(packed)
    finally:
        _PACKED.reset(token)
        for module in patched:
            del module.forward

