"""The run directory: metrics.json, per-task predictions/requests, and the metadata sidecar."""

from __future__ import annotations

import io
import json
import math
from pathlib import Path
from typing import Iterable, Sequence

from proctor.outputs.atomic import atomic_write_bytes, atomic_write_text
from proctor.outputs.records import QueryMetadata


def task_dir_name(task_name: str) -> str:
    """A task spec as a portable directory name: `mmlu_anatomy:mc::olmes` -> `mmlu_anatomy-mc-olmes`."""
    return task_name.replace("::", "-").replace(":", "-")


def _clean(value):
    """JSON has no NaN: write it as null."""
    if isinstance(value, float) and not math.isfinite(value):
        return None
    if isinstance(value, dict):
        return {k: _clean(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_clean(v) for v in value]
    return value


def jsonl_text(rows: Iterable[dict]) -> str:
    return "".join(json.dumps(_clean(r), ensure_ascii=False) + "\n" for r in rows)


def write_jsonl(path: Path, rows: Iterable[dict]) -> None:
    atomic_write_text(path, jsonl_text(rows))


def write_json(path: Path, value: dict) -> None:
    atomic_write_text(path, json.dumps(_clean(value), indent=2, ensure_ascii=False) + "\n")


def write_sidecar(directory: Path, rows: Sequence[QueryMetadata]) -> None:
    """`query_metadata.parquet` and `query_metadata.jsonl`, the same rows in the same order."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    schema = pa.schema(
        [
            ("query_id", pa.string()),
            ("benchmark", pa.string()),
            ("subject", pa.string()),
            ("reasoning_type", pa.string()),
            ("is_correct", pa.bool_()),
            ("predicted_answer", pa.string()),
            ("correct_answer", pa.string()),
            ("task", pa.string()),
            ("doc_id", pa.int64()),
        ]
    )
    dicts = [r.to_dict() for r in rows]
    table = pa.Table.from_pylist(dicts, schema=schema)
    buffer = io.BytesIO()
    pq.write_table(table, buffer)
    atomic_write_bytes(directory / "query_metadata.parquet", buffer.getvalue())
    write_jsonl(directory / "query_metadata.jsonl", dicts)


def write_task_files(directory: Path, run, save_requests: bool) -> None:
    """`<task>/predictions.jsonl` (and `requests.jsonl` on request) for one scored TaskRun."""
    from proctor.outputs.requests_file import request_rows

    task_dir = directory / task_dir_name(run.config.name)
    write_jsonl(task_dir / "predictions.jsonl", (p.to_dict() for p in run.predictions))
    if save_requests:
        write_jsonl(task_dir / "requests.jsonl", request_rows(run.instances))


def write_run(directory: Path, runs: Sequence, metrics: dict, save_requests: bool) -> None:
    """Fill a (staged) run directory; metrics.json is written last, as the mark of a whole run."""
    for run in runs:
        write_task_files(directory, run, save_requests)
    write_sidecar(directory, [row for run in runs for row in run.sidecar])
    write_json(directory / "metrics.json", metrics)
