"""The engine: dedupe, tokenize, group, batch, resume from cache, score, restore order.

Rolling (whole-document) requests are expanded into their chunks (proctor.engine.rolling),
which are planned and scored with the loglikelihood windows and summed per request.

Under torchrun (`distributed`, see proctor.engine.distributed) every rank plans the same
batches, runs its share of those not yet done and ends with every result.
"""

from __future__ import annotations

import time
from dataclasses import replace
from typing import Callable, Container, Iterable, Optional, Sequence, Union

from proctor.engine.backend import Backend
from proctor.engine.cache import ResultCache
from proctor.engine.chat import ChatTemplate
from proctor.engine.distributed import SINGLE, DistributedContext, Pool
from proctor.engine.generate import run_generation
from proctor.engine.hidden import run_hidden_states, stream_hidden_states
from proctor.engine.plan import Batch, BatchLimits, plan_batches, plan_rows
from proctor.engine.progress import Progress
from proctor.engine.rolling import RollingTally, RollingWork, rolling_fingerprint
from proctor.engine.stats import WORK_COUNTERS, EngineStats
from proctor.engine.tokens import POLICY_VERSION, TokenizationPolicy
from proctor.defaults import DEFAULT_SEED
from proctor.errors import BatchTooLarge, UserError
from proctor.requests import (
    Generate, GenerateResult, HiddenStates, HiddenStatesResult, Loglikelihood, LoglikelihoodResult, Request, Result,
    RollingLoglikelihood,
)

BatchSize = Union[int, str]
Scored = Union[Loglikelihood, RollingLoglikelihood]


def batch_limits(batch_size: BatchSize, backend: Backend) -> BatchLimits:
    if batch_size == "auto":
        return BatchLimits(max_tokens=backend.token_budget())
    if isinstance(batch_size, bool) or not isinstance(batch_size, int) or batch_size < 1:
        raise UserError(f"batch size must be 'auto' or a positive integer, got {batch_size!r}")
    return BatchLimits(max_rows=batch_size)


class Engine:
    """Runs loglikelihood (`run`) and generation (`generate`) requests on a backend; results
    are aligned with the input. `seed` is the run seed every sample's own seed derives from.
    With a `distributed` context of N ranks, every rank makes the same calls and gets all
    results; each runs about 1/N of the batches."""

    def __init__(
        self,
        backend: Backend,
        *,
        batch_size: BatchSize = "auto",
        cache: Optional[ResultCache] = None,
        progress: bool = True,
        deterministic: bool = False,
        seed: int = DEFAULT_SEED,
        distributed: DistributedContext = SINGLE,
        olmes_max_length: Optional[int] = None,
        chat_template: Optional[ChatTemplate] = None,
    ):
        self.backend = backend
        self.seed = seed
        self.distributed = distributed
        self.limits = batch_limits(batch_size, backend)
        if self.limits.max_tokens is not None:  # a measured budget: every rank must plan alike
            self.limits = BatchLimits(max_tokens=distributed.min(self.limits.max_tokens))
        # Batch-invariant mode: every row runs alone, unpadded, so its arithmetic is the
        # same whatever the batch size or request order (prefix groups depend on the
        # token content only). Costs the speed of batching.
        self.deterministic = deterministic
        if deterministic:
            self.limits = BatchLimits(max_rows=1)
        self.cache = cache
        self.progress = progress
        # the OLMES policy's window may be shorter than the backend's (which the lm-eval
        # policy uses: the model's context length); rolling documents use the OLMES one
        if olmes_max_length is not None and not 0 < olmes_max_length <= backend.max_length:
            raise ValueError(f"olmes_max_length {olmes_max_length} must be in 1..{backend.max_length}")
        self.policy = TokenizationPolicy(backend.tokenizer, max_length=olmes_max_length or backend.max_length,
                                         lm_eval_max_length=backend.max_length, chat_template=chat_template)
        # request key -> context tokens left truncation cut (to --max-length); scoring warns
        self.truncated: dict[str, int] = {}
        self.share_prefixes = backend.shares_prefixes
        self.stats = EngineStats()
        self._last_prefix: tuple[int, ...] = ()
        self._started: Optional[float] = None
        self._cost = {"scored": 0.0, "generated": 0.0}

    @property
    def fingerprint(self) -> str:
        """Cache-key prefix: the backend's identity plus the tokenization policy version."""
        mode = "|deterministic" if self.deterministic else ""
        if self.policy.max_length != self.backend.max_length:
            mode += f"|olmes_max_length={self.policy.max_length}"
        if self.policy.chat_template is not None:
            mode += f"|chat={self.policy.chat_template.digest}"
        return f"{self.backend.fingerprint}|tokens={POLICY_VERSION}{mode}"

    def plan(self, requests: Sequence[Scored]) -> list[Batch]:
        """The deterministic batch partition of the deduplicated requests (rolling ones as chunks)."""
        plain, rolling = _split(requests)
        return self._plan(plain, RollingWork.expand(self.policy, rolling))

    def _plan(self, plain: dict[str, Loglikelihood], work: RollingWork) -> list[Batch]:
        found = self._windows(plain)
        windows = [*zip(plain, found), *work.windows.items()]
        return plan_batches(plan_rows(windows), self.limits, share_prefixes=self.share_prefixes)

    def _windows(self, plain: dict[str, Loglikelihood]) -> list:
        """Each request's window; notes in `truncated` the ones left truncation cut."""
        found = self.policy.request_windows(list(plain.values()))
        self.truncated.update((k, w.dropped) for k, w in zip(plain, found) if w.dropped)
        return found

    def started_at(self, fallback: float) -> float:
        """When the last `run` started (the evaluation's start), else `fallback`."""
        return fallback if self._started is None else self._started

    def results(self, requests: Sequence[Request]) -> dict[str, Result]:
        """Every request's result by key: the scored ones (`run`), hidden states, then the
        generations (`generate`). Afterwards `seconds_per_request` shares out the model time."""
        scored = [r for r in requests if isinstance(r, (Loglikelihood, RollingLoglikelihood))]
        hidden = [r for r in requests if isinstance(r, HiddenStates)]
        generated = [r for r in requests if isinstance(r, Generate)]
        started = time.perf_counter()
        out: dict[str, Result] = dict(zip((r.key for r in scored), self.run(scored)))
        if hidden:
            out.update(zip((r.key for r in hidden), self.hidden_states(hidden)))
        scored_seconds = time.perf_counter() - started
        out.update(zip((r.key for r in generated), self.generate(generated)))
        self._cost = {
            "scored": scored_seconds / max(len(scored) + len(hidden), 1),
            "generated": (time.perf_counter() - started - scored_seconds) / max(len(generated), 1),
        }
        return out

    def seconds_per_request(self, request: Request) -> float:
        """A request's share of its kind's model time in the last `results` call."""
        return self._cost["generated" if isinstance(request, Generate) else "scored"]

    def generate(self, requests: Sequence[Generate]) -> list[GenerateResult]:
        """Generation requests (see proctor.engine.generate); call after `run`, which resets stats."""
        return run_generation(self, requests)

    def hidden_states(self, requests: Sequence[HiddenStates]) -> list[HiddenStatesResult]:
        """Hidden-state requests (see proctor.engine.hidden), on a backend that serves them."""
        return run_hidden_states(self, requests)

    def stream_hidden_states(self, requests: Sequence[HiddenStates],
                             on_result: Callable[[int, HiddenStatesResult], None]) -> None:
        """`hidden_states` handed to `on_result(index, result)` as they come, none kept."""
        stream_hidden_states(self, requests, on_result)

    def run(self, requests: Sequence[Scored]) -> list[LoglikelihoodResult]:
        started = self._started = time.perf_counter()
        unique = {r.key: r for r in requests}
        plain, rolling = _split(unique.values())
        fingerprint = self.fingerprint
        rolling_fp = rolling_fingerprint(fingerprint)
        held: dict[str, LoglikelihoodResult] = {}
        if self.cache is not None:
            held.update(self.cache.get_many(fingerprint, plain))
            held.update(self.cache.get_many(rolling_fp, rolling))
        pool = Pool.of(self.distributed, list(unique), held)
        self.stats = EngineStats(requests=len(requests), unique=len(unique), cached=len(pool.known))
        progress = Progress(len(unique), enabled=self.progress)
        completed: dict[str, LoglikelihoodResult] = {}
        try:
            progress.advance(len(pool.known))
            if len(pool.known) < len(unique):
                completed = self._compute(plain, rolling, pool, progress, started)
            elif self.cache is not None:  # noted when these were planned
                self.truncated.update(self.cache.get_truncated(fingerprint, plain))
            else:
                self._windows(plain)
            advanced = len(pool.known)  # what this rank held or computed
            results = pool.merge(lambda received: self._store_received(received, plain))
            results.update(completed)
            progress.advance(len(unique) - advanced)
        finally:
            progress.close()
        return [results[r.key] for r in requests]

    def _compute(self, plain: dict[str, Loglikelihood], rolling: dict[str, RollingLoglikelihood],
                 pool: Pool, progress: Progress, started: float) -> dict[str, LoglikelihoodResult]:
        """Score this rank's share of what no rank holds, storing batch by batch, into `pool`.

        Returns the rolling requests that the chunks scored by other ranks complete (every
        rank finds the same, so they are not exchanged).
        """
        fingerprint = self.fingerprint
        rolling_fp = rolling_fingerprint(fingerprint)
        # plan on the FULL request set so a resumed run cuts the same batches
        work = RollingWork.expand(self.policy, rolling)
        batches = self._plan(plain, work)
        if self.cache is not None:
            self.cache.put_truncated(fingerprint, {k: self.truncated[k] for k in plain if k in self.truncated})
        self.stats.plan_seconds = time.perf_counter() - started
        self.stats.rolling_chunks = len(work.windows)
        self.stats.rows = sum(len(b.rows) for b in batches)
        self.stats.batches = len(batches)
        unfinished = [k for k in rolling if k not in pool.known]
        chunk_keys = [c for k in unfinished for c in work.chunks[k]]
        stored = self._cached_chunks(rolling_fp, chunk_keys)
        chunks = Pool.of(self.distributed, chunk_keys, stored)
        tally = RollingTally(work, unfinished, stored)
        finished = tally.complete()  # every chunk stored already, or an empty text
        self._store(rolling_fp, finished)
        pool.add(finished)
        progress.advance(len(finished))
        pending = {k for k in plain if k not in pool.known} | {k for k in chunk_keys if k not in chunks.known}
        for batch in self.distributed.mine([b for b in batches if any(k in pending for k in b.keys)]):
            fresh = self._score(batch)
            new_plain = {k: r for k, r in fresh.items() if k in pending and k in plain}
            new_chunks = {k: r for k, r in fresh.items() if k in pending and k not in plain}
            pending.difference_update(fresh)
            completed = tally.add(new_chunks)
            self._store(fingerprint, new_plain)
            self._store(rolling_fp, {**new_chunks, **completed})  # one transaction
            pool.add({**new_plain, **completed})
            chunks.add(new_chunks)
            if self.stats.first_batch_seconds is None:
                self.stats.first_batch_seconds = time.perf_counter() - started
            progress.advance(len(new_plain) + len(completed), batch.real_tokens)
        # the chunks other ranks scored complete the rest of the rolling requests
        received = {k: r for k, r in chunks.merge(lambda r: self._store(rolling_fp, r)).items()
                    if k not in tally.results}
        completed = tally.add(received)
        if self.distributed.stores_received:
            self._store(rolling_fp, completed)
        return completed

    def _cached_chunks(self, fingerprint: str, keys: list[str]) -> dict[str, LoglikelihoodResult]:
        return self.cache.get_many(fingerprint, keys) if self.cache is not None and keys else {}

    def _store_received(self, results: dict[str, LoglikelihoodResult], plain: Container[str]) -> None:
        """Store results other ranks computed, plain and rolling ones under their fingerprints."""
        self._store(self.fingerprint, {k: r for k, r in results.items() if k in plain})
        self._store(rolling_fingerprint(self.fingerprint), {k: r for k, r in results.items() if k not in plain})

    def total_stats(self) -> EngineStats:
        """`stats` with the work counters summed over the ranks (every rank must call it)."""
        totals = self.distributed.sum({name: getattr(self.stats, name) for name in WORK_COUNTERS})
        return replace(self.stats, **totals)

    def _store(self, fingerprint: str, results: dict[str, LoglikelihoodResult]) -> None:
        if self.cache is not None and results:
            self.cache.put_many(fingerprint, results)

    def _score_rows(self, batch: Batch) -> list:
        """The backend's results for a batch, halving it (recursively) while it runs out of memory."""
        rows = [r.row for r in batch.rows]
        try:
            if batch.prefix or batch.parents:
                return self.backend.score(rows, prefix=batch.prefix, parents=batch.parents)
            return self.backend.score(rows)
        except BatchTooLarge:
            if len(rows) == 1:
                raise UserError(
                    f"one row of {len(batch.prefix) + len(rows[0].tokens)} tokens does not fit in the "
                    "device's memory; lower --max-length or use a device with more memory"
                ) from None
        self.stats.oom_splits += 1
        if batch.parents:  # segments cannot be split from their rows: score the rows whole
            scored = iter(self._score_rows(batch.flattened()))  # its rows: the keyed rows, in order
            return [next(scored) if r.keys else () for r in batch.rows]
        half = len(batch.rows) // 2
        return self._score_rows(Batch(batch.rows[:half], batch.prefix)) + self._score_rows(
            Batch(batch.rows[half:], batch.prefix)
        )

    def _score(self, batch: Batch) -> dict[str, LoglikelihoodResult]:
        scored = self._score_rows(batch)
        if len(scored) != len(batch.rows):
            raise RuntimeError(f"backend returned {len(scored)} rows for {len(batch.rows)}")
        out: dict[str, LoglikelihoodResult] = {}
        for planned, results in zip(batch.rows, scored):
            if len(results) != len(planned.keys):
                raise RuntimeError("backend returned the wrong number of readouts for a row")
            out.update(zip(planned.keys, results))
        self.stats.batches_run += 1
        self.stats.tokens_run += batch.real_tokens
        self.stats.tokens_total += batch.full_tokens
        if batch.prefix and batch.prefix != self._last_prefix:  # the backend keeps the last prefix
            self.stats.prefixes_run += 1
            self.stats.tokens_run += len(batch.prefix)
            self._last_prefix = batch.prefix
        return out


def _split(requests: Iterable[Scored]) -> tuple[dict[str, Loglikelihood], dict[str, RollingLoglikelihood]]:
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
