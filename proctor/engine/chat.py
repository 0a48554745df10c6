"""Chat prompts as text: the model's chat template applied to a request's messages.

Part of the tokenization policy (`proctor.engine.tokens`): a `Chat` context is rendered
here, and the text is then tokenized like any other context. Rendering is what
lm-eval's `HFLM.apply_chat_template` does: the tokenizer's `apply_chat_template` with
`tokenize=False`, `add_generation_prompt` unless the last (assistant) message is to be
continued, and `continue_final_message` then; OLMES's `assistant_prefix` follows as text
(`Chat.suffix`). Under the lm-eval policy a template that refuses the system role is
retried without the system messages, as lm-eval does.

The template is the tokenizer's own or one the user names (a Jinja file, for models that
ship none); its digest is part of every cache key of a run that renders chats.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Optional

from proctor.errors import UserError
from proctor.requests import Chat, Message

_MARK = "\u2063proctor-end-of-turn\u2063"   # an assistant reply no template rewrites


@dataclass(frozen=True)
class ChatTemplate:
    """A Jinja chat template and where it came from."""

    source: str
    origin: str     # "tokenizer" or the file's path

    @property
    def digest(self) -> str:
        """The first 16 hex digits of the source's SHA-256, part of every cache key of a run that renders chats."""
        return hashlib.sha256(self.source.encode("utf-8")).hexdigest()[:16]

    @classmethod
    def of_tokenizer(cls, tokenizer: Any) -> Optional["ChatTemplate"]:
        """Return the tokenizer's own template (of named ones, "default"), or None when it has none."""
        source = getattr(tokenizer, "chat_template", None)
        if isinstance(source, dict):  # named templates: transformers' "default" one
            source = source.get("default")
        return cls(source, "tokenizer") if isinstance(source, str) and source else None

    @classmethod
    def from_file(cls, path: Path) -> "ChatTemplate":
        """Read a template from a Jinja file, which must be non-empty text."""
        try:
            source = path.read_text(encoding="utf-8")
        except (OSError, UnicodeDecodeError) as e:
            raise UserError(f"--chat-template {path}: cannot read it as a text file ({e})") from None
        if not source.strip():
            raise UserError(f"--chat-template {path}: the file is empty; give a Jinja chat template")
        return cls(source, str(path))

    @classmethod
    def resolve(cls, option: Optional[str], tokenizer: Any) -> "ChatTemplate":
        """`--chat-template` without a file: the tokenizer's; with one: that file's."""
        if option:
            return cls.from_file(Path(option))
        found = cls.of_tokenizer(tokenizer)
        if found is None:
            raise UserError("chat format was asked for but the model's tokenizer has no chat template; "
                            "pass --chat-template FILE with a Jinja template")
        return found


def _special_tokens(tokenizer: Any) -> dict[str, Any]:
    """Return what `apply_chat_template` hands the template besides the messages (bos_token, ...)."""
    out = getattr(tokenizer, "special_tokens_map", None)
    if isinstance(out, dict):
        return dict(out)
    found = {}
    for name in ("bos", "eos"):
        token_id = getattr(tokenizer, f"{name}_token_id", None)
        if token_id is not None:
            found[f"{name}_token"] = tokenizer.decode([token_id], skip_special_tokens=False)
    return found


def _render_messages(template: ChatTemplate, tokenizer: Any, messages: list[dict],
                     continue_final: bool) -> str:
    """Render `messages` with `template`.

    A transformers tokenizer renders with its own `apply_chat_template` (lm-eval's call);
    for other tokenizers (llama.cpp's) transformers' renderer is given their BOS/EOS texts.
    """
    apply = getattr(tokenizer, "apply_chat_template", None)
    if callable(apply):
        return str(apply(messages, chat_template=template.source, tokenize=False,
                         add_generation_prompt=not continue_final, continue_final_message=continue_final))
    try:
        from transformers.utils.chat_template_utils import render_jinja_template
    except ImportError:  # pragma: no cover - transformers is a dependency
        raise UserError("rendering chat templates needs transformers: pip install transformers") from None
    # it returns (texts, generation indices), whatever its annotation says
    rendered = render_jinja_template(
        conversations=[messages], chat_template=template.source,
        add_generation_prompt=not continue_final, continue_final_message=continue_final,
        **_special_tokens(tokenizer))
    return str(rendered[0][0])


def render(chat: Chat, template: ChatTemplate, tokenizer: Any, *, drop_system_on_error: bool) -> str:
    """Return the chat's prompt text (see the module docstring)."""
    import jinja2

    messages = [m.to_dict() for m in chat.messages]
    try:
        text = _render_messages(template, tokenizer, messages, chat.continue_final)
    except jinja2.exceptions.TemplateError as e:
        without = [m for m in messages if m["role"] != "system"]
        if not drop_system_on_error or len(without) == len(messages):
            raise UserError(f"the chat template ({template.origin}) refused the prompt: {e}") from None
        try:
            text = _render_messages(template, tokenizer, without, chat.continue_final)
        except jinja2.exceptions.TemplateError as again:
            raise UserError(f"the chat template ({template.origin}) refused the prompt: {again}") from None
    except ValueError as e:  # e.g. a template that drops the message to be continued
        raise UserError(f"the chat template ({template.origin}) cannot render the prompt: {e}") from None
    return text + chat.suffix


def end_of_turn(template: ChatTemplate, tokenizer: Any) -> tuple[str, ...]:
    """Return the special token the template ends an assistant turn with, or ().

    The token (`<|im_end|>`, `<|eot_id|>`, `<end_of_turn>`, ...) is found by rendering a reply
    and reading the first special token after it; () when the template ends turns with no
    special token.
    """
    chat = Chat((Message("user", "ping"), Message("assistant", _MARK)))
    try:
        text = _render_messages(template, tokenizer, [m.to_dict() for m in chat.messages], False)
    except Exception:  # a template that needs more than a plain two-turn chat: no extra stop
        return ()
    at = text.rfind(_MARK)
    if at < 0:
        return ()
    tail = text[at + len(_MARK):]
    specials = {v for v in _special_tokens(tokenizer).values() if isinstance(v, str)}
    added = getattr(tokenizer, "added_tokens_decoder", None)
    if isinstance(added, dict):
        specials.update(t.content for t in added.values() if getattr(t, "special", False))
    found = [(tail.find(s), s) for s in specials if s and s in tail]
    return (min(found)[1],) if found else ()
