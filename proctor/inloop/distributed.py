"""Ranks, a document partitioner without duplicates or padding, and sum reductions.

Metrics hold sums; `all_reduce_sum` adds them across ranks when `torch.distributed` is
initialised and is a no-op otherwise, so one code path serves 1 and N processes.
"""

from __future__ import annotations

from typing import Callable, Iterator, Optional, Protocol, Sequence

import torch
import torch.distributed as dist
from torch.utils.data import Sampler


def rank_and_world() -> tuple[int, int]:
    """(rank, world size) of this process; (0, 1) when torch.distributed is not initialised."""
    if dist.is_available() and dist.is_initialized():
        return dist.get_rank(), dist.get_world_size()
    return 0, 1


def all_reduce_sum(tensor: torch.Tensor) -> torch.Tensor:
    """Sum `tensor` over ranks in place (and return it); unchanged in a single process."""
    if dist.is_available() and dist.is_initialized() and dist.get_world_size() > 1:
        dist.all_reduce(tensor, op=dist.ReduceOp.SUM)
    return tensor


def all_reduce_max(tensor: torch.Tensor) -> torch.Tensor:
    """Max of `tensor` over ranks in place (and return it); unchanged in a single process."""
    if dist.is_available() and dist.is_initialized() and dist.get_world_size() > 1:
        dist.all_reduce(tensor, op=dist.ReduceOp.MAX)
    return tensor


def rank_documents(num_documents: int, rank: int, world_size: int) -> range:
    """Return this rank's contiguous block of documents.

    Blocks differ by at most one document, cover every document exactly once, and none is
    repeated to even them out.
    """
    if world_size < 1 or not 0 <= rank < world_size:
        raise ValueError(f"rank {rank} is not in a world of {world_size} processes")
    base, extra = divmod(num_documents, world_size)
    start = rank * base + min(rank, extra)
    return range(start, start + base + (1 if rank < extra else 0))


class Documented(Protocol):
    """What `DocumentSampler` needs of a task: the document (0..n-1) of each item."""

    @property
    def documents(self) -> Sequence[int]:
        """The document (0..n-1) of each item, in dataset order."""
        ...


class DocumentSampler(Sampler[int]):
    """Indices of the items (chunks, choice rows) of this rank's documents, in dataset order.

    Use it in place of `DistributedSampler`, whose padding repeats items and so biases sums:
    `DataLoader(task, batch_size=8, sampler=DocumentSampler(task), collate_fn=task.collate_fn)`.
    `task.documents[i]` is the document (0..n-1) of item i; all items of a document go to
    one rank, so a metric never sees part of a document on one rank and the rest on another.
    """

    def __init__(self, task: Documented, rank: Optional[int] = None, world_size: Optional[int] = None) -> None:
        default_rank, default_world = rank_and_world()
        self.rank = default_rank if rank is None else rank
        self.world_size = default_world if world_size is None else world_size
        documents: Sequence[int] = task.documents
        num_documents = max(documents, default=-1) + 1
        mine = rank_documents(num_documents, self.rank, self.world_size)
        self.indices = [i for i, d in enumerate(documents) if d in mine]

    def __iter__(self) -> Iterator[int]:
        return iter(self.indices)

    def __len__(self) -> int:
        return len(self.indices)


class Coverage(torch.nn.Module):
    """How many times each item of a dataset was scored, summed over ranks at `check`.

    Every batch row carries `item_id` (its index in the dataset) and `num_items` (the
    dataset's length). `check` fails unless every item was scored exactly once, which is
    what corpus totals need: a missing chunk silently lowers the byte count of nothing and
    the NLL of its document; a repeated one (DistributedSampler padding) double-counts.
    """

    counts: torch.Tensor

    def __init__(self, device: Optional[torch.device] = None):
        super().__init__()
        self.register_buffer("counts", torch.zeros(0, dtype=torch.int64, device=device), persistent=False)

    def add(self, item_ids: torch.Tensor, num_items: int) -> None:
        """Count one more scoring of each of `item_ids`, growing the counts to `num_items` items."""
        if self.counts.numel() < num_items:
            grown = torch.zeros(num_items, dtype=torch.int64, device=self.counts.device)
            grown[: self.counts.numel()] = self.counts
            self.counts = grown
        ids = item_ids.to(device=self.counts.device, dtype=torch.int64).reshape(-1)
        self.counts.index_add_(0, ids, torch.ones_like(ids))

    def reset(self) -> None:
        """Forget every count."""
        self.counts = torch.zeros(0, dtype=torch.int64, device=self.counts.device)

    def summed(self) -> torch.Tensor:
        """Return the counts summed over all ranks (ranks that saw fewer items are padded with zeros)."""
        size = all_reduce_max(torch.tensor([self.counts.numel()], device=self.counts.device))
        counts = torch.zeros(int(size.item()), dtype=torch.int64, device=self.counts.device)
        counts[: self.counts.numel()] = self.counts
        return all_reduce_sum(counts)

    def check(self, what: str) -> None:
        """Raise ValueError unless every item was scored exactly once (across all ranks)."""
        counts = self.summed()
        if counts.numel() == 0:
            raise ValueError(f"no {what} were scored: call update() with batches before compute()")
        missing = int((counts == 0).sum())
        repeated = int((counts > 1).sum())
        if missing or repeated:
            problems = []
            if missing:
                problems.append(f"{missing} of {counts.numel()} {what} were never scored")
            if repeated:
                problems.append(f"{repeated} were scored more than once")
            raise ValueError(
                "; ".join(problems) + ": evaluate the whole dataset, each item once (use "
                "proctor.inloop.DocumentSampler, not DistributedSampler, which pads with repeats)"
            )


class SumMetric(torch.nn.Module):
    """Base of the in-loop metrics: tensor sums plus the `coverage` of the task's items.

    `.to(device)` moves both (Coverage is a submodule); `.to(dtype)` never lowers a
    floating-point sum below float64.
    """

    def __init__(self) -> None:
        super().__init__()
        self.coverage = Coverage()

    def _apply(self, fn: Callable[[torch.Tensor], torch.Tensor], recurse: bool = True) -> SumMetric:
        super()._apply(fn, recurse)
        for name, buffer in self.named_buffers(recurse=False):
            if buffer.is_floating_point() and buffer.dtype != torch.float64:
                setattr(self, name, buffer.to(torch.float64))
        return self
