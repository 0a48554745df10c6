"""OpenAI-compatible completions backend (vLLM, llama.cpp, TGI...), with chat completions for chat prompts.

Requests go to `POST {base_url}/completions`, and to `POST {base_url}/chat/completions`
for generating from chat prompts.

The engine tokenizes with a local tokenizer (`tokenizer=`, the model alias's by default),
so requests are the same token rows every backend gets. Prompts go to the server as
token ids where it accepts a list of ints (OpenAI, vLLM), else as the decoded text,
which the server re-tokenizes (llama-cpp-python): `prompt_format="auto"` asks once.

Loglikelihood, two ways (`scoring="auto"` probes the server once and picks):

- "echo": one request per readout with the context and continuation as the prompt,
  `echo: true, logprobs: 1, max_tokens: 1` (max_tokens 0 is refused by some servers and
  means "unlimited" to others; the one generated token is ignored). `token_logprobs[i]`
  is log p(prompt token i | tokens before it); continuation tokens are read by position
  (token-id prompts) or by `text_offset` at or after the context's text (text prompts).
  The probe checks the server's alignment: the entry of the generated (greedy) token
  must be its top-1. llama-cpp-python's server fails this for models without a BOS
  token (its echo log-probs are shifted by one token, abetlen/llama-cpp-python#1983).
- "forced": one request per continuation token: the context so far as the prompt,
  `max_tokens: 1, temperature: 0, logprobs: 1` and `logit_bias {token: +100}`, so the
  generated token is the target and its reported log-prob (read from the unbiased
  distribution) is log p(target | context). Exact wherever the server reports raw
  log-probs (llama-cpp-python does); costs one request per continuation token.

`is_greedy` is whether each target's log-prob is the largest in its `top_logprobs`.
A server that can do neither gives a UserError; it can still generate. A chat request
(`proctor.requests.Chat` context) is scored the same way, over the prompt proctor's
tokenization policy rendered with the run's chat template: the local tokenizer's template
(or --chat-template) must be the one the server's model was trained with, and the one the
server generates chats with (below), or scores and generations see different prompts.

Generation: one request per sample (`n` is not honoured everywhere), with the sample's
seed, temperature/top_p (greedy: temperature 0), `max_tokens` and `stop`; the text is cut
again at the first stop string, as the HF backend cuts it.

Chat generation (a GenRow with a `chat`) goes to `/chat/completions` with the messages, not
the rendered prompt: the server renders them with its own chat template and answers in
`choices[0].message.content`; the stop strings include the local template's end of turn.
A chat with a started assistant reply (`continue_final`, or a `suffix`: OLMES's
assistant_prefix, sent as a last assistant message of its own, or appended to the final
one) is sent with vLLM's extension fields `continue_final_message: true,
add_generation_prompt: false`, so the server renders the template with that last message
left open (no end of turn) and the reply continues it. That needs a server that supports
them (vLLM does; OpenAI's API does not and rejects the request); it matches the local
rendering (generation prompt + suffix) wherever the template lays a reply out as its
generation prompt followed by the content (ChatML, Llama 3, Gemma). The server sees the
whole conversation: proctor's left truncation of the rendered prompt does not apply, and a
conversation longer than the server's context is the server's error (shown as it says it).

Extra request fields (`extra_body`, e.g. llama-cpp-python's `{"repeat_penalty": 1.0,
"top_k": 0, "min_p": 0}` for plain greedy/top-p decoding) are sent with every request.
"""

from __future__ import annotations

import json
import math
import os
from dataclasses import dataclass
from typing import Any, Callable, Iterator, Literal, Optional, Sequence, Union

from proctor.backends.decoding import find_stop
from proctor.backends.openai_http import CHAT_COMPLETIONS, COMPLETIONS, CompletionsClient, RetryPolicy, ServerRejected
from proctor.backends.redact import redact_url
from proctor.backends.sources import ALIASES, ModelSource, resolve_tokenizer
from proctor.backends.tokenizers import load_tokenizer
from proctor.engine.gen_plan import GenRow
from proctor.engine.plan import Row
from proctor.errors import UserError
from proctor.requests import Chat, Generation, LoglikelihoodResult, all_finished, finished_samples

PromptFormat = Literal["auto", "ids", "text"]
Scoring = Literal["auto", "echo", "forced"]
_CHAT_API = "chat-completions"
_CONTINUE_FIELDS = ("continue_final_message", "add_generation_prompt")  # vLLM's, for a started reply
_FORCE_BIAS = 100  # the largest logit_bias OpenAI accepts
_PROBE_TEXT = "The capital of France is Paris. The capital of Italy is Rome. The capital of Spain is"


@dataclass(frozen=True)
class _Query:
    """One completions request of a readout: its body and how to read the reply."""

    row: int
    readout: int
    body: dict
    prompt: tuple[int, ...]   # the prompt's tokens (ours, before any re-tokenization)
    first: int                # echo: position of the first target in `prompt`; forced: -1
    target: int               # forced: the token forced; echo: -1


class OpenAIBackend:
    """Scores and generates through an OpenAI-compatible completions server."""

    dtype = "server"     # what the CLI's metrics record for HF's dtype and device
    device = "remote"
    shares_prefixes = False  # every request is a whole prompt

    def __init__(
        self, base_url: str, model: str, *, tokenizer: Any, tokenizer_identity: str, max_length: int = 2048,
        api_key: Optional[str] = None, timeout: float = 600.0, concurrency: int = 8,
        retry: RetryPolicy = RetryPolicy(), prompt_format: PromptFormat = "auto", scoring: Scoring = "auto",
        extra_body: Optional[dict] = None,
    ):
        if max_length < 1:
            raise UserError(f"max length must be a positive integer, got {max_length}")
        if concurrency < 1:
            raise UserError(f"concurrency must be a positive integer, got {concurrency}")
        if prompt_format not in ("auto", "ids", "text"):
            raise UserError(f"unknown prompt format {prompt_format!r}; use auto, ids or text")
        if scoring not in ("auto", "echo", "forced"):
            raise UserError(f"unknown scoring {scoring!r}; use auto, echo or forced")
        self.client = CompletionsClient(base_url.rstrip("/"), api_key=api_key, timeout=timeout,
                                        concurrency=concurrency, retry=retry)
        self.base_url = self.client.shown_base_url  # as messages and records show it: no password
        self.model = model
        self.tokenizer = tokenizer
        self.tokenizer_identity = tokenizer_identity
        self.max_length = max_length
        self.prompt_format = prompt_format
        self.scoring = scoring
        self.extra_body = dict(extra_body or {})
        self.requests_sent = 0

    def __repr__(self) -> str:  # never shows the API key
        return f"OpenAIBackend({self.base_url!r}, {self.model!r})"

    @property
    def fingerprint(self) -> str:
        """Server, served model, tokenizer, max length, scoring and extra fields: what results are cached under."""
        # server-side sampling settings (extra_body) change generations: results are cached apart.
        # Chat generations are rendered by the server's template, not from the tokens the local
        # one gave, and that needs nothing more here: a chat request's key holds its messages
        # (what the server is sent), the engine's fingerprint the local template's digest, and
        # the server's own template is part of the server (base URL, served model), as its
        # weights are. Chat rows never went to /completions, so no cached result of the same
        # key was made from a rendered prompt.
        extra = json.dumps(self.extra_body, sort_keys=True) if self.extra_body else ""
        return (f"openai:{self.client.base_url}|model={self.model}|tokenizer={self.tokenizer_identity}"
                f"|max_length={self.max_length}|scoring={self.scoring}" + (f"|extra={extra}" if extra else ""))

    def config_record(self) -> dict:
        """Return what metrics.json records about this backend (never the API key).

        `scoring` and `prompt_format` are what the run used ("auto" when it never needed them).
        """
        return {"base_url": self.base_url, "served_model": self.model, "tokenizer": self.tokenizer_identity,
                "scoring": self.scoring, "prompt_format": self.prompt_format,
                "concurrency": self.client.concurrency, "requests_sent": self.requests_sent,
                **({"extra_body": self.extra_body} if self.extra_body else {})}

    def token_budget(self) -> int:
        """Return tokens per scoring batch: enough rows to keep every connection busy.

        Few enough, too, that a run stopped by a failing server redoes little (results are
        stored per batch).
        """
        return self.client.concurrency * self.max_length

    def close(self) -> None:
        """Close the HTTP client and its connections."""
        self.client.close()

    # -- requests -------------------------------------------------------------------------

    def _prompt(self, tokens: Sequence[int]) -> Any:
        return list(tokens) if self._format() == "ids" else self._decode(tokens)

    def _decode(self, tokens: Sequence[int]) -> str:
        return self.tokenizer.decode(list(tokens), skip_special_tokens=False, clean_up_tokenization_spaces=False)

    def _body(self, tokens: Sequence[int], **fields: Any) -> dict:
        return {**self.extra_body, "model": self.model, "prompt": self._prompt(tokens), **fields}

    def _post(self, body: dict) -> dict:
        self.requests_sent += 1
        return self.client.post(body)

    def _post_all(self, posts: Sequence[tuple[str, dict]]) -> Iterator[tuple[int, dict]]:
        """(index, reply) to each (path, body) as replies arrive, at most `concurrency` in flight."""
        self.requests_sent += len(posts)
        return self.client.map(self._post_to, posts)

    def _post_to(self, post: tuple[str, dict]) -> dict:
        path, body = post
        try:
            return self.client.post(body, path=path)
        except ServerRejected as e:
            if path != CHAT_COMPLETIONS:
                raise
            raise _chat_rejected(self.base_url + CHAT_COMPLETIONS, e, body) from None

    def _format(self) -> str:
        """Return "ids" or "text": whether the server takes a token-id prompt (asked once, with a tiny request)."""
        if self.prompt_format == "auto":
            probe = {**self.extra_body, "model": self.model, "max_tokens": 1, "temperature": 0}
            ids = self.tokenizer.encode("Hello", add_special_tokens=False)
            try:  # any failure means text (llama-cpp-python answers HTTP 500 to a list prompt)
                self.requests_sent += 1
                self.client.post({**probe, "prompt": list(ids)}, retries=0)
                self.prompt_format = "ids"
            except UserError:
                self._post({**probe, "prompt": "Hello"})  # with retries: a server that is down says so here
                self.prompt_format = "text"
        return self.prompt_format

    # -- loglikelihood --------------------------------------------------------------------

    def score(self, rows: Sequence[Row], prefix: tuple[int, ...] = (),
              parents: Sequence[int] = ()) -> list[tuple[LoglikelihoodResult, ...]]:
        """Score each row's readouts by echo or forced decoding (see the module doc), requests sent concurrently."""
        # shares_prefixes is False: the engine never passes prefix or parents
        mode = self._scoring()
        queries = [q for i, row in enumerate(rows) for j in range(len(row.readouts)) for q in self._queries(i, row, j, mode)]
        totals: dict[tuple[int, int], list[tuple[float, bool]]] = {}
        for k, reply in self._post_all([(COMPLETIONS, q.body) for q in queries]):
            q = queries[k]
            found = self._echo_read(reply, q.prompt, q.first) if mode == "echo" else [self._forced_read(reply, q.target)]
            totals.setdefault((q.row, q.readout), []).extend(found)
        out = []
        for i, row in enumerate(rows):
            results = []
            for j, readout in enumerate(row.readouts):
                found = totals[(i, j)]
                results.append(LoglikelihoodResult(sum(lp for lp, _ in found), len(readout.tokens),
                                                   all(g for _, g in found)))
            out.append(tuple(results))
        return out

    def _queries(self, i: int, row: Row, j: int, mode: str) -> list[_Query]:
        readout = row.readouts[j]
        context = row.tokens[: readout.start + 1]
        if mode == "echo":
            prompt = context + readout.tokens
            body = self._body(prompt, max_tokens=1, temperature=0, logprobs=1, echo=True)
            return [_Query(i, j, body, prompt, len(context), -1)]
        return [_Query(i, j, self._forced_body(context + readout.tokens[:k], t), (), -1, t)
                for k, t in enumerate(readout.tokens)]

    def _forced_body(self, prompt: Sequence[int], target: int) -> dict:
        return self._body(prompt, max_tokens=1, temperature=0, logprobs=1, logit_bias={str(target): _FORCE_BIAS})

    def _echo_read(self, reply: dict, prompt: tuple[int, ...], first: int) -> list[tuple[float, bool]]:
        """(log-prob, is top-1) of prompt[first:] from an echoed reply."""
        lps, tops, offsets = _logprobs(reply, self.base_url)
        if self._format() == "ids":
            if len(lps) < len(prompt):
                raise _cannot_score(self.base_url, f"it echoed {len(lps)} log-probs for a {len(prompt)}-token prompt")
            positions: Sequence[int] = range(first, len(prompt))
        else:
            context, whole = self._decode(prompt[:first]), self._decode(prompt)
            if offsets is None or not whole.startswith(context):
                raise _cannot_score(self.base_url, "its echoed prompt has no text offsets")
            positions = [p for p, o in enumerate(offsets) if len(context) <= o < len(whole)]
            if not positions or offsets[positions[0]] != len(context):
                raise UserError(
                    f"the server at {self.base_url} tokenized a continuation together with its context "
                    f"(no token starts at the continuation {whole[len(context):][:40]!r}); "
                    "use a server that accepts token-id prompts (prompt_format='ids')"
                )
        return [(_number(lps[p], self.base_url), _is_top(lps[p], tops, p)) for p in positions]

    def _forced_read(self, reply: dict, target: int) -> tuple[float, bool]:
        lps, tops, _ = _logprobs(reply, self.base_url)
        if not lps or lps[0] is None:
            raise _cannot_score(self.base_url, f"it reported no log-prob for forced token {target}")
        expected = self._decode([target])
        text = reply["choices"][0].get("text")
        if "\ufffd" not in expected and isinstance(text, str) and text != expected:
            raise UserError(
                f"the server at {self.base_url} did not generate token {target} ({expected!r}) under "
                f"logit_bias +{_FORCE_BIAS} but {text!r}; it cannot score by forced decoding"
            )
        return _number(lps[0], self.base_url), _is_top(lps[0], tops, 0)

    def _scoring(self) -> str:
        """Return "echo" or "forced" (see the module doc): probed once when "auto"."""
        if self.scoring != "auto":
            return self.scoring
        probe = tuple(self.tokenizer.encode(_PROBE_TEXT, add_special_tokens=False))
        try:
            reply = self._post(self._body(probe, max_tokens=1, temperature=0, logprobs=1, echo=True))
            if self._echo_aligned(reply, probe):
                self.scoring = "echo"
                return self.scoring
        except ServerRejected:
            pass
        try:
            self._forced_read(self._post(self._forced_body(probe[:-1], probe[-1])), probe[-1])
        except UserError:
            raise _cannot_score(self.base_url, "it returns neither aligned prompt log-probs (echo+logprobs) "
                                "nor the log-prob of a forced token (logit_bias+logprobs)") from None
        self.scoring = "forced"
        return self.scoring

    def _echo_aligned(self, reply: dict, prompt: tuple[int, ...]) -> bool:
        """Whether the echo reply scores every prompt token and its generated (greedy) token is its top-1."""
        try:
            lps, tops, offsets = _logprobs(reply, self.base_url)
        except UserError:
            return False
        if self._format() == "ids":
            n = len(prompt)
        else:
            if offsets is None:
                return False
            n = sum(1 for o in offsets if o < len(self._decode(prompt)))
        if len(lps) <= n or any(not isinstance(x, (int, float)) for x in lps[1 : n + 1]):
            return False
        return _is_top(lps[n], tops, n)

    # -- generation -----------------------------------------------------------------------

    def generate(
        self, rows: Sequence[GenRow], on_done: Optional[Callable[[int, tuple[Generation, ...]], None]] = None,
        slots: Optional[int] = None,
    ) -> list[tuple[Generation, ...]]:
        """Every sample a request of its own, `concurrency` at a time (`slots` is the server's business)."""
        jobs = [(i, k) for i, row in enumerate(rows) for k in range(len(row.seeds))]
        posts = [self._generation_post(rows[i], rows[i].seeds[k]) for i, k in jobs]
        results: list[list[Optional[Generation]]] = [[None] * len(r.seeds) for r in rows]
        for n, reply in self._post_all(posts):
            i, k = jobs[n]
            row = rows[i]
            results[i][k] = self._generation(reply, row) if row.chat is None else self._chat_generation(reply, row)
            if on_done is not None and (done := finished_samples(results[i])) is not None:
                on_done(i, done)
        return all_finished(results)

    def _generation_post(self, row: GenRow, seed: int) -> tuple[str, dict]:
        """(path, body) of one sample: a chat's messages to chat completions, else the prompt tokens."""
        if row.chat is None:
            return COMPLETIONS, self._body(row.tokens, **_decoding_fields(row, seed))
        messages, started = _chat_messages(row.chat)
        body = {**self.extra_body, "model": self.model, "messages": messages, **_decoding_fields(row, seed)}
        if started:  # vLLM's extensions: continue the last (assistant) message, open no new turn
            body.update(continue_final_message=True, add_generation_prompt=False)
        return CHAT_COMPLETIONS, body

    def _generation(self, reply: dict, row: GenRow) -> Generation:
        choice = _choice(reply, self.base_url)
        text = choice.get("text")
        if not isinstance(text, str):
            raise _malformed(self.base_url, "a choice without text")
        return self._finished(text, reply, choice, row)

    def _chat_generation(self, reply: dict, row: GenRow) -> Generation:
        url = self.base_url + CHAT_COMPLETIONS
        choice = _choice(reply, url, _CHAT_API)
        message = choice.get("message")
        if not isinstance(message, dict) or "content" not in message:
            raise _malformed(url, "a choice without message.content", _CHAT_API)
        content = message["content"]
        if content is not None and not isinstance(content, str):
            raise _malformed(url, f"a message.content that is not text ({type(content).__name__})", _CHAT_API)
        return self._finished(content or "", reply, choice, row)  # OpenAI: null content is no text

    def _finished(self, text: str, reply: dict, choice: dict, row: GenRow) -> Generation:
        """Return the sample: `text` cut at the first stop string, its token count and finish reason."""
        cut = find_stop(text, row.stop)
        if cut is not None:
            text = text[:cut]
        text = self.client.secrets.blank_whole(text)  # a server that echoed a credential into its reply
        usage = reply.get("usage")
        tokens = usage.get("completion_tokens") if isinstance(usage, dict) else None
        if not isinstance(tokens, int):
            tokens = len(self.tokenizer.encode(text, add_special_tokens=False))
        return Generation(text, tokens, _finish_reason(choice, row, cut is not None))


def _decoding_fields(row: GenRow, seed: int) -> dict[str, Any]:
    """max_tokens, temperature/top_p (greedy: temperature 0), the sample's seed, and stop."""
    fields: dict[str, Any] = {"max_tokens": row.max_new_tokens}
    if row.do_sample:
        fields.update(temperature=row.temperature, top_p=row.top_p, seed=seed & 0x7FFFFFFF)
    else:
        fields.update(temperature=0, top_p=1)
    if row.stop:
        fields["stop"] = list(row.stop)
    return fields


def _chat_messages(chat: Chat) -> tuple[list[dict], bool]:
    """Return the messages a chat-completions server is sent, and whether the last is a started reply.

    A started assistant reply to continue is the chat's own (`continue_final`), or its
    `suffix`, appended to that reply or else sent as an assistant message of its own.
    """
    messages = [m.to_dict() for m in chat.messages]
    if not chat.suffix:
        return messages, chat.continue_final
    if chat.continue_final:
        messages[-1] = {**messages[-1], "content": messages[-1]["content"] + chat.suffix}
    else:
        messages.append({"role": "assistant", "content": chat.suffix})
    return messages, True


def _chat_rejected(url: str, e: ServerRejected, body: dict) -> UserError:
    """Return a clearer error for a chat-completions request the server refused."""
    if e.status in (404, 405):  # no such endpoint (vLLM also answers 404 for a model it does not serve)
        return UserError(f"{e}; chat prompts are generated through POST {url}, which this server does not "
                         f"have (or not for model {body.get('model')!r}): serve the model with an OpenAI-compatible "
                         "chat-completions API (vLLM, llama.cpp's server), or run the tasks without chat format "
                         "(no --chat-template)")
    if body.get("continue_final_message") and any(f in str(e) for f in _CONTINUE_FIELDS):
        return ServerRejected(e.status, f"{e}; a started assistant reply needs a server that takes vLLM's "
                              "continue_final_message and add_generation_prompt fields (vLLM does, OpenAI does not)")
    return e


def _finish_reason(choice: dict, row: GenRow, cut: bool) -> str:
    """Return "length", "stop" (a stop string) or "eos".

    OpenAI's "stop" covers both of the last two; vLLM's `stop_reason` (the string, or a
    token id / None for EOS) tells them apart where present.
    """
    reason = choice.get("finish_reason")
    if reason == "length" and not cut:
        return "length"
    if cut or isinstance(choice.get("stop_reason"), str):
        return "stop"
    if "stop_reason" in choice or not row.stop:
        return "eos"
    return "stop"


def _choice(reply: dict, url: str, api: str = "completions") -> dict:
    choices = reply.get("choices")
    if not isinstance(choices, list) or not choices or not isinstance(choices[0], dict):
        raise _malformed(url, "no choices", api)
    return choices[0]


def _logprobs(reply: dict, url: str) -> tuple[list, list, Optional[list]]:
    """token_logprobs, top_logprobs (None entries where absent) and text_offset of the first choice."""
    logprobs = _choice(reply, url).get("logprobs")
    if not isinstance(logprobs, dict) or not isinstance(logprobs.get("token_logprobs"), list):
        raise _cannot_score(url, "its reply has no logprobs.token_logprobs")
    lps = logprobs["token_logprobs"]
    tops = logprobs.get("top_logprobs")
    tops = tops if isinstance(tops, list) else [None] * len(lps)
    offsets = logprobs.get("text_offset")
    return lps, tops, offsets if isinstance(offsets, list) else None


def _is_top(lp: Any, tops: list, position: int) -> bool:
    top = tops[position] if position < len(tops) else None
    if not isinstance(top, dict) or not top or not isinstance(lp, (int, float)):
        return False
    return lp >= max(v for v in top.values() if isinstance(v, (int, float)))


def _number(value: Any, url: str) -> float:
    if not isinstance(value, (int, float)) or math.isnan(value):
        raise _malformed(url, f"a log-prob that is not a number ({value!r})")
    return float(value)


def _cannot_score(url: str, why: str) -> UserError:
    return UserError(f"the server at {url} cannot score loglikelihood requests ({why}); "
                     "use it for generation tasks only")


def _malformed(url: str, what: str, api: str = "completions") -> UserError:
    kind = "chat completion" if api == _CHAT_API else "completion"
    return UserError(f"the server at {url} returned a malformed {kind} ({what}); "
                     f"is it an OpenAI-compatible {api} API?")


def tokenizer_source(tokenizer: Union[str, ModelSource, None], model: str) -> ModelSource:
    """Return where the served model's tokenizer is: `tokenizer`, or the alias `model` names, when it is one.

    `tokenizer` is a directory, a .gguf file, a hub id or an alias.
    """
    if isinstance(tokenizer, ModelSource):
        return tokenizer
    spec = tokenizer if tokenizer is not None else (model if model in ALIASES else None)
    if spec is None:
        raise UserError(
            f"the OpenAI backend needs the model's tokenizer and {model!r} is not an alias "
            f"({', '.join(sorted(ALIASES))}); pass a local tokenizer directory, a .gguf file or a hub id"
        )
    return resolve_tokenizer(spec)


def load_openai_backend(
    base_url: str, model: str, *, tokenizer: Union[str, ModelSource, None] = None, api_key: Optional[str] = None,
    max_length: int = 2048, **options: Any,
) -> OpenAIBackend:
    """Build an OpenAIBackend for `model` served at `base_url` (e.g. http://127.0.0.1:8000/v1).

    The API key is `api_key` or $OPENAI_API_KEY (sent as a bearer token, recorded nowhere); without
    one, the base URL's user info (user:password@, split at the last `@` before the host) is sent as
    HTTP Basic auth. With both, only the key is sent. Neither is shown or recorded in any form.
    """
    if not base_url.startswith(("http://", "https://")):
        shown = redact_url(base_url) if "://" in base_url else "***@" + base_url.rpartition("@")[2]
        raise UserError(f"base URL {shown if '@' in base_url else base_url!r} must start with http:// or https:// "
                        "(e.g. http://127.0.0.1:8000/v1)")
    source = tokenizer_source(tokenizer, model)
    loaded, identity = load_tokenizer(source), source.tokenizer_identity
    key = api_key if api_key is not None else os.environ.get("OPENAI_API_KEY")
    return OpenAIBackend(base_url, model, tokenizer=loaded, tokenizer_identity=identity, max_length=max_length,
                         api_key=key, **options)
