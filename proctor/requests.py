"""Requests: frozen, hashable descriptions of work for a backend.

A request's `key` is its identity everywhere: the engine dedupes on it and the
resume cache stores results under it. It depends only on the request's fields.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass
from typing import ClassVar, Optional, Sequence, Union


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
class RollingLoglikelihood:
    """Log-probability of a whole document `text` (perplexity/BPB), scored in rolling chunks.

    Chunking is `proctor.engine.tokens.rolling_windows`: every text token is a target once,
    the first conditioned on BOS (else EOS), no EOS target. The result sums all chunks:
    `sum_logits` over every target, `num_tokens` = targets scored, `is_greedy` = all greedy.
    A text with no tokens scores 0.0 over 0 tokens.
    """

    text: str
    kind: ClassVar[str] = "loglikelihood_rolling"

    @property
    def key(self) -> str:
        payload = json.dumps([self.kind, self.text], ensure_ascii=False)
        return hashlib.sha256(payload.encode("utf-8")).hexdigest()

    def to_dict(self) -> dict:
        return {"request_type": self.kind, "text": self.text}


@dataclass(frozen=True)
class LoglikelihoodResult:
    """What a backend returns for one Loglikelihood request."""

    sum_logits: float
    num_tokens: int
    is_greedy: bool


@dataclass(frozen=True)
class Generate:
    """Text generated from `context` (OLMES/lm-eval `generate_until` semantics).

    The context is left-truncated to `max_length - max_gen_toks` tokens; generation stops
    at the model's EOS, at `max_gen_toks` new tokens, or at the first of `stop`, and the
    text is cut before that stop sequence. `repeats` samples are drawn; with
    `do_sample=False` they are all the greedy text.
    """

    context: str
    max_gen_toks: int = 256
    stop: tuple[str, ...] = ()
    do_sample: bool = False
    temperature: float = 0.0
    top_p: float = 1.0
    repeats: int = 1
    kind: ClassVar[str] = "generate"

    def __post_init__(self) -> None:
        if not isinstance(self.stop, tuple):
            raise TypeError("Generate.stop must be a tuple of strings (requests are hashable)")

    @property
    def key(self) -> str:
        payload = json.dumps([self.kind, *self.to_dict().values()], ensure_ascii=False)
        return hashlib.sha256(payload.encode("utf-8")).hexdigest()

    def to_dict(self) -> dict:
        return {
            "request_type": self.kind,
            "context": self.context,
            "max_gen_toks": self.max_gen_toks,
            "stop": list(self.stop),
            "do_sample": self.do_sample,
            "temperature": self.temperature,
            "top_p": self.top_p,
            "repeats": self.repeats,
        }


@dataclass(frozen=True)
class Generation:
    """One sample of a Generate request."""

    text: str              # cut before the first stop sequence; EOS not included
    num_tokens: int        # tokens generated (up to and including the stop/EOS token)
    finish_reason: str     # "stop" (a stop sequence), "eos", or "length" (max_gen_toks)


def finished_samples(samples: Sequence[Optional[Generation]]) -> Optional[tuple[Generation, ...]]:
    """A request's samples once every one has finished (none is None), else None."""
    done = tuple(g for g in samples if g is not None)
    return done if len(done) == len(samples) else None


def all_finished(rows: Sequence[Sequence[Optional[Generation]]]) -> list[tuple[Generation, ...]]:
    """Each request's samples, all of which must have finished."""
    out = []
    for row in rows:
        done = finished_samples(row)
        if done is None:
            raise RuntimeError("a generation request was left with unfinished samples")
        out.append(done)
    return out


@dataclass(frozen=True)
class GenerateResult:
    """What a backend returns for one Generate request: `repeats` samples, in sample order."""

    samples: tuple[Generation, ...]


Request = Union[Loglikelihood, RollingLoglikelihood, Generate]
Result = Union[LoglikelihoodResult, GenerateResult]
