"""Generation work as backend rows, and its deterministic batch partition.

A `GenRow` is one prompt's tokens, its decoding settings and the samples to draw from
it, each with its own seed; the backend prefills the prompt once for all of them. A
greedy request needs one sample however many `repeats` it asks for (they are all the
same text), so it gets one row of one sample. A sampled request whose `repeats` exceed
a batch's rows is cut into chunks of samples, each a row of its own.

Seeds depend only on (run seed, request key, sample index), so a sample's text does not
depend on which batch, position or run drew it.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass
from typing import Optional, Sequence

from proctor.errors import UserError
from proctor.requests import Chat, Generate

DEFAULT_SEED = 1234


@dataclass(frozen=True)
class GenRow:
    """One prompt's generation work for a backend."""

    tokens: tuple[int, ...]        # the (left-truncated) context tokens
    max_new_tokens: int
    stop: tuple[str, ...]          # stop strings; the backend adds the model's EOS tokens
    do_sample: bool
    temperature: float
    top_p: float
    seeds: tuple[int, ...]         # one per sample drawn from this row (greedy: one, unused)
    #: the request's chat, when its context is one: what a chat-completions server is sent
    #: instead of `tokens` (the same prompt, rendered by proctor's tokenization policy)
    chat: Optional[Chat] = None


@dataclass(frozen=True)
class PlannedGen:
    """A row and where its samples go: request `key`, samples first_sample, first_sample+1, ..."""

    key: str
    first_sample: int
    row: GenRow


@dataclass(frozen=True)
class GenBatch:
    rows: tuple[PlannedGen, ...]

    @property
    def keys(self) -> tuple[str, ...]:
        return tuple(dict.fromkeys(r.key for r in self.rows))

    @property
    def samples(self) -> int:
        return sum(len(r.row.seeds) for r in self.rows)

    @property
    def prompt_tokens(self) -> int:
        return sum(len(r.row.tokens) for r in self.rows)


@dataclass(frozen=True)
class GenLimits:
    """At most `max_samples` sample rows per batch, and at most `max_tokens` of context plus
    generation room summed over them (what the key/value cache holds at the end)."""

    max_samples: Optional[int] = None
    max_tokens: Optional[int] = None

    def fits(self, samples: int, tokens: int) -> bool:
        if self.max_samples is not None and samples > self.max_samples:
            return False
        return self.max_tokens is None or tokens <= self.max_tokens

    def samples_per_row(self, row_tokens: int) -> int:
        """How many samples of one prompt fit in a batch of their own (at least one)."""
        n = self.max_samples or 1 << 30
        if self.max_tokens is not None:
            n = min(n, self.max_tokens // max(row_tokens, 1))
        return max(n, 1)


def sample_seed(run_seed: int, key: str, index: int) -> int:
    """The seed of sample `index` of request `key` in a run seeded with `run_seed`."""
    digest = hashlib.sha256(f"{run_seed}:{key}:{index}".encode()).digest()
    return int.from_bytes(digest[:8], "little") & ((1 << 63) - 1)


def samples_needed(request: Generate) -> int:
    """Samples the backend draws: `repeats`, or one for greedy decoding (copied `repeats` times)."""
    return request.repeats if request.do_sample else 1


def check_request(request: Generate) -> None:
    if request.repeats < 1:
        raise UserError(f"a Generate request needs repeats >= 1, got {request.repeats}")
    if request.do_sample and not request.temperature > 0:
        raise UserError(f"sampling (do_sample=True) needs a temperature above 0, got {request.temperature}")
    if not 0 < request.top_p <= 1:
        raise UserError(f"top_p must be in (0, 1], got {request.top_p}")


def plan_generation(
    requests: Sequence[tuple[str, Generate, tuple[int, ...]]], limits: GenLimits, run_seed: int
) -> list[GenBatch]:
    """Batches of (key, request, context tokens), longest context first; a function of the set.

    Ties are broken by key, so neither arrival order nor which requests are cached changes
    the partition: a resumed run cuts the same batches as an uninterrupted one.
    """
    rows: list[PlannedGen] = []
    for key, req, tokens in sorted(requests, key=lambda r: (-len(r[2]), r[0])):
        check_request(req)
        n = samples_needed(req)
        chunk = limits.samples_per_row(len(tokens) + req.max_gen_toks)
        for first in range(0, n, chunk):
            seeds = tuple(sample_seed(run_seed, key, i) for i in range(first, min(n, first + chunk)))
            chat = req.context if isinstance(req.context, Chat) else None
            row = GenRow(tokens, req.max_gen_toks, req.stop, req.do_sample, req.temperature, req.top_p, seeds, chat)
            rows.append(PlannedGen(key, first, row))
    batches: list[GenBatch] = []
    current: list[PlannedGen] = []
    samples = packed = 0   # the current batch's sample rows and their tokens
    for planned in rows:
        n = len(planned.row.seeds)
        size = n * (len(planned.row.tokens) + planned.row.max_new_tokens)
        if current and not limits.fits(samples + n, packed + size):
            batches.append(GenBatch(tuple(current)))
            current, samples, packed = [], 0, 0
        current.append(planned)
        samples += n
        packed += size
    if current:
        batches.append(GenBatch(tuple(current)))
    return batches
