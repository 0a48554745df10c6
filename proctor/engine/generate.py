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
from typing import TYPE_CHECKING, Iterator, Mapping, Sequence

from proctor.engine.gen_plan import PlannedGen, check_request, plan_generation
from proctor.engine.lifecycle import Done
from proctor.engine.tokens import GENERATION_POLICY_VERSION
from proctor.engine.workload import counted, keep_rate, measured_rate, workload_line
from proctor.errors import BatchTooLarge, UserError
from proctor.requests import Generate, GenerateResult, Generation

if TYPE_CHECKING:
    from proctor.engine.engine import Engine


# Auto generation decodes as many samples at once as this many times the backend's
# scoring token budget holds generated tokens (a sample stores only its own: prompts and
# shared prefixes are stored once). Decoding reads every weight once per step whatever
# the batch, so on a CPU many rows decode several times faster than one: GSM8K n=8 ran
# at 85 new tokens/s with 64 slots and 108 with 128 (README, generation speed).
GEN_BUDGET_FACTOR = 64
MAX_AUTO_SLOTS = 256
RATE = "generate"  # the rate kept for the next run's rough time (`proctor.engine.workload`)


def generation_slots(engine: Engine, rows: Sequence[PlannedGen]) -> int:
    """How many samples the backend decodes at once."""
    if engine.deterministic:
        return 1
    if engine.limits.max_rows is not None:
        return engine.limits.max_rows
    # the engine's token budget (the backend's, agreed by all ranks)
    assert engine.limits.max_tokens is not None  # batch limits set either rows or tokens
    longest = max(r.row.max_new_tokens for r in rows)
    return max(1, min(MAX_AUTO_SLOTS, GEN_BUDGET_FACTOR * engine.limits.max_tokens // longest))


def request_fingerprint(engine: Engine, request: Generate) -> str:
    """Return the cache-key prefix of a generation request: a sampled one's also names the run seed."""
    base = f"{engine.fingerprint}|gen={GENERATION_POLICY_VERSION}"
    return f"{base}|seed={engine.seed}" if request.do_sample else base


class Generating:
    """The generation kind: one `Engine.generate` call (counters in the engine's gen_* stats)."""

    description = "generate"

    def __init__(self, engine: Engine):
        self.engine = engine
        self.started = time.perf_counter()
        self.unique: Mapping[str, Generate] = {}
        self.fingerprints: dict[str, str] = {}
        self.tokens_before = 0  # the engine's gen_tokens when this call's work began

    def start(self, unique: Mapping[str, Generate]) -> None:
        """Check the requests and note each one's fingerprint (sampled ones depend on the run seed)."""
        self.started = time.perf_counter()
        for request in unique.values():
            check_request(request)
        self.unique = unique
        self.fingerprints = {k: request_fingerprint(self.engine, r) for k, r in unique.items()}

    def cached(self, keys: Sequence[str]) -> Iterator[dict[str, GenerateResult]]:
        """Yield the stored generations of `keys`, one part per fingerprint."""
        cache = self.engine.cache
        if cache is not None:
            for fp in dict.fromkeys(self.fingerprints[k] for k in keys):
                yield cache.get_generations(fp, [k for k in keys if self.fingerprints[k] == fp])

    def counted(self, requests: int, unique: int, cached: int) -> None:
        """Set the engine's gen_requests, gen_unique and gen_cached counters."""
        stats = self.engine.stats
        stats.gen_requests, stats.gen_unique, stats.gen_cached = requests, unique, cached

    def held_everywhere(self, keys: Sequence[str]) -> None:
        """Note the contexts' truncation: read from the cache, or found by tokenizing them without one."""
        if self.engine.cache is not None:  # noted when they were planned
            self.engine.truncated.update(self.engine.cache.get_truncated(self.engine.fingerprint, keys))
        else:
            self._contexts(keys)

    def _contexts(self, keys: Sequence[str]) -> list:
        """Each request's (left-truncated) context; notes (and stores) what truncation cut."""
        engine = self.engine
        contexts = engine.policy.request_generation_contexts([self.unique[k] for k in keys])
        dropped = {k: c.dropped for k, c in zip(keys, contexts) if c.dropped}
        engine.truncated.update(dropped)
        if engine.cache is not None:
            engine.cache.put_truncated(engine.fingerprint, dropped)
        return contexts

    def plan(self, unique: Mapping[str, Generate], pending: set[str]) -> list[PlannedGen]:
        """Return the rows of the requests no rank holds, in the order of the plan of them all."""
        keys = list(unique)
        contexts = self._contexts(keys)
        # a chat also stops at its template's end of turn (the row's stop strings)
        policy = self.engine.policy
        planned = plan_generation([(k, replace(unique[k], stop=policy.stop(unique[k])), c.tokens)
                                   for k, c in zip(keys, contexts)], self.engine.seed)
        self.engine.stats.gen_batches = 1
        self.tokens_before = self.engine.stats.gen_tokens
        return [p for p in planned if p.key in pending]

    def workload(self, units: Sequence[PlannedGen], pending: int, cached: int) -> str:
        """Say how many requests and samples are to generate, up to how many tokens, and roughly how long."""
        samples = sum(len(p.row.seeds) for p in units)
        bound = sum(len(p.row.seeds) * p.row.max_new_tokens for p in units)
        longest = max((p.row.max_new_tokens for p in units), default=0)
        each = {len(p.row.seeds) for p in units}
        drawn = "" if samples == len(units) else f", {next(iter(each))} samples each" if len(each) == 1 else \
            f", {counted(samples, 'sample')}"
        held = f" ({cached:,} more cached)" if cached else ""
        return workload_line(self.description, f"{counted(pending, 'request')}{held}{drawn}, up to {longest:,} new "
                             f"tokens a sample (at most {bound:,} tokens)", bound, measured_rate(self.engine, RATE),
                             at_most=True)

    def measured(self, seconds: float) -> None:
        """Keep this call's rate (new tokens/s)."""
        keep_rate(self.engine, RATE, self.engine.stats.gen_tokens - self.tokens_before, seconds)

    def execute(self, units: Sequence[PlannedGen], done: Done) -> None:
        """Send the rows to the backend as one queue (continuous batching), halving the slots on running out of memory.

        A request is stored as soon as all its samples are done.
        """
        rows = list(units)
        if not rows:
            return
        stats = self.engine.stats
        slots = stats.gen_slots = generation_slots(self.engine, rows)
        stats.gen_prompt_tokens += sum(len(r.row.tokens) for r in rows)
        finished: set[str] = set()
        while True:
            try:
                stats.gen_batches_run += 1
                self._send(rows, slots, finished, done)
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
            rows = [r for r in rows if r.key not in finished]

    def _send(self, rows: list[PlannedGen], slots: int, finished: set[str], done: Done) -> None:
        def row_done(i: int, samples: tuple[Generation, ...]) -> None:
            self._store(rows[i], samples, done)
            finished.add(rows[i].key)

        self.engine.calling_model()
        self.engine.backend.generate([r.row for r in rows], on_done=row_done, slots=slots)

    def _store(self, planned: PlannedGen, samples: tuple[Generation, ...], done: Done) -> None:
        engine, stats = self.engine, self.engine.stats
        tokens = sum(s.num_tokens for s in samples)
        stats.gen_samples += len(samples)
        stats.gen_tokens += tokens
        if stats.gen_first_done_seconds is None:
            stats.gen_first_done_seconds = time.perf_counter() - self.started
        if stats.first_batch_seconds is None:
            stats.first_batch_seconds = time.perf_counter() - engine.started_at(self.started)
        request = self.unique[planned.key]
        if not request.do_sample:  # every repeat of a greedy request is the same text
            samples = samples * request.repeats
        result = GenerateResult(samples)
        if engine.cache is not None:
            engine.cache.put_generations(self.fingerprints[planned.key], {planned.key: result})
        done({planned.key: result}, tokens)

    def finish(self, done: Done) -> None:
        """Nothing is made of parts."""

    def store(self, results: Mapping[str, GenerateResult]) -> None:
        """Store generations other ranks made, each under its request's fingerprint."""
        if self.engine.cache is not None:
            for fp in set(self.fingerprints[k] for k in results):
                self.engine.cache.put_generations(fp, {k: r for k, r in results.items() if self.fingerprints[k] == fp})
