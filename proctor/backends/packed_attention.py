"""Attention for packed rows that may all continue one shared prefix.

The backend scores a batch as ONE sequence: its rows concatenated without padding
(position ids restart after the prefix for every row). Each layer's attention is split
in two softmax parts, merged by their log-sum-exps:

- prefix part: every query against the ONE stored prefix (no mask). With grouped-query
  attention, the query heads sharing a key/value head are folded into the query axis,
  so the prefix's keys and values are read as they are: never copied per row.
- row part: each row's queries against its own keys, causal; and, for a row that
  continues a shared segment of the batch (the question the choices of one RC item
  share), against all of that segment's keys.

out = w * out_prefix + (1 - w) * out_rows,  w = sigmoid(lse_prefix - lse_rows).

No padding is computed and no per-row copy of the prefix exists. `packed_attention` is
registered with transformers as attention implementation `proctor_packed`; outside a
`packed(...)` block it is exactly SDPA. Inside one, attention is whatever the block's
layout says (`Layout.attend`): packed rows here, decode steps in `decode_attention.py`.
"""

from __future__ import annotations

import contextlib
from contextvars import ContextVar
from dataclasses import dataclass
from typing import Any, Iterator, Optional, Protocol

import torch

from proctor.backends.lean_transformers import import_transformers

import_transformers()  # before transformers' own imports below: see lean_transformers

from transformers import AttentionInterface  # noqa: E402
from transformers.integrations.sdpa_attention import repeat_kv, sdpa_attention_forward  # noqa: E402
from transformers.masking_utils import AttentionMaskInterface, sdpa_mask  # noqa: E402

NAME = "proctor_packed"


class Layout(Protocol):
    """What attention means inside a `packed(...)` block: packed scoring rows or a decode step."""

    def attend(self, query: torch.Tensor, key: torch.Tensor, value: torch.Tensor, layer: int,
               scale: float) -> torch.Tensor:
        """Attention output [batch, tokens, heads, dim] of one layer; query [batch, heads, tokens, dim]."""
        ...


@dataclass(frozen=True)
class PackedLayout:
    """Where each row lies in the packed sequence, and the prefix every row continues."""

    bounds: tuple[tuple[int, int], ...]                   # [start, end) of each row
    prefix: tuple[tuple[torch.Tensor, torch.Tensor], ...] = ()  # per layer: keys, values [1, kv_heads, P, dim]
    parents: tuple[int, ...] = ()                         # row i also attends to all of row parents[i] (-1: none)

    def attend(self, query: torch.Tensor, key: torch.Tensor, value: torch.Tensor, layer: int,
               scale: float) -> torch.Tensor:
        """Attend as packed rows: each row to the prefix, itself (causal) and its parent segment."""
        return attend_packed(query, key, value, self, layer, scale)


_LAYOUT: ContextVar[Optional[Layout]] = ContextVar("proctor_packed_layout", default=None)


@contextlib.contextmanager
def packed(layout: Layout) -> Iterator[None]:
    """Within this block, attention is `layout.attend` (for a PackedLayout: its packed rows)."""
    token = _LAYOUT.set(layout)
    try:
        yield
    finally:
        _LAYOUT.reset(token)


def attend_with_lse(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, causal: bool,
                    scale: float) -> tuple[torch.Tensor, torch.Tensor]:
    """(output, log-sum-exp) of softmax attention; q [1, H, T, d], k/v [1, H, S, d]."""
    if q.device.type == "cpu":
        return torch.ops.aten._scaled_dot_product_flash_attention_for_cpu(q, k, v, 0.0, causal, scale=scale)
    scores = torch.matmul(q, k.transpose(-1, -2)).float() * scale
    if causal:
        t, s = scores.shape[-2:]
        scores = scores.masked_fill(torch.ones(t, s, dtype=torch.bool, device=q.device).triu(1), float("-inf"))
    lse = torch.logsumexp(scores, dim=-1)
    return torch.matmul(torch.exp(scores - lse[..., None]).to(v.dtype), v), lse


def attend_packed(query: torch.Tensor, key: torch.Tensor, value: torch.Tensor, layout: PackedLayout,
                  layer: int, scale: float) -> torch.Tensor:
    """Attention output [1, N, H, d] of packed rows; query [1, H, N, d], key/value [1, KV, N, d]."""
    _, h, n, d = query.shape
    kv = key.shape[1]
    groups = h // kv
    keys, values = repeat_kv(key, groups), repeat_kv(value, groups)
    parts = []
    for i, (a, b) in enumerate(layout.bounds):
        part = attend_with_lse(query[:, :, a:b], keys[:, :, a:b], values[:, :, a:b], True, scale)
        parent = layout.parents[i] if layout.parents else -1
        if parent >= 0:  # the shared segment this row continues: all of it is in the past
            pa, pb = layout.bounds[parent]
            part = merge_parts(part, attend_with_lse(query[:, :, a:b], keys[:, :, pa:pb], values[:, :, pa:pb], False, scale))
        parts.append(part)
    out = torch.cat([p[0] for p in parts], dim=2)
    if not layout.prefix:
        return out.transpose(1, 2)
    lse = torch.cat([p[1] for p in parts], dim=2)
    prefix_key, prefix_value = layout.prefix[layer]
    folded = query.reshape(1, kv, groups * n, d)
    out_p, lse_p = attend_with_lse(folded, prefix_key, prefix_value, False, scale)
    out, _ = merge_parts((out, lse), (out_p.reshape(1, h, n, d), lse_p.reshape(1, h, n)))
    return out.transpose(1, 2)


def merge_parts(a: tuple[torch.Tensor, torch.Tensor],
                b: tuple[torch.Tensor, torch.Tensor]) -> tuple[torch.Tensor, torch.Tensor]:
    """Softmax attention over the union of two key sets, from each one's (output, log-sum-exp)."""
    (out_a, lse_a), (out_b, lse_b) = a, b
    weight = torch.sigmoid(lse_b - lse_a)[..., None].to(out_a.dtype)
    return out_a + weight * (out_b - out_a), torch.logaddexp(lse_a, lse_b)


def packed_attention(module: Any, query: torch.Tensor, key: torch.Tensor, value: torch.Tensor,
                     attention_mask: Optional[torch.Tensor], scaling: Optional[float] = None,
                     **kwargs: Any) -> tuple[torch.Tensor, None]:
    """Attend as transformers' attention function `proctor_packed`: SDPA, or the layout's inside `packed(...)`."""
    layout = _LAYOUT.get()
    if layout is None:
        return sdpa_attention_forward(module, query, key, value, attention_mask, scaling=scaling, **kwargs)
    scale = scaling if scaling is not None else query.shape[-1] ** -0.5
    return layout.attend(query, key, value, module.layer_idx, scale), None


def _packed_mask(*args: Any, **kwargs: Any) -> Optional[torch.Tensor]:
    # packed rows build their own masking; anything else gets SDPA's mask
    return None if _LAYOUT.get() is not None else sdpa_mask(*args, **kwargs)


AttentionInterface.register(NAME, packed_attention)
AttentionMaskInterface.register(NAME, _packed_mask)
