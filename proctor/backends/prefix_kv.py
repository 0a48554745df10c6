"""A shared prefix's keys and values, computed once per prefix at batch size 1."""

from __future__ import annotations

import inspect
from typing import Any

import torch
from transformers.cache_utils import DynamicCache


def cache_keyword(decoder: Any) -> str:
    """Return the decoder's keyword for a cache (`cache` in transformers >= 5.2x, `past_key_values` before)."""
    params = inspect.signature(decoder.forward).parameters
    return "cache" if "cache" in params else "past_key_values"


def run_prefix(decoder: Any, prefix: tuple[int, ...], device: torch.device) -> list[tuple[torch.Tensor, torch.Tensor]]:
    """Per-layer (keys, values) of `prefix`, each [1, kv_heads, len(prefix), dim]."""
    cache = DynamicCache()
    ids = torch.tensor([prefix], dtype=torch.long, device=device)
    decoder(input_ids=ids, use_cache=True, **{cache_keyword(decoder): cache})  # fills `cache`
    layers = []
    for layer in cache.layers:
        # a linear-attention layer has no keys/values to share: not a plain key/value cache
        keys, values = getattr(layer, "keys", None), getattr(layer, "values", None)
        if keys is None or values is None or keys.shape[-2] != len(prefix):
            raise RuntimeError("the model did not fill a plain key/value cache for the prefix")
        layers.append((keys, values))
    if not layers:
        raise RuntimeError("the model did not fill a plain key/value cache for the prefix")
    return layers
