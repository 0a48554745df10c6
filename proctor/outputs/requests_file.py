"""The `requests.jsonl` file: every request a task sends, like OLMES's raw requests.

It is written from a task's instances (`request_rows`) and read back as the prompts the
model was shown (`read_prompts`).
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any, Callable, Iterator, Mapping, Optional, Sequence

from proctor.outputs.checked import CheckedDirectory
from proctor.requests import Chat

#: the file's name in each task's directory of a run
REQUESTS_FILE = "requests.jsonl"

#: a chat request's prompt as the model sees it (`TokenizationPolicy.text` of its context)
Render = Callable[[Any], str]


# ---- writing -------------------------------------------------------------------------------


def _request_fields(req: Any, render: Optional[Render]) -> dict:
    """Return a request's own fields: context and continuation, or a Generate's context and settings.

    A chat's rendered prompt goes beside its messages when a renderer is given.
    """
    out = {k: v for k, v in req.to_dict().items() if k != "request_type"}
    if render is not None and isinstance(getattr(req, "context", None), Chat):
        out["rendered_context"] = render(req)
    return out


def request_rows(instances: Sequence[Any], render: Optional[Render] = None) -> Iterator[dict]:
    """Yield the requests.jsonl row of every request of `instances`, unconditional ones included."""
    for inst in instances:
        for uncond, requests in ((False, inst.requests), (True, inst.uncond_requests)):
            for idx, req in enumerate(requests):
                yield {
                    "query_id": inst.query_id,
                    "doc_id": inst.doc_id,
                    "native_id": inst.native_id,
                    "request_type": req.kind,
                    "uncond": uncond,
                    "idx": idx,
                    "request": _request_fields(req, render),
                    "label": inst.gold,
                    "request_key": req.key,
                }


# ---- reading -------------------------------------------------------------------------------


@dataclass(frozen=True)
class Prompt:
    """What a document's requests.jsonl says the model was shown."""

    context: Optional[str]                  # None: a request without a text context
    choices: tuple[str, ...] = ()           # choice tasks: each choice's continuation


def _context_text(request: Mapping[str, Any]) -> Optional[str]:
    """Return the prompt as the model saw it.

    That is a chat's rendered text where saved, else its messages one after the other; a
    perplexity document's text.
    """
    if isinstance(request.get("rendered_context"), str):
        return request["rendered_context"]
    context = request.get("context", request.get("text"))
    if context is None or isinstance(context, str):
        return context
    messages = context.get("messages") if isinstance(context, dict) else None
    if isinstance(messages, list) and all(isinstance(m, dict) for m in messages):
        return "\n\n".join(f"[{m.get('role')}]\n{m.get('content')}" for m in messages)
    return json.dumps(context, ensure_ascii=False, indent=1)


def read_prompts(files: CheckedDirectory, name: str) -> Optional[dict[str, Prompt]]:
    """Read query_id -> Prompt from one task's requests.jsonl (written with `request_rows`).

    `name`: the file's path in the run directory `files`, which checks it against the run's
    manifest (UserError). A prompt is the first request's context, and for choice tasks each
    choice's continuation in `idx` order; unconditional requests are left out. None: no file,
    or one (edited, and read with `allow_edited`) that is not JSON Lines.
    """
    if not files.exists(name):
        return None
    text = files.read_text(name)
    try:
        rows = [json.loads(line) for line in text.splitlines() if line.strip()]
    except (ValueError, RecursionError):
        return None
    contexts: dict[str, Optional[str]] = {}
    choices: dict[str, dict[int, str]] = {}
    for row in rows:
        if not isinstance(row, dict) or row.get("uncond") or not isinstance(row.get("request"), dict):
            continue
        query_id, request = str(row.get("query_id")), row["request"]
        contexts.setdefault(query_id, _context_text(request))
        if isinstance(request.get("continuation"), str) and isinstance(row.get("idx"), int):
            choices.setdefault(query_id, {})[row["idx"]] = request["continuation"]
    return {q: Prompt(c, tuple(v for _, v in sorted(choices.get(q, {}).items()))) for q, c in contexts.items()}
