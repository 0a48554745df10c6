"""`requests.jsonl`: every request a task sends, like OLMES's raw requests."""

from __future__ import annotations

from typing import Any, Iterator, Sequence


def _request_fields(req: Any) -> dict:
    """A request's own fields: context and continuation, or a Generate's context and settings."""
    return {k: v for k, v in req.to_dict().items() if k != "request_type"}


def request_rows(instances: Sequence[Any]) -> Iterator[dict]:
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
                    "request": _request_fields(req),
                    "label": inst.gold,
                    "request_key": req.key,
                }
