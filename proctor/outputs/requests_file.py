"""`requests.jsonl`: every request a task sends, like OLMES's raw requests."""

from __future__ import annotations

from dataclasses import asdict, is_dataclass
from typing import Any, Iterator, Sequence


def _request_fields(req: Any) -> dict:
    """A request's own fields: context and continuation, or a Generate's context and settings."""
    return {k: v for k, v in req.to_dict().items() if k != "request_type"}


def _gold(inst: Any) -> Any:
    """Choice instances carry a gold index (`label`), generation instances a gold `target`."""
    if hasattr(inst, "label"):
        return inst.label
    target = inst.target
    return asdict(target) if is_dataclass(target) and not isinstance(target, type) else target


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
                    "label": _gold(inst),
                    "request_key": req.key,
                }
