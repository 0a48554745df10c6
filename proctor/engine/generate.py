"""Generation requests through the engine: dedupe, tokenize, batch, resume from cache, generate.

Like loglikelihood, the batch partition is planned on the full deduplicated request set
and batches whose requests are all cached are skipped, so a resumed run generates
exactly the batches an uninterrupted run would have. A request is stored once all its
samples are done (the backend reports each as it finishes, so a long batch killed
midway keeps the requests it completed); a request with some samples done is redone
whole. Sampled requests are cached under the run seed, greedy ones are not (their text
does not depend on it).

Under torchrun each rank runs a share of the batches still to do (see
proctor.engine.distributed); batches that share a request (its samples cut into rows in
consecutive batches) go to one rank together, so a request is always finished where it
started.
"""

from __future__ import annotations

import time
from dataclasses import replace
from typing import Optional, Protocol, Sequence

from proctor.engine.backend import Backend
from proctor.engine.cache import ResultCache
from proctor.engine.distributed import DistributedContext, Pool
from proctor.engine.gen_plan import (
    GenBatch, GenLimits, PlannedGen, check_request, plan_generation, samples_needed,
)
from proctor.engine.plan import BatchLimits
from proctor.engine.progress import Progress
from proctor.engine.stats import EngineStats
from proctor.engine.tokens import GENERATION_POLICY_VERSION, TokenizationPolicy
from proctor.errors import BatchTooLarge, UserError
from proctor.requests import Generate, GenerateResult, Generation


class Host(Protocol):
    """What generation uses of the engine that runs it (`proctor.engine.Engine`)."""

    backend: Backend
    cache: Optional[ResultCache]
    policy: TokenizationPolicy
    distributed: DistributedContext
    limits: BatchLimits
    stats: EngineStats
    truncated: dict[str, int]
    deterministic: bool
    progress: bool
    seed: int

    @property
    def fingerprint(self) -> str: ...

    def started_at(self, fallback: float) -> float: ...

# Auto batches hold this many times the backend's scoring token budget of context plus
# generation room: decoding reads every weight once per step whatever the batch, so on a
# CPU 8 rows decode ~5x faster than one (see the README's speed section).
GEN_BUDGET_FACTOR = 16
MAX_AUTO_SAMPLES = 256


def generation_limits(engine: Host) -> GenLimits:
    if engine.deterministic:
        return GenLimits(max_samples=1)
    if engine.limits.max_rows is not None:
        return GenLimits(max_samples=engine.limits.max_rows)
    # the engine's token budget (the backend's, agreed by all ranks)
    assert engine.limits.max_tokens is not None  # batch limits set either rows or tokens
    return GenLimits(max_samples=MAX_AUTO_SAMPLES, max_tokens=GEN_BUDGET_FACTOR * engine.limits.max_tokens)


def request_fingerprint(engine: Host, request: Generate) -> str:
    base = f"{engine.fingerprint}|gen={GENERATION_POLICY_VERSION}"
    return f"{base}|seed={engine.seed}" if request.do_sample else base


def run_generation(engine: Host, requests: Sequence[Generate]) -> list[GenerateResult]:
    """Results aligned with `requests`; counters go to `engine.stats` (its gen_* fields)."""
    started = time.perf_counter()
    stats = engine.stats
    unique = {r.key: r for r in requests}
    for request in unique.values():
        check_request(request)
    fingerprints = {k: request_fingerprint(engine, r) for k, r in unique.items()}
    held: dict[str, GenerateResult] = {}
    if engine.cache is not None:
        for fp in set(fingerprints.values()):
            keys = [k for k, f in fingerprints.items() if f == fp]
            held.update(engine.cache.get_generations(fp, keys))
    pool = Pool.of(engine.distributed, list(unique), held)
    stats.gen_requests, stats.gen_unique, stats.gen_cached = len(requests), len(unique), len(pool.known)
    progress = Progress(len(unique), enabled=engine.progress, description="generate")
    progress.advance(len(pool.known))
    try:
        keys = list(unique)
        if len(pool.known) == len(unique) and engine.cache is not None:  # noted when they were planned
            engine.truncated.update(engine.cache.get_truncated(engine.fingerprint, keys))
        else:
            contexts = engine.policy.request_generation_contexts([unique[k] for k in keys])
            dropped = {k: c.dropped for k, c in zip(keys, contexts) if c.dropped}
            engine.truncated.update(dropped)
            if engine.cache is not None:
                engine.cache.put_truncated(engine.fingerprint, dropped)
        if len(pool.known) < len(unique):
            # a chat also stops at its template's end of turn (the row's stop strings)
            batches = plan_generation([(k, replace(unique[k], stop=engine.policy.stop(unique[k])), c.tokens)
                                       for k, c in zip(keys, contexts)],
                                      generation_limits(engine), engine.seed)
            stats.gen_batches = len(batches)
            runner = _Runner(engine, unique, fingerprints, pool, progress)
            pending = [u for u in _units(batches) if any(k not in pool.known for b in u for k in b.keys)]
            for unit in engine.distributed.mine(pending):
                for batch in unit:
                    if all(k in pool.known for k in batch.keys):
                        continue
                    runner.run(batch)
                    stats.gen_batches_run += 1
                    if stats.gen_first_batch_seconds is None:
                        stats.gen_first_batch_seconds = time.perf_counter() - started
                    if stats.first_batch_seconds is None:
                        stats.first_batch_seconds = time.perf_counter() - engine.started_at(started)
        advanced = len(pool.known)  # what this rank held or generated
        results = pool.merge(lambda received: _store(engine, fingerprints, received))
        progress.advance(len(unique) - advanced)
    finally:
        progress.close()
        stats.gen_seconds += time.perf_counter() - started
    return [results[r.key] for r in requests]


def _units(batches: list[GenBatch]) -> list[list[GenBatch]]:
    """Consecutive batches joined where one request's rows run on into the next batch."""
    units: list[list[GenBatch]] = []
    for batch in batches:
        if units and batch.rows[0].key == units[-1][-1].rows[-1].key:
            units[-1].append(batch)
        else:
            units.append([batch])
    return units


def _store(engine: Host, fingerprints: dict[str, str], results: dict[str, GenerateResult]) -> None:
    """Store generations other ranks made, each under its request's fingerprint."""
    if engine.cache is not None:
        for fp in set(fingerprints[k] for k in results):
            engine.cache.put_generations(fp, {k: r for k, r in results.items() if fingerprints[k] == fp})


class _Runner:
    """Runs batches: collects each request's samples (its chunks may lie in several batches)
    and stores a request once it is whole."""

    def __init__(self, engine: Host, unique: dict[str, Generate], fingerprints: dict[str, str],
                 pool: Pool, progress: Progress):
        self.engine, self.unique, self.fingerprints = engine, unique, fingerprints
        self.pool, self.progress = pool, progress
        self.parts: dict[str, dict[int, Generation]] = {}

    def run(self, batch: GenBatch) -> None:
        rows = [r for r in batch.rows if r.key not in self.pool.known]
        self.engine.stats.gen_prompt_tokens += sum(len(r.row.tokens) for r in rows)
        self._generate(rows)

    def _generate(self, rows: list[PlannedGen]) -> None:
        """The backend's generations for `rows`, halving the batch while it runs out of memory."""
        try:
            self.engine.backend.generate([r.row for r in rows], on_done=lambda i, s: self._collect(rows[i], s))
            return
        except BatchTooLarge:
            pass
        if len(rows) == 1 and len(rows[0].row.seeds) == 1:
            raise UserError(
                f"one generation of {len(rows[0].row.tokens)} context tokens plus up to "
                f"{rows[0].row.max_new_tokens} new ones does not fit in the device's memory; "
                "lower --max-length or use a device with more memory"
            )
        self.engine.stats.oom_splits += 1
        for half in _halves(rows):
            self._generate(half)

    def _collect(self, planned: PlannedGen, samples: tuple[Generation, ...]) -> None:
        stats = self.engine.stats
        tokens = sum(s.num_tokens for s in samples)
        stats.gen_samples += len(samples)
        stats.gen_tokens += tokens
        self.progress.advance(0, tokens)
        part = self.parts.setdefault(planned.key, {})
        part.update({planned.first_sample + j: s for j, s in enumerate(samples)})
        self._store_if_whole(planned.key)

    def _store_if_whole(self, key: str) -> None:
        request = self.unique[key]
        part = self.parts[key]
        if len(part) < samples_needed(request) or key in self.pool.known:
            return
        samples = tuple(part[i] for i in range(samples_needed(request)))
        if not request.do_sample:  # every repeat of a greedy request is the same text
            samples = samples * request.repeats
        result = GenerateResult(samples)
        if self.engine.cache is not None:
            self.engine.cache.put_generations(self.fingerprints[key], {key: result})
        self.pool.add({key: result})
        self.progress.advance(1)


def _halves(rows: list[PlannedGen]) -> list[list[PlannedGen]]:
    """Two halves of a batch's rows; one row of many samples splits its samples."""
    if len(rows) > 1:
        return [rows[: len(rows) // 2], rows[len(rows) // 2:]]
    (planned,) = rows
    seeds = planned.row.seeds
    half = len(seeds) // 2
    return [
        [replace(planned, row=replace(planned.row, seeds=seeds[:half]))],
        [replace(planned, first_sample=planned.first_sample + half, row=replace(planned.row, seeds=seeds[half:]))],
    ]
