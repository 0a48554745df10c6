"""Rolling (whole-document) requests in the engine: one request -> its chunks -> one result.

Each chunk of a `RollingLoglikelihood` (`TokenizationPolicy.rolling_windows`) is a unit
of work with its own key (`chunk_key`), planned, batched and scored beside ordinary
loglikelihood windows. The resume cache holds both levels under the rolling fingerprint
(`rolling_fingerprint`, which carries `ROLLING_POLICY_VERSION`): every chunk as soon as
its batch is done, so a killed run never rescores a stored chunk, and the request's sum
once its last chunk is stored, so a finished request is read back without tokenizing.
"""

from __future__ import annotations

import hashlib
import json
import math
from dataclasses import dataclass
from typing import Mapping, Sequence

from proctor.engine.tokens import ROLLING_POLICY_VERSION, TokenizationPolicy, Window
from proctor.requests import LoglikelihoodResult, RollingLoglikelihood


def rolling_fingerprint(fingerprint: str) -> str:
    """Cache fingerprint of rolling requests and their chunks (changes with the rolling policy)."""
    return f"{fingerprint}|rolling={ROLLING_POLICY_VERSION}"


def chunk_key(request_key: str, index: int) -> str:
    """Key of chunk `index` of a rolling request (never equal to any request's key)."""
    payload = json.dumps(["rolling_chunk", request_key, index])
    return hashlib.sha256(payload.encode("utf-8")).hexdigest()


@dataclass(frozen=True)
class RollingWork:
    """The chunks of some rolling requests."""

    chunks: dict[str, tuple[str, ...]]     # request key -> its chunk keys, in document order
    windows: dict[str, Window]              # chunk key -> what the model is fed

    @classmethod
    def expand(cls, policy: TokenizationPolicy, requests: Mapping[str, RollingLoglikelihood]) -> "RollingWork":
        """Cut each request's text into the policy's rolling windows, one keyed chunk each."""
        found = policy.rolling_windows([r.text for r in requests.values()])
        chunks: dict[str, tuple[str, ...]] = {}
        windows: dict[str, Window] = {}
        for key, doc in zip(requests, found):
            keys = tuple(chunk_key(key, i) for i in range(len(doc)))
            chunks[key] = keys
            windows.update(zip(keys, doc))
        return cls(chunks, windows)


def combine(chunks: Sequence[LoglikelihoodResult]) -> LoglikelihoodResult:
    """Sum a document's chunk results into its own (none: 0.0 over 0 tokens)."""
    return LoglikelihoodResult(
        sum_logits=math.fsum(c.sum_logits for c in chunks),
        num_tokens=sum(c.num_tokens for c in chunks),
        is_greedy=all(c.is_greedy for c in chunks),
    )


class RollingTally:
    """Chunk results of unfinished rolling requests, and the requests they complete."""

    def __init__(self, work: RollingWork, unfinished: Sequence[str], stored: Mapping[str, LoglikelihoodResult]):
        self.work = work
        self.results = dict(stored)
        self.remaining = {key: sum(k not in stored for k in work.chunks[key]) for key in unfinished}
        self.owner = {k: key for key in unfinished for k in work.chunks[key]}

    @property
    def pending(self) -> set[str]:
        """Chunk keys still to score."""
        return {k for k in self.owner if k not in self.results}

    def complete(self) -> dict[str, LoglikelihoodResult]:
        """Return the requests with no chunk left to score (all stored, or none at all: an empty text)."""
        return {key: self._sum(key) for key, n in self.remaining.items() if n == 0}

    def add(self, new: Mapping[str, LoglikelihoodResult]) -> dict[str, LoglikelihoodResult]:
        """Record newly scored chunks (each once); return the requests they complete."""
        self.results.update(new)
        completed = []
        for k in new:
            key = self.owner[k]
            self.remaining[key] -= 1
            if self.remaining[key] == 0:
                completed.append(key)
        return {key: self._sum(key) for key in completed}

    def _sum(self, key: str) -> LoglikelihoodResult:
        return combine([self.results[k] for k in self.work.chunks[key]])
