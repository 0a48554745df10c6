"""Key/value slots for continuous batching, and the attention of prefill and decode steps.

A sample's past is three segments, each stored once however many rows read it:

- the shared prefix of its group of prompts (a few-shot block), per layer [1, kv, P, d];
- its prompt's own suffix, in a prompt slot of `SlotCache.prompt` [prompts, kv, L, d],
  read by every sample of that prompt;
- its own generated tokens, in a sample slot of `SlotCache.sample` [slots, kv, G, d].

A decode step runs one token per sample slot through the model (`DecodeStep.attend`):
each layer writes the new keys and values into the sample slots, attends to the three
segments separately and merges them by their log-sum-exps, as packed scoring does
(`packed_attention.merge_parts`). The prefix is read with every query of its group folded
into one query axis and the suffixes with the queries of each prompt's samples laid out
side by side, so neither is copied per sample.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Sequence

import torch

from proctor.backends.packed_attention import PackedLayout, attend_packed, attend_with_lse, merge_parts

KV = tuple[torch.Tensor, torch.Tensor]


def masked_attend(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, lengths: torch.Tensor,
                  scale: float) -> tuple[torch.Tensor, torch.Tensor]:
    """Attend queries [B, kv, Q, d] to the first lengths[b] keys of each batch row b of k, v [B, kv, L, d].

    Returns (output [B, kv, Q, d], log-sum-exp [B, kv, Q]).
    """
    scores = torch.matmul(q, k.transpose(-1, -2)).float() * scale
    past = torch.arange(k.shape[-2], device=k.device)[None, :] >= lengths[:, None]
    # finite, so a row with no keys (an unused slot) gives garbage rather than NaN
    scores = scores.masked_fill(past[:, None, None, :], torch.finfo(torch.float32).min)
    lse = torch.logsumexp(scores, dim=-1)
    return torch.matmul(torch.exp(scores - lse[..., None]).to(v.dtype), v), lse


class SlotCache:
    """Per-layer key/value slots: prompt suffixes (more slots added on demand) and samples' own tokens."""

    def __init__(self, prompt_length: int, sample_length: int):
        self.prompt_length = prompt_length   # the longest suffix a prompt slot holds
        self.sample_length = sample_length   # the most tokens a sample slot holds
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

    def write_sample(self, layer: int, at: torch.Tensor, key: torch.Tensor, value: torch.Tensor, width: int) -> KV:
        """Store each slot's new key/value [slots, kv, d] at its position `at`.

        Returns views of the first `width` positions of every slot.
        """
        if layer == len(self.sample):
            # full length at once: memory is slots x sample_length whatever the samples do
            s, kv, d = key.shape
            shape = (s, kv, self.sample_length, d)
            self.sample.append((key.new_zeros(shape), value.new_zeros(shape)))
        keys, values = self.sample[layer]
        rows = torch.arange(key.shape[0], device=key.device)
        keys[rows, :, at] = key
        values[rows, :, at] = value
        return keys[:, :, :width], values[:, :, :width]

    def keep_samples(self, index: torch.Tensor) -> None:
        """Keep only the sample slots `index`, renumbered 0, 1, ... (the batch shrinks)."""
        self.sample = [(k[index], v[index]) for k, v in self.sample]


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
    """The live sample slots (indices into `DecodeStep.live`) of one shared prefix."""

    prefix: Sequence[KV]      # per layer
    rows: torch.Tensor


@dataclass(frozen=True)
class DecodeStep:
    """One token for every sample slot; unused slots compute garbage that nobody reads."""

    cache: SlotCache
    write_at: torch.Tensor     # [slots]: where each slot's new token goes (its tokens so far)
    width: int                 # max(write_at) + 1
    live: torch.Tensor         # the slots holding a sample
    prompt_slot: torch.Tensor  # per live slot: its prompt's slot
    column: torch.Tensor       # per live slot: its place among its prompt's live samples
    columns: int               # the most live samples of one prompt
    prompt_lengths: torch.Tensor  # per prompt slot in use (0 .. max slot): its suffix length
    prompt_width: int          # the longest of them
    groups: tuple[PrefixGroup, ...] = ()

    def attend(self, query: torch.Tensor, key: torch.Tensor, value: torch.Tensor, layer: int,
               scale: float) -> torch.Tensor:
        """Write each slot's new key/value, then attend to own tokens, prompt suffix and shared prefix, merged."""
        s, h, _, d = query.shape
        kv = key.shape[1]
        g = h // kv
        q = query.reshape(s, kv, g, d)
        keys, values = self.cache.write_sample(layer, self.write_at, key[:, :, 0], value[:, :, 0], self.width)
        own = masked_attend(q, keys, values, self.write_at + 1, scale)  # the new token included
        out, lse = own[0][self.live], own[1][self.live]
        out, lse = merge_parts((out, lse), self._prompt_part(q[self.live], layer, scale))
        for group in self.groups:
            n = len(group.rows)
            folded = q[self.live[group.rows]].transpose(0, 1).reshape(1, kv, n * g, d)
            prefix_key, prefix_value = group.prefix[layer]
            out_p, lse_p = attend_with_lse(folded, prefix_key, prefix_value, False, scale)
            part = (out_p.reshape(kv, n, g, d).transpose(0, 1), lse_p.reshape(kv, n, g).transpose(0, 1))
            out[group.rows], lse[group.rows] = merge_parts((out[group.rows], lse[group.rows]), part)
        result = own[0].clone()
        result[self.live] = out
        return result.reshape(s, 1, h, d)

    def _prompt_part(self, q: torch.Tensor, layer: int, scale: float) -> tuple[torch.Tensor, torch.Tensor]:
        """Live queries [n, kv, g, d] against their prompts' suffixes, the samples of a prompt side by side."""
        n, kv, g, d = q.shape
        prompts, width = len(self.prompt_lengths), self.prompt_width
        grid = q.new_zeros((prompts, self.columns, kv, g, d))
        grid[self.prompt_slot, self.column] = q
        grid = grid.permute(0, 2, 1, 3, 4).reshape(prompts, kv, self.columns * g, d)
        keys, values = self.cache.prompt[layer]
        out, lse = masked_attend(grid, keys[:prompts, :, :width], values[:prompts, :, :width],
                                 self.prompt_lengths, scale)
        out = out.reshape(prompts, kv, self.columns, g, d).permute(0, 2, 1, 3, 4)
        lse = lse.reshape(prompts, kv, self.columns, g).permute(0, 2, 1, 3)
        return out[self.prompt_slot, self.column], lse[self.prompt_slot, self.column]

