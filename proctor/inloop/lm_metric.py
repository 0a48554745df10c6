"""Corpus CE and BPB of a language-modelling task (C4, Paloma) over a complete pass.

CE = total NLL / scored tokens (nats per token); BPB = total NLL / ln 2 / total UTF-8
bytes of the documents. Corpus totals, not averages of per-document ratios. Sums are
tensors (NLL in float64, counts in int64) added across ranks at `compute()`, which refuses
unless every chunk of the task was scored exactly once over all ranks: a partial pass
misses bytes or NLL, a repeated chunk (DistributedSampler padding) counts twice.
"""

from __future__ import annotations

import math
from typing import Mapping

import torch

from proctor.inloop.batching import IGNORE_INDEX, label_logprob_sums
from proctor.inloop.distributed import SumMetric, all_reduce_sum


class C4Metric(SumMetric):
    """`update(batch, logits)` per batch, then `compute() -> {"ce_loss", "bpb"}`."""

    what = "chunks"
    nll: torch.Tensor      # buffers (registered in __init__)
    tokens: torch.Tensor
    bytes: torch.Tensor

    def __init__(self) -> None:
        super().__init__()
        self.register_buffer("nll", torch.zeros((), dtype=torch.float64))
        self.register_buffer("tokens", torch.zeros((), dtype=torch.int64))
        self.register_buffer("bytes", torch.zeros((), dtype=torch.int64))

    @torch.no_grad()
    def update(self, batch: Mapping[str, torch.Tensor], logits: torch.Tensor) -> None:
        """Add one batch: `logits` [B, T, V] are the model's outputs for `batch["input_ids"]`."""
        missing = [k for k in ("labels", "bytes", "item_id", "num_items") if k not in batch]
        if missing:
            raise ValueError(f"{type(self).__name__}.update needs a batch from an LM task's collate_fn; "
                             f"missing {', '.join(missing)}")
        nll = -label_logprob_sums(logits, batch["labels"]).sum()
        device = self.nll.device
        self.nll += nll.to(device)
        self.tokens += (batch["labels"] != IGNORE_INDEX).sum().to(device)
        self.bytes += batch["bytes"].to(device=device, dtype=torch.int64).sum()
        self.coverage.add(batch["item_id"], int(batch["num_items"].max()))

    def totals(self) -> dict[str, float]:
        """Return {"nll", "tokens", "bytes"} summed over ranks, after the complete-pass check."""
        self.coverage.check(self.what)
        nll = all_reduce_sum(self.nll.clone())
        counts = all_reduce_sum(torch.stack([self.tokens, self.bytes]))
        return {"nll": float(nll), "tokens": int(counts[0]), "bytes": int(counts[1])}

    def compute(self) -> dict[str, float]:
        """Return corpus CE loss (nats per token) and BPB (bits per byte) over all ranks."""
        t = self.totals()
        if t["tokens"] == 0 or t["bytes"] == 0:
            raise ValueError("no tokens were scored: every document of the task is empty")
        return {"ce_loss": t["nll"] / t["tokens"], "bpb": t["nll"] / math.log(2) / t["bytes"]}

    def reset(self) -> None:
        """Zero the sums and the coverage counts."""
        self.nll.zero_()
        self.tokens.zero_()
        self.bytes.zero_()
        self.coverage.reset()


class PalomaMetric(C4Metric):
    """The same corpus CE/BPB over all selected Paloma documents, weighted by their bytes."""
