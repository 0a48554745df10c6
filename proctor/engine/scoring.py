"""Loglikelihood and rolling requests as a kind of the engine's lifecycle (`lifecycle.serve`).

Requests are windowed by the tokenization policy, planned into batches (`plan.py`: shared
prefixes, token budgets) and scored by the backend, halving a batch while it does not fit
in memory. Rolling (whole-document) requests are expanded into their chunks
(`proctor.engine.rolling`), which are planned and scored beside the plain windows and
summed per request; under torchrun the chunks other ranks scored complete the rest.
"""

from __future__ import annotations

import time
from typing import TYPE_CHECKING, Iterable, Iterator, Mapping, Optional, Sequence, Union

from proctor.engine.distributed import Pool
from proctor.engine.lifecycle import Done
from proctor.engine.plan import Batch
from proctor.engine.rolling import RollingTally, RollingWork, rolling_fingerprint
from proctor.engine.stats import EngineStats
from proctor.engine.workload import keep_rate, measured_rate, scored_work
from proctor.errors import BatchTooLarge, UserError
from proctor.requests import Loglikelihood, LoglikelihoodResult, RollingLoglikelihood

if TYPE_CHECKING:
    from proctor.engine.engine import Engine

Scored = Union[Loglikelihood, RollingLoglikelihood]
RATE = "loglikelihood"  # the rate kept for the next run's rough time (`proctor.engine.workload`)


def split(requests: Iterable[Scored]) -> tuple[dict[str, Loglikelihood], dict[str, RollingLoglikelihood]]:
    """Deduplicated loglikelihood and rolling requests, by key, in first-seen order."""
    plain: dict[str, Loglikelihood] = {}
    rolling: dict[str, RollingLoglikelihood] = {}
    for r in requests:
        if isinstance(r, RollingLoglikelihood):
            rolling.setdefault(r.key, r)
        elif isinstance(r, Loglikelihood):
            plain.setdefault(r.key, r)
        else:
            raise TypeError(f"Engine.run scores Loglikelihood and RollingLoglikelihood requests, not {type(r).__name__}")
    return plain, rolling


class Scoring:
    """The loglikelihood kind: one `Engine.run` call."""

    description = "loglikelihood"

    def __init__(self, engine: Engine):
        self.engine = engine
        self.fingerprint = engine.fingerprint
        self.rolling_fp = rolling_fingerprint(self.fingerprint)
        self.plain: dict[str, Loglikelihood] = {}
        self.rolling: dict[str, RollingLoglikelihood] = {}
        self.started = time.perf_counter()
        self.work: Optional[RollingWork] = None
        self.tally: Optional[RollingTally] = None
        self.chunks: Optional[Pool] = None
        self.todo: set[str] = set()  # windows and chunks no rank holds

    def start(self, unique: Mapping[str, Scored]) -> None:
        """Note the run's start (the engine's too) and split the requests into plain and rolling ones."""
        self.started = self.engine._started = time.perf_counter()
        self.plain, self.rolling = split(unique.values())

    def cached(self, keys: Sequence[str]) -> Iterator[dict[str, LoglikelihoodResult]]:
        """Yield the stored plain results, then the stored rolling ones (finished documents)."""
        cache = self.engine.cache
        if cache is not None:
            yield cache.get_many(self.fingerprint, [k for k in keys if k in self.plain])
            yield cache.get_many(self.rolling_fp, [k for k in keys if k in self.rolling])

    def counted(self, requests: int, unique: int, cached: int) -> None:
        """Reset the engine's stats to a new call of this size."""
        self.engine.stats = EngineStats(requests=requests, unique=unique, cached=cached)

    def held_everywhere(self, keys: Sequence[str]) -> None:
        """Note the plain requests' truncation: read from the cache, or found by windowing them without one."""
        cache = self.engine.cache
        if cache is not None:  # noted when these were planned
            self.engine.truncated.update(cache.get_truncated(self.fingerprint, self.plain))
        else:
            self.engine.note_windows(self.plain)

    def plan(self, unique: Mapping[str, Scored], pending: set[str]) -> list[Batch]:
        """Return the batches holding a pending window or chunk, of the plan of the FULL request set."""
        work = self.work = RollingWork.expand(self.engine.policy, self.rolling)
        batches = self.engine.plan_scored(self.plain, work)
        cache = self.engine.cache
        if cache is not None:
            truncated = self.engine.truncated
            cache.put_truncated(self.fingerprint, {k: truncated[k] for k in self.plain if k in truncated})
        stats = self.engine.stats
        stats.plan_seconds = time.perf_counter() - self.started
        stats.rolling_chunks = len(work.windows)
        stats.rows = sum(1 for b in batches for r in b.rows if r.keys)  # a shared segment is no row of its own
        stats.batches = len(batches)
        unfinished = [k for k in self.rolling if k in pending]
        chunk_keys = [c for k in unfinished for c in work.chunks[k]]
        stored = cache.get_many(self.rolling_fp, chunk_keys) if cache is not None and chunk_keys else {}
        self.chunks = Pool.of(self.engine.distributed, chunk_keys, stored)
        self.tally = RollingTally(work, unfinished, stored)
        self.todo = {k for k in self.plain if k in pending} | {k for k in chunk_keys if k not in self.chunks.known}
        return [b for b in batches if any(k in self.todo for k in b.keys)]

    def workload(self, units: Sequence[Batch], pending: int, cached: int) -> str:
        """Say how many requests, tokens and batches are to score, and roughly how long that takes."""
        return scored_work(self.description, list(units), pending, cached, measured_rate(self.engine, RATE))

    def measured(self, seconds: float) -> None:
        """Keep this call's scoring rate (the tokens the backend ran)."""
        keep_rate(self.engine, RATE, self.engine.stats.tokens_run, seconds)

    def execute(self, units: Sequence[Batch], done: Done) -> None:
        """Score this rank's batches, storing each batch's results as it is done.

        A batch's chunks and the rolling requests they complete are stored in one transaction.
        """
        assert self.chunks is not None and self.tally is not None  # planned first
        finished = self.tally.complete()  # every chunk stored already, or an empty text
        self._store(self.rolling_fp, finished)
        done(finished, 0)
        todo = self.todo
        for batch in units:
            fresh = self.engine.score_batch(batch)
            new_plain = {k: r for k, r in fresh.items() if k in todo and k in self.plain}
            new_chunks = {k: r for k, r in fresh.items() if k in todo and k not in self.plain}
            todo.difference_update(fresh)
            completed = self.tally.add(new_chunks)
            self._store(self.fingerprint, new_plain)
            self._store(self.rolling_fp, {**new_chunks, **completed})  # one transaction
            self.chunks.add(new_chunks)
            stats = self.engine.stats
            if stats.first_batch_seconds is None:
                stats.first_batch_seconds = time.perf_counter() - self.started
            done({**new_plain, **completed}, batch.real_tokens)

    def finish(self, done: Done) -> None:
        """Complete the rest of the rolling requests with the chunks other ranks scored.

        Every rank finds the same, so the completed requests are not exchanged.
        """
        assert self.chunks is not None and self.tally is not None  # executed first
        tally = self.tally
        received = {k: r for k, r in self.chunks.merge(lambda r: self._store(self.rolling_fp, r)).items()
                    if k not in tally.results}
        completed = tally.add(received)
        if self.engine.distributed.stores_received:
            self._store(self.rolling_fp, completed)
        done(completed, 0)

    def store(self, results: Mapping[str, LoglikelihoodResult]) -> None:
        """Results other ranks computed, plain and rolling ones under their fingerprints."""
        self._store(self.fingerprint, {k: r for k, r in results.items() if k in self.plain})
        self._store(self.rolling_fp, {k: r for k, r in results.items() if k not in self.plain})

    def _store(self, fingerprint: str, results: Mapping[str, LoglikelihoodResult]) -> None:
        if self.engine.cache is not None and results:
            self.engine.cache.put_many(fingerprint, results)


def score_rows(engine: Engine, batch: Batch) -> list:
    """Return the backend's results for a batch, halving it (recursively) while it runs out of memory."""
    rows = [r.row for r in batch.rows]
    try:
        if batch.prefix or batch.parents:
            return engine.backend.score(rows, prefix=batch.prefix, parents=batch.parents)
        return engine.backend.score(rows)
    except BatchTooLarge:
        if len(rows) == 1:
            raise UserError(
                f"one row of {len(batch.prefix) + len(rows[0].tokens)} tokens does not fit in the "
                "device's memory; lower --max-length or use a device with more memory"
            ) from None
    engine.stats.oom_splits += 1
    if batch.parents:  # segments cannot be split from their rows: score the rows whole
        scored = iter(score_rows(engine, batch.flattened()))  # its rows: the keyed rows, in order
        return [next(scored) if r.keys else () for r in batch.rows]
    half = len(batch.rows) // 2
    return score_rows(engine, Batch(batch.rows[:half], batch.prefix)) + score_rows(
        engine, Batch(batch.rows[half:], batch.prefix))
