"""Generation work as backend rows, in a deterministic order.

A `GenRow` is one prompt's tokens, its decoding settings and the samples to draw from
it, each with its own seed; the backend prefills the prompt once for all of them and
schedules the samples itself (continuous batching). A greedy request needs one sample
however many `repeats` it asks for (they are all the same text), so its row has one.

Seeds depend only on (run seed, request key, sample index), so a sample's text does not
depend on which slot, position or run drew it.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass
from typing import Optional, Sequence

from proctor.errors import UserError
from proctor.requests import Chat, Generate


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
    """A request's row: its samples go to request `key`, in seed order."""

    key: str
    row: GenRow


def sample_seed(run_seed: int, key: str, index: int) -> int:
    """Return the seed of sample `index` of request `key` in a run seeded with `run_seed`."""
    digest = hashlib.sha256(f"{run_seed}:{key}:{index}".encode()).digest()
    return int.from_bytes(digest[:8], "little") & ((1 << 63) - 1)


def samples_needed(request: Generate) -> int:
    """Count the samples the backend draws: `repeats`, or one for greedy decoding (copied `repeats` times)."""
    return request.repeats if request.do_sample else 1


def check_request(request: Generate) -> None:
    """Reject a request whose repeats, temperature or top_p no backend can honour, with a `UserError`."""
    if request.repeats < 1:
        raise UserError(f"a Generate request needs repeats >= 1, got {request.repeats}")
    if request.do_sample and not request.temperature > 0:
        raise UserError(f"sampling (do_sample=True) needs a temperature above 0, got {request.temperature}")
    if not 0 < request.top_p <= 1:
        raise UserError(f"top_p must be in (0, 1], got {request.top_p}")


def plan_generation(
    requests: Sequence[tuple[str, Generate, tuple[int, ...]]], run_seed: int
) -> list[PlannedGen]:
    """Plan one row per (key, request, context tokens), longest context first, ties by key.

    The order is a function of the set, so neither arrival order nor the cache changes it.
    The requests are checked (`check_request`) by the engine before any work.
    """
    planned: list[PlannedGen] = []
    for key, req, tokens in sorted(requests, key=lambda r: (-len(r[2]), r[0])):
        seeds = tuple(sample_seed(run_seed, key, i) for i in range(samples_needed(req)))
        chat = req.context if isinstance(req.context, Chat) else None
        row = GenRow(tokens, req.max_gen_toks, req.stop, req.do_sample, req.temperature, req.top_p, seeds, chat)
        planned.append(PlannedGen(key, row))
    return planned
