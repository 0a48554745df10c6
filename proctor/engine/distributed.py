"""Data-parallel engine runs under `torchrun`: which rank does what, and how results meet.

Every rank plans the same batches from the full request set (so each batch, and its
numerics, is the one a 1-process run computes), learns which results some rank already
holds, runs its share of the rest, storing each batch in its own resume cache as it
goes, then the ranks exchange results so each ends with all of them.

Results travel through torch.distributed (`all_gather_object`), not through a shared
cache file: that works across machines without a shared filesystem (where SQLite's
locking cannot be trusted), and ranks on one machine still share their cache file.
Before any work the ranks also exchange which keys each holds (one byte per key), so
a run resumed with any number of ranks, on any machines, reuses every stored result.
One rank per machine (LOCAL_RANK 0) stores the results it received, so after a
finished run every machine's cache holds all of them.

The process group is gloo even on GPUs: it only carries pickled Python objects between
CPU processes, and waits long (`_WAIT`) because a rank that finished its share waits
at the exchange for the slowest one. A rank that dies is caught by torchrun, which
stops the others; their finished work is already cached.
"""

from __future__ import annotations

import datetime
import os
import signal
from dataclasses import dataclass, field
from typing import Any, Callable, Container, Mapping, Optional, Sequence, TypeVar

from proctor.errors import UserError

T = TypeVar("T")
V = TypeVar("V")

# How long a collective waits: a rank done with its share waits for the slowest rank.
_WAIT = datetime.timedelta(days=7)


class RanksStopped(UserError):
    """The process group broke (a rank died) or torchrun stopped this rank."""


@dataclass(frozen=True)
class DistributedContext:
    """This process's place among the ranks; world_size 1 (the default) is a plain run."""

    rank: int = 0
    world_size: int = 1
    local_rank: int = 0

    @classmethod
    def from_env(cls, environ: Mapping[str, str] = os.environ) -> "DistributedContext":
        """Read the torchrun launch this process is part of (RANK, WORLD_SIZE, LOCAL_RANK), if any."""
        try:
            world = int(environ.get("WORLD_SIZE", "1"))
            rank = int(environ.get("RANK", "0"))
            local = int(environ.get("LOCAL_RANK", str(rank)))
        except ValueError:
            raise UserError("RANK, WORLD_SIZE and LOCAL_RANK must be whole numbers (torchrun sets them)") from None
        if world < 1 or not 0 <= rank < world:
            raise UserError(f"RANK={rank} is not a rank of WORLD_SIZE={world}")
        return cls(rank, world, local)

    @property
    def is_main(self) -> bool:
        """Whether this is rank 0, the one that reads and writes the output files."""
        return self.rank == 0

    @property
    def stores_received(self) -> bool:
        """Whether this rank stores results other ranks computed (one rank per machine)."""
        return self.world_size > 1 and self.local_rank == 0

    def device(self, requested: Optional[str]) -> Optional[str]:
        """Return the device this rank runs on: GPU LOCAL_RANK when the run uses CUDA, else `requested`.

        GPUs are shared in turn when a machine runs more ranks than it has.
        """
        import torch

        if self.world_size == 1 or not (requested == "cuda" or requested is None and torch.cuda.is_available()):
            return requested
        return f"cuda:{self.local_rank % max(torch.cuda.device_count(), 1)}"

    def start(self) -> None:
        """Join the process group (torchrun's env:// rendezvous); nothing in a plain run."""
        import torch.distributed as dist

        if self.world_size == 1 or dist.is_initialized():
            return
        try:
            dist.init_process_group("gloo", init_method="env://", rank=self.rank, world_size=self.world_size,
                                    timeout=_WAIT)
        except (ValueError, RuntimeError) as err:
            first = str(err).strip().splitlines()[0] if str(err).strip() else type(err).__name__
            raise UserError(f"rank {self.rank} of {self.world_size} cannot join the other ranks ({first}); "
                            "launch with torchrun, which sets MASTER_ADDR and MASTER_PORT") from None
        # torchrun stops the surviving ranks with SIGTERM when one fails: say so, not a traceback
        signal.signal(signal.SIGTERM, self._stopped_by_signal)

    def stop(self) -> None:
        """Leave the process group; nothing in a plain run."""
        import torch.distributed as dist

        if self.world_size > 1 and dist.is_initialized():
            dist.destroy_process_group()

    def in_turn(self, load: Callable[[], T]) -> T:
        """`load()` on rank 0, then on each other machine's first rank, then on the rest.

        Ranks that load a model at once would each download or convert it into the same
        cache; in turn, the first rank on a machine fills the cache and the others read it.
        """
        turn = 0 if self.rank == 0 else 1 if self.local_rank == 0 else 2
        result: Optional[T] = None
        for current in range(3 if self.world_size > 1 else 1):
            if current == turn:
                result = load()
            if self.world_size > 1:
                self._all_gather(None)  # a barrier
        return result  # type: ignore[return-value]

    def mine(self, work: Sequence[T]) -> list[T]:
        """Return this rank's share of `work` (a list every rank holds alike): every world_size-th item.

        Round robin over the work still to do, rather than a hash of each item, so every
        rank gets its equal share whatever was cached before.
        """
        return list(work[self.rank::self.world_size])

    def holders(self, keys: Sequence[str], held: Container[str]) -> list[int]:
        """For each key (the same list on every rank), the lowest rank holding it, or -1."""
        mine = bytes(k in held for k in keys)
        if self.world_size == 1:
            return [0 if b else -1 for b in mine]
        masks = self._all_gather(mine)
        return [next((r for r, mask in enumerate(masks) if mask[i]), -1) for i in range(len(keys))]

    def merge(self, results: Mapping[str, V]) -> dict[str, V]:
        """Return the union of every rank's `results` (each key with one value), on every rank."""
        if self.world_size == 1:
            return dict(results)
        merged: dict[str, V] = {}
        for part in self._all_gather(dict(results)):
            merged.update(part)
        return merged

    def main_says(self, value: T) -> T:
        """Return rank 0's `value`, on every rank.

        For what rank 0 alone decided, e.g. from the output files only it reads and writes
        (another rank reading them races rank 0's writes).
        """
        return value if self.world_size == 1 else self._all_gather(value)[0]

    def min(self, value: int) -> int:
        """Return the smallest of the ranks' values (e.g. a measured token budget all can afford)."""
        return value if self.world_size == 1 else min(self._all_gather(value))

    def sum(self, values: Mapping[str, int]) -> dict[str, int]:
        """Per-name sums of the ranks' counters."""
        if self.world_size == 1:
            return dict(values)
        parts = self._all_gather(dict(values))
        return {name: sum(p[name] for p in parts) for name in values}

    def _all_gather(self, obj: Any) -> list:
        import torch.distributed as dist

        gathered: list = [None] * self.world_size
        try:
            dist.all_gather_object(gathered, obj)
        except RuntimeError as err:  # gloo: a peer closed its connection (it died)
            raise RanksStopped(self._stopped_message(f"another rank stopped ({type(err).__name__})")) from None
        return gathered

    def _stopped_message(self, what: str) -> str:
        return (f"rank {self.rank} of {self.world_size}: {what}; finished work is cached, "
                "rerun the same command (any number of processes) to resume")

    def _stopped_by_signal(self, signum: int, frame: Any) -> None:
        raise RanksStopped(self._stopped_message("stopped by torchrun (another rank failed)"))


SINGLE = DistributedContext()


@dataclass
class Pool:
    """One kind of results for a fixed list of keys, spread over the ranks.

    `known`: keys some rank holds or this rank computed (the work left is the rest);
    `merge()` gives every rank all results, each sent once (by its lowest holder or by
    the rank that computed it).
    """

    context: DistributedContext
    known: set[str] = field(default_factory=set)
    _sent: dict = field(default_factory=dict)    # what this rank contributes to the merge
    _local: set[str] = field(default_factory=set)  # what this rank's cache holds

    @classmethod
    def of(cls, context: DistributedContext, keys: Sequence[str], held: Mapping[str, Any]) -> "Pool":
        """Pool `keys` given the results this rank's cache holds; every rank calls it (a collective).

        A result that several ranks hold is sent in the merge by the lowest of them only.
        """
        holders = context.holders(keys, held)
        known = {k for k, h in zip(keys, holders) if h >= 0}
        sent = {k: held[k] for k, h in zip(keys, holders) if h == context.rank}
        return cls(context, known, sent, set(held))

    def add(self, results: Mapping[str, Any]) -> None:
        """Results this rank computed (and stored)."""
        self.known.update(results)
        self._sent.update(results)
        self._local.update(results)

    def merge(self, store: Callable[[dict], None]) -> dict:
        """Every rank's results; `store` gets those this rank's cache lacked, where it keeps them."""
        merged = self.context.merge(self._sent)
        received = {k: v for k, v in merged.items() if k not in self._local}
        if received and self.context.stores_received:
            store(received)
        self.known.update(merged)
        return merged
