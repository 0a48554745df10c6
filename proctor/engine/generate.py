"""Generation requests through the engine: dedupe, tokenize, resume from cache, generate.

The requests not in the cache go to the backend as one queue, one row per request in a
fixed order (`gen_plan.py`), with the number of samples it may decode at once; the
backend keeps that many busy until the queue is empty (continuous batching). Samples
depend only on their seeds, so a resumed run, which queues only what is missing, ends
with the same outputs as an uninterrupted one. A request is stored as soon as all its
samples are done; a request with some samples done when a run dies is redone whole.
Sampled requests are cached under the run seed, greedy ones are not (their text does
not depend on it).

Under torchrun each rank runs every world_size-th request still to do (see
proctor.engine.distributed).
"""

from __future__ import annotations

import time
from dataclasses import replace
from typing import Optional, Protocol, Sequence

from proctor.engine.backend import Backend
from proctor.engine.cache import ResultCache
from proctor.engine.distributed import DistributedContext, Pool
from proctor.engine.gen_plan import PlannedGen, check_request, plan_generation
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

# Auto generation decodes as many samples at once as this many times the backend's
# scoring token budget holds generated tokens (a sample stores only its own: prompts and
# shared prefixes are stored once). Decoding reads every weight once per step whatever
# the batch, so on a CPU many rows decode several times faster than one: GSM8K n=8 ran
# at 85 new tokens/s with 64 slots and 108 with 128 (README, generation speed).
GEN_BUDGET_FACTOR = 64
MAX_AUTO_SLOTS = 256


def generation_slots(engine: Host, rows: Sequence[PlannedGen]) -> int:
    """How many samples the backend decodes at once."""
    if engine.deterministic:
        return 1
    if engine.limits.max_rows is not None:
        return engine.limits.max_rows
    # the engine's token budget (the backend's, agreed by all ranks)
    assert engine.limits.max_tokens is not None  # batch limits set either rows or tokens
    longest = max(r.row.max_new_tokens for r in rows)
    return max(1, min(MAX_AUTO_SLOTS, GEN_BUDGET_FACTOR * engine.limits.max_tokens // longest))


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
            planned = plan_generation([(k, replace(unique[k], stop=engine.policy.stop(unique[k])), c.tokens)
                                       for k, c in zip(keys, contexts)], engine.seed)
            mine = engine.distributed.mine([p for p in planned if p.key not in pool.known])
            stats.gen_batches = 1
            if mine:
                stats.gen_slots = generation_slots(engine, mine)
                _Runner(engine, unique, fingerprints, pool, progress, started).run(mine, stats.gen_slots)
        advanced = len(pool.known)  # what this rank held or generated
        results = pool.merge(lambda received: _store(engine, fingerprints, received))
        progress.advance(len(unique) - advanced)
    finally:
        progress.close()
        stats.gen_seconds += time.perf_counter() - started
    return [results[r.key] for r in requests]


def _store(engine: Host, fingerprints: dict[str, str], results: dict[str, GenerateResult]) -> None:
    """Store generations other ranks made, each under its request's fingerprint."""
    if engine.cache is not None:
        for fp in set(fingerprints[k] for k in results):
            engine.cache.put_generations(fp, {k: r for k, r in results.items() if fingerprints[k] == fp})


class _Runner:
    """Sends the queue to the backend and stores each request once all its samples are done."""

    def __init__(self, engine: Host, unique: dict[str, Generate], fingerprints: dict[str, str],
                 pool: Pool, progress: Progress, started: float):
        self.engine, self.unique, self.fingerprints = engine, unique, fingerprints
        self.pool, self.progress, self.started = pool, progress, started

    def run(self, rows: list[PlannedGen], slots: int) -> None:
        """Generate `rows`, halving the slots while the backend runs out of memory."""
        stats = self.engine.stats
        stats.gen_prompt_tokens += sum(len(r.row.tokens) for r in rows)
        while True:
            try:
                stats.gen_batches_run += 1
                self._send(rows, slots)
                return
            except BatchTooLarge:
                pass
            if slots == 1:
                longest = max(rows, key=lambda r: len(r.row.tokens) + r.row.max_new_tokens).row
                raise UserError(
                    f"one generation of {len(longest.tokens)} context tokens plus up to {longest.max_new_tokens} "
                    "new ones does not fit in the device's memory; lower --max-length or use a device with more memory"
                )
            stats.oom_splits += 1
            slots //= 2
            stats.gen_slots = slots
            rows = [r for r in rows if r.key not in self.pool.known]

    def _send(self, rows: list[PlannedGen], slots: int) -> None:
        def done(i: int, samples: tuple[Generation, ...]) -> None:
            self._store(rows[i], samples)

        self.engine.backend.generate([r.row for r in rows], on_done=done, slots=slots)

    def _store(self, planned: PlannedGen, samples: tuple[Generation, ...]) -> None:
        stats = self.engine.stats
        tokens = sum(s.num_tokens for s in samples)
        stats.gen_samples += len(samples)
        stats.gen_tokens += tokens
        self.progress.advance(0, tokens)
        if stats.gen_first_done_seconds is None:
            stats.gen_first_done_seconds = time.perf_counter() - self.started
        if stats.first_batch_seconds is None:
            stats.first_batch_seconds = time.perf_counter() - self.engine.started_at(self.started)
        request = self.unique[planned.key]
        if not request.do_sample:  # every repeat of a greedy request is the same text
            samples = samples * request.repeats
        result = GenerateResult(samples)
        if self.engine.cache is not None:
            self.engine.cache.put_generations(self.fingerprints[planned.key], {planned.key: result})
        self.pool.add({planned.key: result})
        self.progress.advance(1)
