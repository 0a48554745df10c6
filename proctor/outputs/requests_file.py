"""`requests.jsonl`: every request a task sends, like OLMES's raw requests."""

from __future__ import annotations

from typing import Any, Callable, Iterator, Optional, Sequence

from proctor.requests import Chat

#: a chat request's prompt as the model sees it (`TokenizationPolicy.text` of its context)
Render = Callable[[Any], str]


def _request_fields(req: Any, render: Optional[Render]) -> dict:
    """A request's own fields: context and continuation, or a Generate's context and settings;
    a chat's rendered prompt beside its messages when a renderer is given."""
    out = {k: v for k, v in req.to_dict().items() if k != "request_type"}
    if render is not None and isinstance(getattr(req, "context", None), Chat):
        out["rendered_context"] = render(req)
    return out


def request_rows(instances: Sequence[Any], render: Optional[Render] = None) -> Iterator[dict]:
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
