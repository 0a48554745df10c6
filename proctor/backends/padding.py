"""Token rows as padded id tensors: right padding for scoring, left padding for prompts."""

from __future__ import annotations

from typing import Sequence

import torch


def right_padded(rows: Sequence[Sequence[int]]) -> torch.Tensor:
    """[rows, longest] ids, each row at the left; causal attention never reads the pads after it."""
    ids = torch.zeros((len(rows), max(len(r) for r in rows)), dtype=torch.long)
    for i, row in enumerate(rows):
        ids[i, : len(row)] = torch.tensor(row, dtype=torch.long)
    return ids


def left_padded(rows: Sequence[Sequence[int]], device: torch.device) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Return ids, attention mask and position ids of rows padded on the left.

    Every row's last token is at position -1; positions count real tokens only (as
    `generate()` does), so padding does not shift them.
    """
    longest = max(len(r) for r in rows)
    ids = torch.zeros((len(rows), longest), dtype=torch.long)
    mask = torch.zeros((len(rows), longest), dtype=torch.long)
    for i, row in enumerate(rows):
        ids[i, longest - len(row):] = torch.tensor(row, dtype=torch.long)
        mask[i, longest - len(row):] = 1
    ids, mask = ids.to(device), mask.to(device)
    return ids, mask, (mask.cumsum(dim=1) - 1).clamp(min=0)
