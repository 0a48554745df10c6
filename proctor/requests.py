"""Requests: frozen, hashable descriptions of work for a backend.

A request's `key` is its identity everywhere: the engine dedupes on it and the
resume cache stores results under it. It depends only on the request's fields.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass
from typing import ClassVar, Literal, Optional, Sequence, Union

import numpy as np

#: Which reference harness's tokenization a request follows (`proctor.engine.tokens`):
#: "olmes" — no special tokens, the run's --max-length (default 2048); "lm_eval" — the
#: tokenizer's own special tokens (BOS for Llama/Gemma), the model's context length.
Policy = Literal["olmes", "lm_eval"]
POLICIES: tuple[str, ...] = ("olmes", "lm_eval")


@dataclass(frozen=True)
class Message:
    """One chat turn."""

    role: str        # "system", "user" or "assistant"
    content: str

    def to_dict(self) -> dict:
        """Return the turn as a chat-template / OpenAI message: `{role, content}`."""
        return {"role": self.role, "content": self.content}


@dataclass(frozen=True)
class Chat:
    """A prompt as chat messages.

    The tokenization policy renders it with the model's chat template (`proctor.engine.chat`),
    and OpenAI-compatible servers get the messages.

    Rendered as `apply_chat_template(messages, add_generation_prompt=not continue_final,
    continue_final_message=continue_final)` followed by `suffix`.
    """

    messages: tuple[Message, ...]
    #: the last message is the start of the assistant's reply, to be continued (lm-eval's
    #: gen_prefix); otherwise the template's generation prompt opens the reply
    continue_final: bool = False
    #: text after the rendered template (OLMES's assistant_prefix)
    suffix: str = ""

    def __post_init__(self) -> None:
        """Refuse messages that are not a non-empty tuple, and continue_final without an assistant message last."""
        if not isinstance(self.messages, tuple) or not self.messages:
            raise TypeError("Chat.messages must be a non-empty tuple of Message (requests are hashable)")
        if self.continue_final and self.messages[-1].role != "assistant":
            raise ValueError("Chat.continue_final needs an assistant message last")

    def to_dict(self) -> dict:
        """Return the chat as JSON: its messages, with continue_final and suffix only when set."""
        out: dict = {"messages": [m.to_dict() for m in self.messages]}
        if self.continue_final:
            out["continue_final"] = True
        if self.suffix:
            out["suffix"] = self.suffix
        return out


Context = Union[str, Chat]


def _context_json(context: Context) -> Union[str, dict]:
    return context if isinstance(context, str) else context.to_dict()


def _check_policy(policy: str) -> None:
    if policy not in POLICIES:
        raise ValueError(f"unknown tokenization policy {policy!r}; known: {', '.join(POLICIES)}")


def _check_prompt(policy: str, limit: Optional[int]) -> None:
    _check_policy(policy)
    if limit is not None and (isinstance(limit, bool) or not isinstance(limit, int) or limit < 1):
        raise ValueError(f"max_prompt_tokens must be a positive integer or None, got {limit!r}")


def _hash(payload: list) -> str:
    return hashlib.sha256(json.dumps(payload, ensure_ascii=False).encode("utf-8")).hexdigest()


@dataclass(frozen=True)
class Loglikelihood:
    """Log-probability of `continuation` given `context` (OLMES/lm-eval semantics)."""

    context: Context
    continuation: str
    policy: Policy = "olmes"
    kind: ClassVar[str] = "loglikelihood"

    def __post_init__(self) -> None:
        """Refuse an unknown tokenization policy."""
        _check_policy(self.policy)

    @property
    def key(self) -> str:
        """The request's identity: a sha256 of its fields."""
        # the fields a plain OLMES request always had, so earlier caches stay valid
        extra = [] if self.policy == "olmes" else [self.policy]
        return _hash([self.kind, _context_json(self.context), self.continuation, *extra])

    def to_dict(self) -> dict:
        """Return the request's fields as JSON (`policy` only when it is not "olmes")."""
        out = {"request_type": self.kind, "context": _context_json(self.context),
               "continuation": self.continuation}
        if self.policy != "olmes":
            out["policy"] = self.policy
        return out


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
        """The request's identity: a sha256 of its kind and text."""
        payload = json.dumps([self.kind, self.text], ensure_ascii=False)
        return hashlib.sha256(payload.encode("utf-8")).hexdigest()

    def to_dict(self) -> dict:
        """Return the request's fields as JSON."""
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

    The context is left-truncated to `max_length - max_gen_toks` tokens, and to
    `max_prompt_tokens` where that is fewer (a prompt limit of the protocol's own, such as
    the factual probe's 192, whatever the run's --max-length); generation stops at the
    model's EOS, at `max_gen_toks` new tokens, or at the first of `stop`, and the text is
    cut before that stop sequence. `repeats` samples are drawn; with `do_sample=False`
    they are all the greedy text.
    """

    context: Context
    max_gen_toks: int = 256
    stop: tuple[str, ...] = ()
    do_sample: bool = False
    temperature: float = 0.0
    top_p: float = 1.0
    repeats: int = 1
    policy: Policy = "olmes"
    max_prompt_tokens: Optional[int] = None
    kind: ClassVar[str] = "generate"

    def __post_init__(self) -> None:
        """Refuse a `stop` that is not a tuple, an unknown policy and a bad `max_prompt_tokens`."""
        if not isinstance(self.stop, tuple):
            raise TypeError("Generate.stop must be a tuple of strings (requests are hashable)")
        _check_prompt(self.policy, self.max_prompt_tokens)

    @property
    def key(self) -> str:
        """The request's identity: a sha256 of its fields."""
        return _hash([self.kind, *self.to_dict().values()])

    def to_dict(self) -> dict:
        """Return the request's fields as JSON (`policy` and `max_prompt_tokens` only when not the default)."""
        out = {
            "request_type": self.kind,
            "context": _context_json(self.context),
            "max_gen_toks": self.max_gen_toks,
            "stop": list(self.stop),
            "do_sample": self.do_sample,
            "temperature": self.temperature,
            "top_p": self.top_p,
            "repeats": self.repeats,
        }
        if self.policy != "olmes":
            out["policy"] = self.policy
        if self.max_prompt_tokens is not None:  # absent by default: earlier caches stay valid
            out["max_prompt_tokens"] = self.max_prompt_tokens
        return out


@dataclass(frozen=True)
class Generation:
    """One sample of a Generate request."""

    text: str              # cut before the first stop sequence; EOS not included
    num_tokens: int        # tokens generated (up to and including the stop/EOS token)
    finish_reason: str     # "stop" (a stop sequence), "eos", or "length" (max_gen_toks)


def finished_samples(samples: Sequence[Optional[Generation]]) -> Optional[tuple[Generation, ...]]:
    """Return a request's samples once every one has finished (none is None), else None."""
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


HIDDEN_DTYPES: tuple[str, ...] = ("float16", "float32")


@dataclass(frozen=True)
class HiddenStates:
    """The residual stream at the last token of `context`, stored as `dtype`.

    It holds the output of each decoder block in `layers` (0-based; block l's output is
    transformers' `hidden_states[l + 1]`).

    The context is tokenized as a generation context is (the model has read the prompt and
    is about to answer) and left-truncated to `max_prompt_tokens`, else to the window.
    Only backends that run the model's layers in this process serve it (transformers).
    """

    context: Context
    layers: tuple[int, ...]
    position: Literal["last"] = "last"
    max_prompt_tokens: Optional[int] = None
    dtype: str = "float16"
    policy: Policy = "olmes"
    kind: ClassVar[str] = "hidden_states"

    def __post_init__(self) -> None:
        """Refuse bad layers, position, dtype, policy or `max_prompt_tokens`."""
        if not isinstance(self.layers, tuple) or not self.layers:
            raise TypeError("HiddenStates.layers must be a non-empty tuple of block indices")
        if any(isinstance(x, bool) or not isinstance(x, int) or x < 0 for x in self.layers):
            raise ValueError(f"HiddenStates.layers must be block indices >= 0, got {self.layers}")
        if self.position != "last":
            raise ValueError(f"HiddenStates.position must be 'last', got {self.position!r}")
        if self.dtype not in HIDDEN_DTYPES:
            raise ValueError(f"HiddenStates.dtype must be one of {', '.join(HIDDEN_DTYPES)}, got {self.dtype!r}")
        _check_prompt(self.policy, self.max_prompt_tokens)

    @property
    def key(self) -> str:
        """The request's identity: a sha256 of its fields."""
        return _hash([self.kind, *self.to_dict().values()])

    def to_dict(self) -> dict:
        """Return the request's fields as JSON."""
        return {"request_type": self.kind, "context": _context_json(self.context), "layers": list(self.layers),
                "position": self.position, "max_prompt_tokens": self.max_prompt_tokens, "dtype": self.dtype,
                "policy": self.policy}


@dataclass(frozen=True, eq=False)
class HiddenStatesResult:
    """What the engine returns for one HiddenStates request: [len(layers), d_model] of its dtype."""

    states: np.ndarray


Request = Union[Loglikelihood, RollingLoglikelihood, Generate, HiddenStates]
Result = Union[LoglikelihoodResult, GenerateResult, HiddenStatesResult]


def policy_of(request: Request) -> str:
    """Whose tokenization a request follows (rolling documents have one rule of their own)."""
    return "olmes" if isinstance(request, RollingLoglikelihood) else request.policy


def is_chat(request: Request) -> bool:
    """Whether the request's context is a chat (the run then needs a chat template)."""
    return not isinstance(request, RollingLoglikelihood) and isinstance(request.context, Chat)
