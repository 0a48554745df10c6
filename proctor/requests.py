"""Requests: frozen, hashable descriptions of work for a backend.

A request's `key` is its identity everywhere: the engine dedupes on it and the
resume cache stores results under it. It depends only on the request's fields.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass
from typing import ClassVar, Union


@dataclass(frozen=True)
class Loglikelihood:
    """Log-probability of `continuation` given `context` (OLMES/lm-eval semantics)."""

    context: str
    continuation: str
    kind: ClassVar[str] = "loglikelihood"

    @property
    def key(self) -> str:
        payload = json.dumps([self.kind, self.context, self.continuation], ensure_ascii=False)
        return hashlib.sha256(payload.encode("utf-8")).hexdigest()

    def to_dict(self) -> dict:
        return {"request_type": self.kind, "context": self.context, "continuation": self.continuation}


@dataclass(frozen=True)
class LoglikelihoodResult:
    """What a backend returns for one Loglikelihood request."""

    sum_logits: float
    num_tokens: int
    is_greedy: bool


Request = Union[Loglikelihood]
Result = Union[LoglikelihoodResult]
