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
from typing import Any, Callable, Mapping, Optional, Protocol, Sequence, runtime_checkable

import numpy as np

from proctor.engine.generate import Host
from proctor.engine.plan import Batch, PlannedRow, Row, partition
from proctor.engine.progress import Progress
from proctor.errors import BatchTooLarge, UserError
from proctor.requests import HiddenStates, HiddenStatesResult

HIDDEN_VERSION = "hidden-1"  # bump when a request's states could change; part of every cache key


@runtime_checkable
class HiddenStateBackend(Protocol):
    """What a backend needs to serve HiddenStates requests."""

    def decoder_shape(self) -> tuple[int, int]:
        """(decoder blocks, hidden size)."""

    def hidden_states(self, rows: Sequence[tuple[int, ...]], layers: Sequence[int], dtype: str) -> np.ndarray:
        """[rows, len(layers), hidden size] of `dtype`: each block's output at each row's last
        token; BatchTooLarge when the batch does not fit in memory."""


def hidden_state_backend(backend: Any) -> HiddenStateBackend:
    """`backend` if it serves hidden states, else a UserError naming the one that does."""
    if not isinstance(backend, HiddenStateBackend):
        raise UserError(f"the {type(backend).__name__} backend cannot return hidden states (llama.cpp, "
                        "OpenAI-compatible servers and vLLM give tokens and log-probs only); use --backend hf")
    return backend


OnResult = Callable[[int, HiddenStatesResult], None]
_READ_CHUNK = 1024  # cached states read back at a time


def run_hidden_states(engine: Host, requests: Sequence[HiddenStates]) -> list[HiddenStatesResult]:
    """Results aligned with `requests`."""
    out: list[Optional[HiddenStatesResult]] = [None] * len(requests)
    stream_hidden_states(engine, requests, out.__setitem__)
    return out  # type: ignore[return-value]  # every index is set


def stream_hidden_states(engine: Host, requests: Sequence[HiddenStates], on_result: OnResult) -> None:
    """`on_result(i, result)` once for each request index, as its states are read from the cache
    or computed; nothing is kept, so memory does not grow with the requests (under torchrun
    the states other ranks computed arrive together at the end)."""
    backend = hidden_state_backend(engine.backend)
    blocks, _ = backend.decoder_shape()
    unique = {r.key: r for r in requests}
    for r in unique.values():
        if max(r.layers) >= blocks:
            raise UserError(f"a hidden-state request reads block {max(r.layers)}, but the model has "
                            f"{blocks} blocks (0-{blocks - 1})")
    positions: dict[str, list[int]] = defaultdict(list)
    for i, r in enumerate(requests):
        positions[r.key].append(i)
    delivered: set[str] = set()

    def deliver(results: Mapping[str, HiddenStatesResult]) -> None:
        for key, result in results.items():
            if key not in delivered:
                delivered.add(key)
                for i in positions[key]:
                    on_result(i, result)

    fingerprint = f"{engine.fingerprint}|{HIDDEN_VERSION}"
    keys = list(unique)
    held: set[str] = set()
    progress = Progress(len(unique), enabled=engine.progress, description="hidden states")
    try:
        if engine.cache is not None:
            for start in range(0, len(keys), _READ_CHUNK):
                found = engine.cache.get_hidden(fingerprint, keys[start:start + _READ_CHUNK])
                deliver(found)
                held.update(found)
        holders = engine.distributed.holders(keys, held)
        pending = {k for k, h in zip(keys, holders) if h < 0}
        progress.advance(len(unique) - len(pending))
        sent = _compute(engine, backend, fingerprint, unique, pending, deliver, progress)
        if engine.distributed.world_size > 1:  # each state goes once: from its lowest holder, or its maker
            lowest = [k for k, h in zip(keys, holders) if h == engine.distributed.rank]
            if engine.cache is not None and lowest:
                sent.update(engine.cache.get_hidden(fingerprint, lowest))
            received = {k: v for k, v in engine.distributed.merge(sent).items() if k not in delivered}
            if engine.distributed.stores_received:  # what this rank's cache lacked
                _store(engine, fingerprint, received)
            progress.advance(sum(1 for k in received if k in pending))
            deliver(received)
    finally:
        progress.close()


def _compute(engine: Host, backend: HiddenStateBackend, fingerprint: str, unique: dict[str, HiddenStates],
             pending: set[str], deliver: Callable[[Mapping[str, HiddenStatesResult]], None],
             progress: Progress) -> dict[str, HiddenStatesResult]:
    """This rank's share of the batches holding a pending request, stored and delivered batch by
    batch; what it computed, when other ranks need it (else nothing is kept)."""
    kept: dict[str, HiddenStatesResult] = {}
    if not pending:
        return kept
    started = time.perf_counter()
    batches = [(group, b) for group, b in plan_hidden(engine, unique) if any(k in pending for k in b.keys)]
    for (layers, dtype), batch in engine.distributed.mine(batches):
        states = _run(engine, backend, [r.row.tokens for r in batch.rows], layers, dtype)
        fresh = {r.keys[0]: HiddenStatesResult(s) for r, s in zip(batch.rows, states) if r.keys[0] in pending}
        _store(engine, fingerprint, fresh)
        deliver(fresh)
        if engine.distributed.world_size > 1:
            kept.update(fresh)
        engine.stats.batches_run += 1
        engine.stats.tokens_run += batch.real_tokens
        if engine.stats.first_batch_seconds is None:
            engine.stats.first_batch_seconds = time.perf_counter() - started
        progress.advance(len(fresh), batch.real_tokens)
    return kept


def plan_hidden(engine: Host, unique: dict[str, HiddenStates]) -> list[tuple[tuple, Batch]]:
    """The batches of ALL the requests (so a resumed run cuts the same ones), each with the
    (layers, dtype) its requests read: longest first, ties in request order (a row's states
    depend on its place in the batch by an ulp or so, so this order is the seed
    extractor's), cut by the run's batch size or token budget."""
    keys = list(unique)
    contexts = engine.policy.request_generation_contexts([unique[k] for k in keys])
    engine.truncated.update((k, c.dropped) for k, c in zip(keys, contexts) if c.dropped)
    groups: dict[tuple, list[PlannedRow]] = defaultdict(list)  # other blocks or dtypes: batches of their own
    for key, context in sorted(zip(keys, contexts), key=lambda kc: -len(kc[1].tokens)):  # stable: request order
        request = unique[key]
        groups[(request.layers, request.dtype)].append(PlannedRow(Row(context.tokens, ()), (key,)))
    return [(group, b) for group, rows in sorted(groups.items()) for b in partition(rows, engine.limits)]


def _run(engine: Host, backend: HiddenStateBackend, rows: list[tuple[int, ...]], layers: tuple[int, ...],
         dtype: str) -> list[np.ndarray]:
    """One [len(layers), hidden size] array per row, halving the batch while it does not fit."""
    try:
        return list(backend.hidden_states(rows, layers, dtype))
    except BatchTooLarge:
        if len(rows) == 1:
            raise UserError(f"one prompt of {len(rows[0])} tokens does not fit in the device's memory; "
                            "lower max_prompt_tokens or use a device with more memory") from None
    engine.stats.oom_splits += 1
    half = len(rows) // 2
    return _run(engine, backend, rows[:half], layers, dtype) + _run(engine, backend, rows[half:], layers, dtype)


def _store(engine: Host, fingerprint: str, results: dict[str, HiddenStatesResult]) -> None:
    if engine.cache is not None and results:
        engine.cache.put_hidden(fingerprint, results)
