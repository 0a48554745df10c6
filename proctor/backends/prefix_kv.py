"""A shared prefix's keys and values, fed to a batch of suffixes as a transformers Cache.

The prefix runs once at batch size 1. Each suffix batch gets a read-only cache over those
tensors: every layer concatenates the batch-expanded prefix with the suffix's own keys and
values for its attention and keeps nothing, so only one layer's copy exists at a time and
the stored prefix is never modified (the same prefix serves many batches).
"""

from __future__ import annotations

import inspect
from typing import Any

import torch
from transformers.cache_utils import Cache, DynamicCache, DynamicLayer


class _PrefixLayer(DynamicLayer):
    def __init__(self, keys: torch.Tensor, values: torch.Tensor):
        super().__init__()
        self.keys, self.values = keys, values
        self.device = keys.device
        self.is_initialized = True

    def update(self, key_states: torch.Tensor, value_states: torch.Tensor, *args: Any, **kwargs: Any):
        n = key_states.shape[0]
        keys = torch.cat([self.keys.expand(n, -1, -1, -1), key_states], dim=-2)
        values = torch.cat([self.values.expand(n, -1, -1, -1), value_states], dim=-2)
        return keys, values


class PrefixCache(DynamicCache):
    """Read-only per-layer prefix keys/values ([1, heads, prefix, dim]) for any batch size."""

    def __init__(self, layers: list[tuple[torch.Tensor, torch.Tensor]]):
        Cache.__init__(self, layers=[_PrefixLayer(k, v) for k, v in layers])


def cache_keyword(decoder: Any) -> str:
    """The decoder's keyword for a cache (`cache` in transformers >= 5.2x, `past_key_values` before)."""
    params = inspect.signature(decoder.forward).parameters
    return "cache" if "cache" in params else "past_key_values"


def run_prefix(decoder: Any, prefix: tuple[int, ...], device: torch.device) -> list[tuple[torch.Tensor, torch.Tensor]]:
    """Per-layer (keys, values) of `prefix`, computed in one batch-1 forward pass."""
    cache = DynamicCache()
    ids = torch.tensor([prefix], dtype=torch.long, device=device)
    decoder(input_ids=ids, use_cache=True, **{cache_keyword(decoder): cache})  # fills `cache`
    layers = [(layer.keys, layer.values) for layer in cache.layers]
    if not layers or any(k is None or k.shape[-2] != len(prefix) for k, _ in layers):
        raise RuntimeError("the model did not fill a plain key/value cache for the prefix")
    return layers
