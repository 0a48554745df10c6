"""Batches of in-loop rows, and the log-probabilities of their labels.

Every in-loop task's rows are dicts of `input_ids` and pre-shifted `labels` (token lists)
plus integer fields; `collate_items` right-pads them into the batch every metric reads.
`label_logprob_sums` is the one place a metric turns logits into scores.
"""

from __future__ import annotations

from typing import Any, Sequence

import torch

IGNORE_INDEX = -100    # labels at positions that are not scored (context, padding)
# Positions per float32 log-softmax: the temporary (32 x vocab floats, ~6 MB at 49k) stays
# in cache; measured 3.5x faster than 1,024 positions at a time on CPU.
_POSITIONS = 32


def pad_token_id(tokenizer: Any) -> int:
    """Return the tokenizer's pad id, else 0 (padding is masked out, so its value never matters)."""
    pad = getattr(tokenizer, "pad_token_id", None)
    return 0 if pad is None else int(pad)


def collate_items(items: Sequence[dict[str, Any]], pad_token_id: int = 0) -> dict[str, torch.Tensor]:
    """Right-pad rows to the longest into one batch of tensors.

    Padding is `pad_token_id` in `input_ids`, 0 in `attention_mask` and -100 in `labels`;
    every other (integer) field becomes a LongTensor [B].
    """
    if not items:
        raise ValueError("cannot collate an empty batch")
    width = max(len(item["input_ids"]) for item in items)
    input_ids = torch.full((len(items), width), pad_token_id, dtype=torch.long)
    attention = torch.zeros((len(items), width), dtype=torch.long)
    labels = torch.full((len(items), width), IGNORE_INDEX, dtype=torch.long)
    for row, item in enumerate(items):
        n = len(item["input_ids"])
        input_ids[row, :n] = torch.tensor(item["input_ids"], dtype=torch.long)
        labels[row, :n] = torch.tensor(item["labels"], dtype=torch.long)
        attention[row, :n] = 1
    columns = {key: torch.tensor([item[key] for item in items], dtype=torch.long)
               for key in items[0] if key not in ("input_ids", "labels")}
    return {"input_ids": input_ids, "attention_mask": attention, "labels": labels, **columns}


def label_logprob_sums(logits: torch.Tensor, labels: torch.Tensor) -> torch.Tensor:
    """Per row, the sum of log p(label) over positions whose label is not -100 (float64 [B]).

    Log-softmax in float32 (as offline scoring) at the labelled positions only, a few at a
    time: never a float copy of the whole [B, T, V] tensor.
    """
    if logits.dim() != 3 or logits.shape[:2] != labels.shape:
        raise ValueError(f"logits of shape {tuple(logits.shape)} do not match labels of shape "
                         f"{tuple(labels.shape)}; pass the model's [batch, seq, vocab] logits for "
                         "batch['input_ids']")
    rows, width, vocab = logits.shape
    flat_logits = logits.reshape(rows * width, vocab)
    flat_labels = labels.to(logits.device).reshape(-1)
    positions = (flat_labels != IGNORE_INDEX).nonzero().squeeze(1)
    picked = torch.empty(positions.numel(), dtype=torch.float32, device=logits.device)
    for i in range(0, positions.numel(), _POSITIONS):
        at = positions[i : i + _POSITIONS]
        first, last = int(at[0]), int(at[-1])
        # a contiguous run of positions (LM chunks) is a view; scattered ones (ICL) are gathered
        x = flat_logits[first : last + 1] if last - first + 1 == at.numel() else flat_logits[at]
        logprobs = torch.log_softmax(x.float(), dim=-1)
        picked[i : i + _POSITIONS] = logprobs.gather(1, flat_labels[at].unsqueeze(1)).squeeze(1)
    out = torch.zeros(rows, dtype=torch.float64, device=logits.device)
    return out.index_add_(0, positions // width, picked.double())
