"""Key/value slots for continuous batching, and the attention of prefill and decode steps.

A sample's past is two segments:

- the shared prefix of its group of prompts (a few-shot block), per layer [1, kv, P, d],
  stored once however many samples read it;
- its own tokens, in a sample slot of `SlotCache.sample` [slots, kv, L, d]: its prompt's
  suffix (copied from the prompt slot `Prefill` wrote when the sample starts) followed by
  the tokens it generates.

A decode step runs one token per sample slot through the model (`DecodeStep.attend`),
or a token and its drafted successors (`hf_generate`): each layer writes the new keys
and values into the sample slots, attends to every slot's
own tokens in one kernel call (one additive mask per step, shared by all layers), then to
the shared prefix with every query of the group folded into one query axis (read once,
not copied per sample), and merges the two by their log-sum-exps, as packed scoring does
(`packed_attention.merge_parts`). Few operations per layer matter more here than the
suffix's copy per sample: a step of a 30-layer model runs thousands of small ones.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Optional, Sequence

import torch

from proctor.backends.packed_attention import PackedLayout, attend_packed, attend_with_lse, merge_parts

KV = tuple[torch.Tensor, torch.Tensor]


def length_mask(lengths: torch.Tensor, width: int, dtype: torch.dtype, tokens: int = 1,
                groups: int = 1) -> torch.Tensor:
    """Additive mask of a step of `tokens` new tokens per row: 0 on the keys a query sees, the dtype's minimum after.

    Token t of row b sees the first lengths[b] + t keys. One token: [B, 1, 1, width],
    the same for every query. More: [B, 1, groups * tokens, width], rows in the order
    of `DecodeStep`'s queries (query head within its group, then token).
    """
    seen = lengths[:, None] + torch.arange(tokens, device=lengths.device)        # [B, tokens]
    past = torch.arange(width, device=lengths.device)[None, None, :] >= seen[:, :, None]
    # finite, so a row with no keys gives garbage rather than NaN
    mask = torch.zeros(past.shape, dtype=dtype, device=lengths.device).masked_fill_(past, torch.finfo(dtype).min)
    if tokens == 1:
        return mask[:, None]
    b = len(lengths)
    return mask[:, None, None].expand(b, 1, groups, tokens, width).reshape(b, 1, groups * tokens, width)


def masked_attend(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, mask: torch.Tensor,
                  scale: float) -> tuple[torch.Tensor, torch.Tensor]:
    """Attend queries [B, kv, Q, d] to keys/values [B, kv, L, d] under an additive mask [B, 1, 1 or Q, L].

    Returns (output [B, kv, Q, d], log-sum-exp [B, kv, Q]).
    """
    if q.device.type == "cpu":
        return torch.ops.aten._scaled_dot_product_flash_attention_for_cpu(q, k, v, 0.0, False, attn_mask=mask,
                                                                         scale=scale)
    scores = torch.matmul(q, k.transpose(-1, -2)).float() * scale + mask
    lse = torch.logsumexp(scores, dim=-1)
    return torch.matmul(torch.exp(scores - lse[..., None]).to(v.dtype), v), lse


class SlotCache:
    """Per-layer key/value slots: prompt suffixes (more slots added on demand) and samples' own tokens."""

    def __init__(self, slots: int, prompt_length: int, sample_length: int):
        self.slots = slots                   # sample slots
        self.prompt_length = prompt_length   # the longest suffix a prompt slot holds
        self.sample_length = sample_length   # the most tokens a sample slot holds: suffix and generated
        self.prompt: list[KV] = []
        self.sample: list[KV] = []

    def write_prompt(self, layer: int, slot: int, key: torch.Tensor, value: torch.Tensor) -> None:
        """Store a prompt suffix's keys/values [kv, n, d] in prompt slot `slot`."""
        if layer == len(self.prompt):
            kv, _, d = key.shape
            shape = (max(slot + 1, 4), kv, self.prompt_length, d)
            self.prompt.append((key.new_zeros(shape), value.new_zeros(shape)))
        keys, values = self.prompt[layer]
        if slot >= keys.shape[0]:
            grow = max(slot + 1, 2 * keys.shape[0]) - keys.shape[0]
            keys = torch.cat([keys, keys.new_zeros((grow, *keys.shape[1:]))])
            values = torch.cat([values, values.new_zeros((grow, *values.shape[1:]))])
            self.prompt[layer] = (keys, values)
        n = key.shape[1]
        keys[slot, :, :n] = key
        values[slot, :, :n] = value

    def start_sample(self, slot: int, prompt_slot: int, length: int) -> None:
        """Copy the first `length` keys/values of prompt slot `prompt_slot` to the start of sample slot `slot`."""
        if not self.sample:
            # full length at once: memory is slots x sample_length whatever the samples do
            for keys, values in self.prompt:
                shape = (self.slots, keys.shape[1], self.sample_length, keys.shape[3])
                self.sample.append((keys.new_zeros(shape), values.new_zeros(shape)))
        for (keys, values), (own_keys, own_values) in zip(self.prompt, self.sample):
            own_keys[slot, :, :length] = keys[prompt_slot, :, :length]
            own_values[slot, :, :length] = values[prompt_slot, :, :length]

    def write_sample(self, layer: int, at: tuple[torch.Tensor, torch.Tensor], key: torch.Tensor,
                     value: torch.Tensor, width: int) -> KV:
        """Store each slot's new keys/values [slots, kv, T, d] at `at`: (slot [slots, 1], position [slots, T]).

        Returns views of the first `width` positions of every slot.
        """
        keys, values = self.sample[layer]
        slot, position = at
        keys[slot, :, position] = key.transpose(1, 2)
        values[slot, :, position] = value.transpose(1, 2)
        return keys[:, :, :width], values[:, :, :width]

    def keep_samples(self, index: torch.Tensor) -> None:
        """Keep only the sample slots `index`, renumbered 0, 1, ... (the batch shrinks)."""
        self.sample = [(k[index], v[index]) for k, v in self.sample]
        self.slots = len(index)


@dataclass(frozen=True)
class Prefill:
    """Packed prompt suffixes: attention as packed scoring, each suffix's keys/values kept in its slot."""

    layout: PackedLayout
    cache: SlotCache
    slots: tuple[int, ...]   # the prompt slot of each packed row

    def attend(self, query: torch.Tensor, key: torch.Tensor, value: torch.Tensor, layer: int,
               scale: float) -> torch.Tensor:
        """Store each packed suffix's keys/values in its prompt slot, then attend as packed scoring."""
        for slot, (a, b) in zip(self.slots, self.layout.bounds):
            self.cache.write_prompt(layer, slot, key[0, :, a:b], value[0, :, a:b])
        return attend_packed(query, key, value, self.layout, layer, scale)


@dataclass(frozen=True)
class PrefixGroup:
    """The sample slots reading one shared prefix (None: all of them)."""

    prefix: Sequence[KV]      # per layer
    rows: Optional[torch.Tensor]


def write_index(write_at: torch.Tensor, tokens: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Where a step's new keys/values go: (slot [S, 1], position [S, T]), T tokens from each slot's write_at."""
    slots = torch.arange(len(write_at), device=write_at.device)[:, None]
    return slots, write_at[:, None] + torch.arange(tokens, device=write_at.device)


@dataclass(frozen=True)
class DecodeStep:
    """T tokens (one, or a token and its drafts) for every sample slot; unused slots compute garbage nobody reads."""

    cache: SlotCache
    write_at: tuple[torch.Tensor, torch.Tensor]   # `write_index`: where each slot's new keys/values go
    mask: torch.Tensor         # `length_mask`: each query's own keys, its token included
    groups: tuple[PrefixGroup, ...] = ()

    def attend(self, query: torch.Tensor, key: torch.Tensor, value: torch.Tensor, layer: int,
               scale: float) -> torch.Tensor:
        """Write each slot's new keys/values, then attend to its own tokens and its shared prefix, merged.

        query [slots, heads, T, d], key/value [slots, kv, T, d]: T new tokens per slot
        (one, or a token and its drafts); returns [slots, T, heads, d].
        """
        s, h, t, d = query.shape
        kv = key.shape[1]
        g = h // kv * t   # queries per key/value head: its query heads' tokens
        q = query.reshape(s, kv, g, d)
        keys, values = self.cache.write_sample(layer, self.write_at, key, value, self.mask.shape[-1])
        out, lse = masked_attend(q, keys, values, self.mask, scale)
        for group in self.groups:
            rows = q if group.rows is None else q[group.rows]
            n = rows.shape[0]
            folded = rows.transpose(0, 1).reshape(1, kv, n * g, d)
            prefix_key, prefix_value = group.prefix[layer]
            out_p, lse_p = attend_with_lse(folded, prefix_key, prefix_value, False, scale)
            part = (out_p.reshape(kv, n, g, d).transpose(0, 1), lse_p.reshape(kv, n, g).transpose(0, 1))
            if group.rows is None:
                out, lse = merge_parts((out, lse), part)
            else:
                out[group.rows], lse[group.rows] = merge_parts((out[group.rows], lse[group.rows]), part)
        if t == 1:
            return out.reshape(s, 1, h, d)
        return out.reshape(s, kv, h // kv, t, d).permute(0, 3, 1, 2, 4).reshape(s, t, h, d)
