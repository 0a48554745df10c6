"""What the engine needs from a backend: a tokenizer, an identity, row scoring and generation."""

from __future__ import annotations

from typing import Callable, Optional, Protocol, Sequence

from proctor.engine.gen_plan import GenRow
from proctor.engine.plan import Row
from proctor.engine.tokens import TextEncoder
from proctor.requests import Generation, LoglikelihoodResult


class Backend(Protocol):
    tokenizer: TextEncoder
    max_length: int

    @property
    def fingerprint(self) -> str:
        """Stable identity of model weights + dtype + device type + max_length."""

    def token_budget(self) -> int:
        """Tokens per batch for batch_size="auto" (deterministic per device)."""

    def score(self, rows: Sequence[Row]) -> list[tuple[LoglikelihoodResult, ...]]:
        """One forward pass over `rows`; results aligned with each row's readouts.

        A backend with `shares_prefixes` also takes `prefix=` (tokens every row continues)
        and `parents=` (row i continues row parents[i], -1 for none; see engine.plan.Batch).
        """

    def generate(
        self, rows: Sequence[GenRow], on_done: Optional[Callable[[int, tuple[Generation, ...]], None]] = None
    ) -> list[tuple[Generation, ...]]:
        """Each row's samples in seed order; `on_done(i, samples)` as soon as row i is finished."""
