"""`requests.jsonl`: every request a task sends, like OLMES's raw requests."""

from __future__ import annotations

from typing import Iterator, Sequence

from proctor.tasks.base import Instance


def request_rows(instances: Sequence[Instance]) -> Iterator[dict]:
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
                    "request": {"context": req.context, "continuation": req.continuation},
                    "label": inst.label,
                    "request_key": req.key,
                }
