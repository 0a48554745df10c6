"""What the engine needs from a backend: a tokenizer, an identity, and row scoring."""

from __future__ import annotations

from typing import Protocol, Sequence

from proctor.engine.plan import Row
from proctor.engine.tokens import TextEncoder
from proctor.requests import LoglikelihoodResult


class Backend(Protocol):
    tokenizer: TextEncoder
    max_length: int

    @property
    def fingerprint(self) -> str:
        """Stable identity of model weights + dtype + device type + max_length."""

    def token_budget(self) -> int:
        """Padded tokens per batch for batch_size="auto" (deterministic per device)."""

    def score(self, rows: Sequence[Row]) -> list[tuple[LoglikelihoodResult, ...]]:
        """One forward pass over `rows`; results aligned with each row's readouts."""
