"""One lifecycle for every request kind, from deduplication to merging what the ranks made.

Requests are deduplicated, read from the result cache, shared out among the ranks,
planned, executed and stored, with progress shown, and the ranks' results are merged.

A kind (`Kind`: loglikelihood and rolling in `proctor.engine.scoring`, generation in
`proctor.engine.generate`, hidden states in `proctor.engine.hidden`) says only what is
its own: where its results are cached, how its requests become units of work, and how a
unit runs on the backend. `serve` does the rest, the same for all of them:

1. the requests are deduplicated by key and checked, before any work;
2. stored results are read (in parts) and handed on at once;
3. the ranks learn which keys some rank holds; the rest is pending;
4. the kind plans ALL the requests (so a resumed run cuts the very units an uninterrupted
   one does), says what the pending work is and roughly how long it takes, and this rank
   runs every world_size-th unit that holds pending work, storing each as it finishes, so
   a killed run loses at most the unit in flight;
5. under torchrun the ranks exchange results, each sent once (by its lowest holder, read
   back from its cache, or by the rank that made it), and one rank per machine stores
   what its cache lacked.

Results are handed to `on_result(index, result)` once per request index as they come, so
a caller that streams (hidden states: GBs for a large model) keeps none of them.
"""

from __future__ import annotations

import time
from collections import defaultdict
from typing import Any, Callable, Generic, Iterator, Mapping, Optional, Protocol, Sequence, TypeVar

from proctor.engine.distributed import DistributedContext
from proctor.engine.progress import Progress

V = TypeVar("V")
Done = Callable[[Mapping[str, Any], int], None]  # (results of requests, tokens the backend ran)


class Kind(Protocol[V]):
    """What one request kind brings to `serve`."""

    description: str                     # the progress bar's label

    def start(self, unique: Mapping[str, Any]) -> None:
        """Check the requests (UserError before any work) and get ready to count this call."""

    def cached(self, keys: Sequence[str]) -> Iterator[dict[str, V]]:
        """Yield the stored results of `keys`, part by part (nothing without a result cache)."""

    def counted(self, requests: int, unique: int, cached: int) -> None:
        """Record the call's size in the engine's counters (`cached`: held by some rank)."""

    def held_everywhere(self, keys: Sequence[str]) -> None:
        """Every result is held already: note what the planning would have noted (truncation)."""

    def plan(self, unique: Mapping[str, Any], pending: set[str]) -> Sequence[Any]:
        """Return the units of work that hold a pending request (or part of one).

        They are cut from the plan of ALL the requests so that a resumed run runs the very
        units an uninterrupted one does; the same list on every rank (noting truncation as
        it goes).
        """

    def workload(self, units: Sequence[Any], pending: int, cached: int) -> str:
        """Say in one line what the planned units will do (`pending` requests, `cached` held), and a rough time."""

    def execute(self, units: Sequence[Any], done: Done) -> None:
        """Run this rank's units; store and report (`done`) each unit's new results as it finishes."""

    def measured(self, seconds: float) -> None:
        """Keep the rate this rank's units ran at (`seconds` for `execute`), for the next run's rough time."""

    def finish(self, done: Done) -> None:
        """After this rank's units: what other ranks' parts of requests complete (rolling requests)."""

    def store(self, results: Mapping[str, V]) -> None:
        """Keep results other ranks made in this rank's cache."""


class _Deliveries(Generic[V]):
    """Hands each request's result to every index it was asked at, once."""

    def __init__(self, requests: Sequence[Any], on_result: Callable[[int, V], None]):
        self.positions: dict[str, list[int]] = defaultdict(list)
        for i, r in enumerate(requests):
            self.positions[r.key].append(i)
        self.on_result = on_result
        self.delivered: set[str] = set()

    def __call__(self, results: Mapping[str, V]) -> None:
        for key, result in results.items():
            if key not in self.delivered:
                self.delivered.add(key)
                for i in self.positions[key]:
                    self.on_result(i, result)


def serve(kind: Kind[V], requests: Sequence[Any], on_result: Callable[[int, V], None], *,
          distributed: DistributedContext, progress: bool) -> None:
    """Run `requests` of one kind through the lifecycle (see the module docstring)."""
    unique = {r.key: r for r in requests}
    kind.start(unique)
    keys = list(unique)
    deliver = _Deliveries(requests, on_result)
    held: set[str] = set()
    for part in kind.cached(keys):
        deliver(part)
        held.update(part)
    holders = distributed.holders(keys, held)
    pending = {k for k, h in zip(keys, holders) if h < 0}
    kind.counted(len(requests), len(unique), len(unique) - len(pending))
    bar = Progress(len(unique), enabled=progress and bool(unique), description=kind.description)  # no 0/0 bar
    many = distributed.world_size > 1
    sent: dict[str, V] = {}  # what this rank made, for the other ranks
    try:
        bar.advance(len(unique) - len(pending))

        def done(results: Mapping[str, V], tokens: int) -> None:
            """Results this rank made (and stored)."""
            deliver(results)
            if many:
                sent.update(results)
            bar.advance(sum(1 for k in results if k in pending), tokens)

        def completed(results: Mapping[str, V], tokens: int) -> None:
            """Results every rank completes alike from parts the ranks made (not exchanged)."""
            deliver(results)
            bar.advance(len(results), tokens)

        if pending:
            units = kind.plan(unique, pending)
            bar.say(kind.workload(units, len(pending), len(unique) - len(pending)))
            started = time.perf_counter()
            kind.execute(distributed.mine(units), done)
            kind.measured(time.perf_counter() - started)
            kind.finish(completed)
        else:
            kind.held_everywhere(keys)
        if many:
            lowest = [k for k, h in zip(keys, holders) if h == distributed.rank]
            for part in kind.cached(lowest):
                sent.update(part)
            received = {k: v for k, v in distributed.merge(sent).items() if k not in deliver.delivered}
            if received and distributed.stores_received:
                kind.store(received)
            bar.advance(sum(1 for k in received if k in pending))
            deliver(received)
    finally:
        bar.close()


def collect(kind: Kind[V], requests: Sequence[Any], *, distributed: DistributedContext,
            progress: bool) -> list[V]:
    """Return `serve`'s results as a list aligned with `requests`."""
    out: list[Optional[V]] = [None] * len(requests)
    serve(kind, requests, out.__setitem__, distributed=distributed, progress=progress)
    return out  # type: ignore[return-value]  # every index is set

