"""Hidden-state requests through the engine: dedupe, tokenize, resume from cache, batch, read.

Contexts are tokenized as generation contexts (`TokenizationPolicy`), each request's
`max_prompt_tokens` applied, and cut into padded batches as loglikelihood rows are
(`plan.partition`): longest first, by the run's batch size or token budget. The plan
covers every request, cached or not, so a resumed run computes the very batches an
uninterrupted one does; a batch's states are stored in the result cache as soon as it is
done, so a killed run redoes at most one batch.

Only backends that run the model's blocks in this process can serve them
(`HiddenStateBackend`: transformers); any other is a one-line error before any work.
`stream_hidden_states` hands each state on as it is read or computed and keeps none, so
a bank's states (GBs for a large model) never sit in memory; `run_hidden_states` collects
them in a list. Under torchrun each rank runs every world_size-th batch still to do, and
every rank ends with all states: the ones other ranks computed or hold arrive at the end.
"""

from __future__ import annotations

import time
from collections import defaultdict
from typing import TYPE_CHECKING, Any, Iterator, Mapping, Protocol, Sequence, runtime_checkable

import numpy as np

from proctor.engine.lifecycle import Done
from proctor.engine.plan import Batch, PlannedRow, Row, partition
from proctor.engine.workload import keep_rate, measured_rate, scored_work
from proctor.errors import BatchTooLarge, UserError
from proctor.requests import HiddenStates, HiddenStatesResult

if TYPE_CHECKING:
    from proctor.engine.engine import Engine

RATE = "hidden states"  # the rate kept for the next run's rough time (`proctor.engine.workload`)
HIDDEN_VERSION = "hidden-1"  # bump when a request's states could change; part of every cache key


@runtime_checkable
class HiddenStateBackend(Protocol):
    """What a backend needs to serve HiddenStates requests."""

    def decoder_shape(self) -> tuple[int, int]:
        """Return the model's (decoder blocks, hidden size)."""

    def hidden_states(self, rows: Sequence[tuple[int, ...]], layers: Sequence[int], dtype: str) -> np.ndarray:
        """Return [rows, len(layers), hidden size] of `dtype`: each block's output at each row's last token.

        Raise BatchTooLarge when the batch does not fit in memory.
        """


def hidden_state_backend(backend: Any) -> HiddenStateBackend:
    """`backend` if it serves hidden states, else a UserError naming the one that does."""
    if not isinstance(backend, HiddenStateBackend):
        raise UserError(f"the {type(backend).__name__} backend cannot return hidden states (llama.cpp, "
                        "OpenAI-compatible servers and vLLM give tokens and log-probs only); use --backend hf")
    return backend


_READ_CHUNK = 1024  # cached states read back at a time


class HiddenReading:
    """The hidden-state kind: one `Engine.hidden_states` (or `stream_hidden_states`) call."""

    description = "hidden states"

    def __init__(self, engine: Engine):
        self.engine = engine
        self.backend = hidden_state_backend(engine.backend)
        self.fingerprint = f"{engine.fingerprint}|{HIDDEN_VERSION}"
        self.started = time.perf_counter()
        self.pending: set[str] = set()  # what no rank holds
        self.tokens_before = 0  # the engine's tokens_run when this call's work began

    def start(self, unique: Mapping[str, HiddenStates]) -> None:
        """Check that every request reads only blocks the model has."""
        self.started = time.perf_counter()
        blocks, _ = self.backend.decoder_shape()
        for r in unique.values():
            if max(r.layers) >= blocks:
                raise UserError(f"a hidden-state request reads block {max(r.layers)}, but the model has "
                                f"{blocks} blocks (0-{blocks - 1})")

    def cached(self, keys: Sequence[str]) -> Iterator[dict[str, HiddenStatesResult]]:
        """Yield the stored states, `_READ_CHUNK` at a time (never all of them in memory)."""
        cache = self.engine.cache
        if cache is not None:
            for start in range(0, len(keys), _READ_CHUNK):
                yield cache.get_hidden(self.fingerprint, keys[start:start + _READ_CHUNK])

    def counted(self, requests: int, unique: int, cached: int) -> None:
        """Hidden states have no counters of their own: their batches count as scoring batches."""

    def held_everywhere(self, keys: Sequence[str]) -> None:
        """Nothing to note: a hidden-state run reports no truncation of its own."""

    def plan(self, unique: Mapping[str, HiddenStates], pending: set[str]) -> list[tuple[tuple, Batch]]:
        """Return the batches holding a pending request, of the plan of them all, with their (layers, dtype)."""
        self.pending = pending
        self.tokens_before = self.engine.stats.tokens_run
        return [(group, b) for group, b in plan_hidden(self.engine, unique) if any(k in pending for k in b.keys)]

    def workload(self, units: Sequence[tuple[tuple, Batch]], pending: int, cached: int) -> str:
        """Say how many requests, tokens and batches are to read, and roughly how long that takes."""
        return scored_work(self.description, [b for _, b in units], pending, cached,
                           measured_rate(self.engine, RATE))

    def measured(self, seconds: float) -> None:
        """Keep this call's rate (the tokens the backend ran)."""
        keep_rate(self.engine, RATE, self.engine.stats.tokens_run - self.tokens_before, seconds)

    def execute(self, units: Sequence[tuple[tuple, Batch]], done: Done) -> None:
        """Compute each batch's states, storing and handing them on as it is done."""
        stats = self.engine.stats
        for (layers, dtype), batch in units:
            self.engine.calling_model()
            states = self._run([r.row.tokens for r in batch.rows], layers, dtype)
            fresh = {r.keys[0]: HiddenStatesResult(s) for r, s in zip(batch.rows, states) if r.keys[0] in self.pending}
            self.store(fresh)
            stats.batches_run += 1
            stats.tokens_run += batch.real_tokens
            if stats.first_batch_seconds is None:
                stats.first_batch_seconds = time.perf_counter() - self.started
            done(fresh, batch.real_tokens)

    def _run(self, rows: list[tuple[int, ...]], layers: tuple[int, ...], dtype: str) -> list[np.ndarray]:
        """One [len(layers), hidden size] array per row, halving the batch while it does not fit."""
        try:
            return list(self.backend.hidden_states(rows, layers, dtype))
        except BatchTooLarge:
            if len(rows) == 1:
                raise UserError(f"one prompt of {len(rows[0])} tokens does not fit in the device's memory; "
                                "lower max_prompt_tokens or use a device with more memory") from None
        self.engine.stats.oom_splits += 1
        half = len(rows) // 2
        return self._run(rows[:half], layers, dtype) + self._run(rows[half:], layers, dtype)

    def finish(self, done: Done) -> None:
        """Nothing is made of parts."""

    def store(self, results: Mapping[str, HiddenStatesResult]) -> None:
        """Keep states in the result cache, if the run has one."""
        if self.engine.cache is not None and results:
            self.engine.cache.put_hidden(self.fingerprint, results)


def plan_hidden(engine: Engine, unique: Mapping[str, HiddenStates]) -> list[tuple[tuple, Batch]]:
    """Plan the batches of ALL the requests (so a resumed run cuts the same ones), each with its (layers, dtype).

    Rows go longest first, ties in request order (a row's states depend on its place in the
    batch by an ulp or so, so this order is the seed extractor's), cut by the run's batch
    size or token budget.
    """
    keys = list(unique)
    contexts = engine.policy.request_generation_contexts([unique[k] for k in keys])
    engine.truncated.update((k, c.dropped) for k, c in zip(keys, contexts) if c.dropped)
    groups: dict[tuple, list[PlannedRow]] = defaultdict(list)  # other blocks or dtypes: batches of their own
    for key, context in sorted(zip(keys, contexts), key=lambda kc: -len(kc[1].tokens)):  # stable: request order
        request = unique[key]
        groups[(request.layers, request.dtype)].append(PlannedRow(Row(context.tokens, ()), (key,)))
    return [(group, b) for group, rows in sorted(groups.items()) for b in partition(rows, engine.limits)]
