"""The engine: requests in, results out, fast and resumable, whatever their kind.

Every kind of request goes through one lifecycle (`proctor.engine.lifecycle`: dedupe,
cache, plan, execute, store, progress, merge) with a small strategy of its own:
loglikelihood and rolling requests (`scoring.py`), generation (`generate.py`) and hidden
states (`hidden.py`). The engine holds what they share: the backend, the tokenization
policy, the result cache, the batch limits, the ranks and the counters.

Under torchrun (`distributed`, see proctor.engine.distributed) every rank plans the same
units, runs its share of those not yet done and ends with every result.
"""

from __future__ import annotations

import time
from dataclasses import replace
from typing import Callable, Optional, Sequence, TypeVar, Union

from proctor.defaults import DEFAULT_SEED
from proctor.engine.backend import Backend
from proctor.engine.cache import ResultCache
from proctor.engine.chat import ChatTemplate
from proctor.engine.distributed import SINGLE, DistributedContext
from proctor.engine.generate import Generating
from proctor.engine.hidden import HiddenReading
from proctor.engine.lifecycle import Kind, collect, serve
from proctor.engine.plan import Batch, BatchLimits, plan_batches, plan_rows
from proctor.engine.rolling import RollingWork
from proctor.engine.scoring import Scored, Scoring, score_rows, split
from proctor.engine.stats import WORK_COUNTERS, EngineStats
from proctor.engine.tokens import POLICY_VERSION, TokenizationPolicy
from proctor.errors import UserError
from proctor.requests import (
    Generate,
    GenerateResult,
    HiddenStates,
    HiddenStatesResult,
    Loglikelihood,
    LoglikelihoodResult,
    Request,
    Result,
    RollingLoglikelihood,
)

BatchSize = Union[int, str]
V = TypeVar("V")


def batch_limits(batch_size: BatchSize, backend: Backend) -> BatchLimits:
    """Turn a batch size (rows, or "auto": the backend's token budget) into batch limits."""
    if batch_size == "auto":
        return BatchLimits(max_tokens=backend.token_budget())
    if isinstance(batch_size, bool) or not isinstance(batch_size, int) or batch_size < 1:
        raise UserError(f"batch size must be 'auto' or a positive integer, got {batch_size!r}")
    return BatchLimits(max_rows=batch_size)


class Engine:
    """Runs loglikelihood (`run`) and generation (`generate`) requests on a backend.

    Results are aligned with the input. `seed` is the run seed every sample's own seed
    derives from. With a `distributed` context of N ranks, every rank makes the same calls
    and gets all results; each runs about 1/N of the batches.
    """

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
        self.first_model_call: Optional[float] = None  # perf_counter() when a batch first went to the backend
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
        """Return the deterministic batch partition of the deduplicated requests (rolling ones as chunks)."""
        plain, rolling = split(requests)
        return self.plan_scored(plain, RollingWork.expand(self.policy, rolling))

    def plan_scored(self, plain: dict[str, Loglikelihood], work: RollingWork) -> list[Batch]:
        """Return the batches of loglikelihood windows and rolling chunks (noting truncation)."""
        found = self.note_windows(plain)
        windows = [*zip(plain, found), *work.windows.items()]
        return plan_batches(plan_rows(windows), self.limits, share_prefixes=self.share_prefixes)

    def note_windows(self, plain: dict[str, Loglikelihood]) -> list:
        """Each request's window; notes in `truncated` the ones left truncation cut."""
        found = self.policy.request_windows(list(plain.values()))
        self.truncated.update((k, w.dropped) for k, w in zip(plain, found) if w.dropped)
        return found

    def started_at(self, fallback: float) -> float:
        """When the last `run` started (the evaluation's start), else `fallback`."""
        return fallback if self._started is None else self._started

    def results(self, requests: Sequence[Request]) -> dict[str, Result]:
        """Return every request's result by key: the scored ones (`run`), hidden states, then generations.

        Afterwards `seconds_per_request` shares out the model time.
        """
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
        """Return a request's share of its kind's model time in the last `results` call."""
        return self._cost["generated" if isinstance(request, Generate) else "scored"]

    def run(self, requests: Sequence[Scored]) -> list[LoglikelihoodResult]:
        """Loglikelihood and rolling requests' results, aligned with `requests` (resets `stats`)."""
        return self._collect(Scoring(self), requests)

    def generate(self, requests: Sequence[Generate]) -> list[GenerateResult]:
        """Return generation requests' results (see proctor.engine.generate); call after `run`, which resets stats."""
        started = time.perf_counter()
        try:
            return self._collect(Generating(self), requests)
        finally:
            self.stats.gen_seconds += time.perf_counter() - started

    def hidden_states(self, requests: Sequence[HiddenStates]) -> list[HiddenStatesResult]:
        """Hidden-state requests (see proctor.engine.hidden), on a backend that serves them."""
        return self._collect(HiddenReading(self), requests)

    def stream_hidden_states(self, requests: Sequence[HiddenStates],
                             on_result: Callable[[int, HiddenStatesResult], None]) -> None:
        """`hidden_states` handed to `on_result(index, result)` as they come, none kept."""
        serve(HiddenReading(self), requests, on_result, distributed=self.distributed, progress=self.progress)

    def _collect(self, kind: Kind[V], requests: Sequence[Request]) -> list[V]:
        return collect(kind, requests, distributed=self.distributed, progress=self.progress)

    def total_stats(self) -> EngineStats:
        """`stats` with the work counters summed over the ranks (every rank must call it)."""
        totals = self.distributed.sum({name: getattr(self.stats, name) for name in WORK_COUNTERS})
        return replace(self.stats, **totals)

    def calling_model(self) -> None:
        """Note that a batch goes to the backend now (the first time: the end of start-up)."""
        if self.first_model_call is None:
            self.first_model_call = time.perf_counter()

    def score_batch(self, batch: Batch) -> dict[str, LoglikelihoodResult]:
        """One batch's results by key (counted in `stats`)."""
        self.calling_model()
        scored = score_rows(self, batch)
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
