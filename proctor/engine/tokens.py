"""The one audited tokenization policy for loglikelihood requests (spec: olmes.md).

It reproduces lm-evaluation-harness's HFLM (`TemplateLM.loglikelihood`, `_encode_pair`
and the truncation in `_loglikelihood_tokens`) for causal models:

- Trailing whitespace of the context moves to the front of the continuation.
- `context + continuation` and `context` are encoded without special tokens (no BOS);
  continuation tokens = whole[len(context_tokens):]. The model sees
  context_tokens + continuation_tokens (NOT `whole`, which may merge across the boundary).
- Empty context (e.g. unconditional scoring): as lm-eval, the continuation is encoded
  alone and conditioned on the prefix token (BOS, or EOS when the tokenizer has no
  BOS); when the continuation already starts with that token, its first token becomes
  the context instead. A whitespace-only context (lm-eval asserts on it) is treated as
  empty after its whitespace moved to the continuation.
- Left truncation: input = (context + continuation)[-(max_length + 1):][:-1]; the
  continuation is scored at the last len(continuation) input positions.

Generation contexts (`generation_contexts`, lm-eval's `HFLM.generate_until`):

- The context is encoded as is (no whitespace moves) and without special tokens. lm-eval
  0.4.13 calls the tokenizer with its default `add_special_tokens`, which prepends BOS
  for tokenizers that add one (Llama 2/3, Gemma); OLMES runs without BOS, and so does
  this policy, as for loglikelihood (tokenizers of the GPT-2/SmolLM/OLMo kind add none
  either way).
- Left truncation to the last `max_length - max_gen_toks` tokens (lm-eval's
  `left_truncate_len`), so context plus generation fit in `max_length`.
- A context that encodes to no tokens is conditioned on the prefix token (BOS, else EOS),
  as an empty loglikelihood context is; lm-eval would fail on it.
- A request's `max_prompt_tokens` (the factual probe's 192) cuts further, to its last
  that many tokens. Hidden-state requests read their context the same way, with no room
  kept for new tokens.

Rolling documents (`rolling_windows`: perplexity/BPB offline and in-loop alike):

- The text is encoded without special tokens; every text token is a target exactly once,
  the first conditioned on the prefix token (BOS, else EOS); no EOS target is added.
- Chunks of at most `max_length` targets; a later chunk's only context is the previous
  chunk's last target (adjacent chunks share one token, earlier context is discarded).
- A text that encodes to no tokens has no chunks (an empty document is skipped).

The lm-eval policy (requests with `policy="lm_eval"`, the lm-eval-format specs) differs
in two ways, as lm-eval 0.4.13's HFLM does: texts are encoded WITH the tokenizer's special
tokens (`tok_encode`/`tok_batch_encode`: BOS for Llama/Gemma-style tokenizers, nothing for
GPT-2/SmolLM-style ones) unless the text already starts with the BOS (loglikelihood: the
decoded prefix token; generation: `bos_token`), and its context window is the model's
(`lm_eval_max_length`) instead of the OLMES default. An empty loglikelihood context is
handled as above under both policies.

Chat contexts (`proctor.requests.Chat`) are rendered with the run's chat template
(`proctor.engine.chat.render`) and then tokenized as text under the request's policy.

Every backend and the in-loop path must tokenize through this module.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable, Optional, Protocol, Sequence, TypeVar, Union

from proctor.engine.chat import ChatTemplate, end_of_turn, render
from proctor.errors import UserError
from proctor.requests import Chat, Context, Generate, HiddenStates, Loglikelihood

# Bump when the policy's output could change; it is part of every resume-cache key.
POLICY_VERSION = "olmes-1"
# The same for generation contexts and decoding; part of every generation cache key.
# gen-2: continuous batching over shared prefixes (attention summed in another order).
GENERATION_POLICY_VERSION = "gen-2"
# The same for rolling documents; part of every rolling cache key.
ROLLING_POLICY_VERSION = "rolling-1"
_ENCODE_CHUNK = 2048  # texts per batched tokenizer call: parallel, with bounded memory


class TextEncoder(Protocol):
    """The slice of a Hugging Face tokenizer the policy needs."""

    bos_token_id: Optional[int]
    eos_token_id: Optional[int]

    def encode(self, text: str, add_special_tokens: bool = ...) -> list[int]:
        """Return the token ids of `text`, with the tokenizer's special tokens or without."""


@dataclass(frozen=True)
class EncodedPair:
    """Context and continuation tokens of one request, before truncation."""

    context: tuple[int, ...]
    continuation: tuple[int, ...]


@dataclass(frozen=True)
class Window:
    """What the model is fed for one request and where its continuation is read."""

    inputs: tuple[int, ...]        # model input, at most max_length tokens
    start: int                     # position whose next-token distribution scores targets[0]
    targets: tuple[int, ...]       # the continuation tokens, scored at start, start+1, ...
    dropped: int = 0               # context tokens left truncation cut off


def split_trailing_space(context: str, continuation: str) -> tuple[str, str]:
    """Move the context's trailing whitespace to the front of the continuation."""
    stripped = context.rstrip()
    n_spaces = len(context) - len(stripped)
    if n_spaces == 0:
        return context, continuation
    return stripped, context[-n_spaces:] + continuation


def prefix_token_id(tokenizer: TextEncoder) -> int:
    """Return the token an empty context is replaced by (lm-eval's `prefix_token_id`)."""
    token = tokenizer.bos_token_id if tokenizer.bos_token_id is not None else tokenizer.eos_token_id
    if token is None:
        raise ValueError("tokenizer has neither a BOS nor an EOS token to condition an empty context on")
    return token


def window(pair: EncodedPair, max_length: int) -> Window:
    """Left-truncate context+continuation to `max_length` inputs, as lm-eval does."""
    n_cont = len(pair.continuation)
    if n_cont > max_length:
        raise UserError(f"a continuation of {n_cont} tokens does not fit in max_length={max_length}; "
                        f"raise --max-length to at least {n_cont}")
    whole = pair.context + pair.continuation
    inputs = whole[-(max_length + 1):][:-1]
    return Window(inputs=inputs, start=len(inputs) - n_cont, targets=pair.continuation,
                  dropped=max(0, len(whole) - 1 - max_length))


def rolling_windows(tokens: Sequence[int], prefix_token: int, max_length: int) -> list[Window]:
    """Cut a document's tokens into chunks of at most `max_length` targets, each scored once.

    Chunk k covers targets tokens[k*max_length : (k+1)*max_length]; its inputs are the
    token before them (the prefix token for the first chunk) and all its targets but the
    last, so inputs and targets have the same length and `start` is 0.
    """
    if max_length < 1:
        raise ValueError(f"max_length must be positive, got {max_length}")
    out = []
    for begin in range(0, len(tokens), max_length):
        targets = tuple(tokens[begin : begin + max_length])
        first = prefix_token if begin == 0 else tokens[begin - 1]
        out.append(Window(inputs=(first, *targets[:-1]), start=0, targets=targets))
    return out


R = TypeVar("R")
T = TypeVar("T")


def _by_policy(items: Sequence[R], policy_of: Callable[[R], str],
               run: Callable[[list[R], str], list[T]]) -> list[T]:
    """`run` on each policy's items, results back in the items' order."""
    out: list = [None] * len(items)
    for policy in dict.fromkeys(policy_of(x) for x in items):
        at = [i for i, x in enumerate(items) if policy_of(x) == policy]
        for i, result in zip(at, run([items[i] for i in at], policy)):
            out[i] = result
    return out


class TokenizationPolicy:
    """Encodes requests' texts, in bulk: each distinct text is encoded once.

    `max_length` is the OLMES policy's context window (and the rolling documents');
    `lm_eval_max_length` the lm-eval policy's (default: the same). `chat_template` renders
    chat contexts; a chat request without one is an error.
    """

    def __init__(self, tokenizer: TextEncoder, *, max_length: int, lm_eval_max_length: Optional[int] = None,
                 chat_template: Optional[ChatTemplate] = None):
        for n in (max_length, lm_eval_max_length or max_length):
            if n < 1:
                raise ValueError(f"max_length must be positive, got {n}")
        self.tokenizer = tokenizer
        self.max_length = max_length
        self.lm_eval_max_length = lm_eval_max_length or max_length
        self.chat_template = chat_template
        self.prefix_token_id = prefix_token_id(tokenizer)
        self._end_of_turn: Optional[tuple[str, ...]] = None

    def max_length_of(self, policy: str) -> int:
        """Return the context window of a policy ("lm_eval" or "olmes")."""
        return self.lm_eval_max_length if policy == "lm_eval" else self.max_length

    # ---- chat -----------------------------------------------------------------------

    def text(self, context: Context, policy: str = "olmes") -> str:
        """Return a request's context as text: a chat rendered with the run's template."""
        if isinstance(context, str):
            return context
        if self.chat_template is None:
            raise UserError("a task asked for a chat prompt but the run has no chat template; "
                            "pass --chat-template (the tokenizer's) or --chat-template FILE")
        return render(context, self.chat_template, self.tokenizer, drop_system_on_error=policy == "lm_eval")

    def stop(self, request: Generate) -> tuple[str, ...]:
        """Return a generation's stop strings: the request's, and for a chat the template's end of turn."""
        if not isinstance(request.context, Chat) or self.chat_template is None:
            return request.stop
        if self._end_of_turn is None:
            self._end_of_turn = end_of_turn(self.chat_template, self.tokenizer)
        return request.stop + tuple(s for s in self._end_of_turn if s not in request.stop)

    # ---- encoding ---------------------------------------------------------------------

    def _no_special_prefix(self, kind: str) -> Optional[str]:
        """Return the start of a text to which lm-eval adds no special tokens (its BOS check).

        Loglikelihood compares the decoded prefix token, generation `bos_token`.
        """
        if kind == "loglikelihood":
            decode: Any = getattr(self.tokenizer, "decode", None)
            return decode([self.prefix_token_id]) if decode else None
        bos = getattr(self.tokenizer, "bos_token", None)
        return bos if isinstance(bos, str) and bos else None

    def _encode_texts(self, texts: Sequence[str], policy: str = "olmes",
                      kind: str = "loglikelihood") -> dict[str, tuple[int, ...]]:
        """Token ids of each distinct text; a fast tokenizer encodes them in parallel batches.

        The OLMES policy never adds special tokens; the lm-eval one adds the tokenizer's
        unless the text starts with its BOS (`_no_special_prefix`).
        """
        distinct = list(dict.fromkeys(texts))
        if policy != "lm_eval":
            return self._encode_plain(distinct, special=False)
        skip = self._no_special_prefix(kind)
        plain = [t for t in distinct if skip and t.startswith(skip)]
        return {**self._encode_plain(plain, special=False),
                **self._encode_plain([t for t in distinct if not (skip and t.startswith(skip))], special=True)}

    def _encode_plain(self, distinct: Sequence[str], *, special: bool) -> dict[str, tuple[int, ...]]:
        if getattr(self.tokenizer, "is_fast", False):
            ids: list = []
            for i in range(0, len(distinct), _ENCODE_CHUNK):
                chunk = list(distinct[i : i + _ENCODE_CHUNK])
                if chunk:
                    ids.extend(self.tokenizer(chunk, add_special_tokens=special)["input_ids"])  # type: ignore[operator]
        else:
            ids = [self.tokenizer.encode(t, add_special_tokens=special) for t in distinct]
        return {t: tuple(x) for t, x in zip(distinct, ids)}

    def encode_many(self, pairs: Sequence[tuple[str, str]], policy: str = "olmes") -> list[EncodedPair]:
        """Encode (context, continuation) pairs; the continuation's tokens are those context+continuation adds.

        The context's trailing whitespace moves to the continuation first. An empty context
        becomes the prefix token (taken from the continuation when it already starts with it).
        """
        moved = [split_trailing_space(c, x) for c, x in pairs]
        encoded = self._encode_texts([t for c, x in moved if c != "" for t in (c, c + x)], policy)
        # an empty context: the continuation alone, without special tokens (both policies)
        alone = self._encode_texts([x for c, x in moved if c == ""])
        out = []
        for context, continuation in moved:
            if context == "":
                cont = alone[continuation]
                if cont and cont[0] == self.prefix_token_id:
                    pair = EncodedPair(cont[:1], cont[1:])
                else:
                    pair = EncodedPair((self.prefix_token_id,), cont)
            else:
                ctx = encoded[context]
                pair = EncodedPair(ctx, encoded[context + continuation][len(ctx) :])
            if not pair.continuation:
                raise ValueError(f"continuation {continuation!r} encodes to no tokens after the context")
            out.append(pair)
        return out

    def encode(self, context: str, continuation: str, policy: str = "olmes") -> EncodedPair:
        """Encode one (context, continuation) pair (see `encode_many`)."""
        return self.encode_many([(context, continuation)], policy)[0]

    def window(self, context: str, continuation: str, policy: str = "olmes") -> Window:
        """Return one pair's window, left-truncated to the policy's context window."""
        return window(self.encode(context, continuation, policy), self.max_length_of(policy))

    def windows(self, pairs: Sequence[tuple[str, str]], policy: str = "olmes") -> list[Window]:
        """Windows of many pairs, encoded a chunk at a time so only one chunk's texts are held."""
        out: list[Window] = []
        n = self.max_length_of(policy)
        for i in range(0, len(pairs), _ENCODE_CHUNK):
            out.extend(window(p, n) for p in self.encode_many(pairs[i : i + _ENCODE_CHUNK], policy))
        return out

    def _texts(self, contexts: Sequence[Context], policy: str) -> list[str]:
        """Each context as text, every distinct chat rendered once (a document's choices share one)."""
        rendered = {c: self.text(c, policy) for c in dict.fromkeys(contexts)}
        return [rendered[c] for c in contexts]

    def request_windows(self, requests: Sequence[Loglikelihood]) -> list[Window]:
        """Each loglikelihood request's window, under its own policy, chats rendered."""
        def run(group: list[Loglikelihood], policy: str) -> list[Window]:
            texts = self._texts([r.context for r in group], policy)
            return self.windows([(t, r.continuation) for t, r in zip(texts, group)], policy)
        return _by_policy(requests, lambda r: r.policy, run)

    def rolling_windows(self, texts: Sequence[str]) -> list[list[Window]]:
        """Each text's chunks (`rolling_windows`); a text with no tokens has none."""
        out: list[list[Window]] = []
        for i in range(0, len(texts), _ENCODE_CHUNK):
            chunk = texts[i : i + _ENCODE_CHUNK]
            encoded = self._encode_texts(chunk)
            out.extend(rolling_windows(encoded[t], self.prefix_token_id, self.max_length) for t in chunk)
        return out

    def generation_contexts(self, requests: Sequence[tuple[str, int]], policy: str = "olmes") -> list[GenerationContext]:
        """Model input tokens of (context, max_gen_toks) pairs, left-truncated to leave room."""
        n = self.max_length_of(policy)
        return self._left_truncated([(c, context_room(n, m)) for c, m in requests], policy)

    def _left_truncated(self, items: Sequence[tuple[str, int]], policy: str) -> list[GenerationContext]:
        """Each (text, room)'s tokens as a generation context, the last `room` of them kept."""
        out: list[GenerationContext] = []
        for i in range(0, len(items), _ENCODE_CHUNK):
            chunk = items[i : i + _ENCODE_CHUNK]
            encoded = self._encode_texts([c for c, _ in chunk], policy, kind="generation")
            for context, room in chunk:
                tokens = encoded[context] or (self.prefix_token_id,)
                out.append(GenerationContext(tokens[-room:], max(0, len(tokens) - room)))
        return out

    def request_generation_contexts(self, requests: Sequence[Union[Generate, HiddenStates]]) -> list[GenerationContext]:
        """Return each generation (or hidden-state) request's model input, under its own policy, chats rendered.

        Room for its new tokens is left in the window, and it keeps at most its `max_prompt_tokens`.
        """
        def run(group: list[Union[Generate, HiddenStates]], policy: str) -> list[GenerationContext]:
            texts = self._texts([r.context for r in group], policy)
            n = self.max_length_of(policy)
            rooms = [context_room(n, r.max_gen_toks) if isinstance(r, Generate) else n for r in group]
            rooms = [room if r.max_prompt_tokens is None else min(room, r.max_prompt_tokens)
                     for room, r in zip(rooms, group)]
            return self._left_truncated(list(zip(texts, rooms)), policy)
        return _by_policy(requests, lambda r: r.policy, run)


@dataclass(frozen=True)
class GenerationContext:
    """What a generation request's model input is, and how many context tokens truncation cut."""

    tokens: tuple[int, ...]
    dropped: int = 0


def context_room(max_length: int, max_gen_toks: int) -> int:
    """Context tokens a generation may keep: `max_length - max_gen_toks` (must be positive)."""
    if max_gen_toks < 1:
        raise UserError(f"max_gen_toks must be a positive integer, got {max_gen_toks}")
    if max_gen_toks >= max_length:
        raise UserError(
            f"a request generates up to {max_gen_toks} tokens, which leaves no room for its context "
            f"in max_length={max_length}; raise --max-length above {max_gen_toks}"
        )
    return max_length - max_gen_toks
