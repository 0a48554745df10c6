"""The run directory: written from a `RunRecord` and read back into one (`read_run`).

Every shape is defined in `proctor.outputs.records`; this module only lays the files out
and parses them back, refusing a directory it cannot read as one clear UserError. Every
file is read checked against the run's manifest (`proctor.outputs.checked`).
"""

from __future__ import annotations

import io
import json
import math
import os
from collections import defaultdict
from pathlib import Path
from typing import Any, Iterable, Mapping, Optional, Sequence, Union

from proctor.errors import UserError
from proctor.outputs.atomic import atomic_write_bytes, atomic_write_text
from proctor.outputs.checked import CheckedDirectory
from proctor.outputs.owned import staged_directory
from proctor.outputs.records import (
    FORMAT_VERSION,
    RECORD_READERS,
    SIDECAR_COLUMNS,
    EngineRecord,
    ModelRecord,
    QueryMetadata,
    RunConfig,
    RunRecord,
    SpecScore,
    TaskRecord,
    Timing,
)
from proctor.outputs.requests_file import REQUESTS_FILE, Render, request_rows
from proctor.outputs.typecheck import check_fields

METRICS = "metrics.json"
SIDECAR_JSONL = "query_metadata.jsonl"
SIDECAR_PARQUET = "query_metadata.parquet"


def task_dir_name(task_name: str) -> str:
    """Turn a task spec into a portable directory name: `mmlu_anatomy:mc::olmes` -> `mmlu_anatomy-mc-olmes`."""
    return task_name.replace("::", "-").replace(":", "-")


def json_ready(value: Any) -> Any:
    """JSON has no NaN: write it as null."""
    if isinstance(value, float) and not math.isfinite(value):
        return None
    if isinstance(value, dict):
        return {k: json_ready(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [json_ready(v) for v in value]
    return value


def jsonl_text(rows: Iterable[dict]) -> str:
    """Render `rows` as JSON Lines, non-ASCII kept as is and NaN written as null."""
    return "".join(json.dumps(json_ready(r), ensure_ascii=False) + "\n" for r in rows)


def write_jsonl(path: Path, rows: Iterable[dict]) -> None:
    """Write `rows` to `path` as JSON Lines, atomically."""
    atomic_write_text(path, jsonl_text(rows))


def write_json(path: Path, value: dict) -> None:
    """Write `value` to `path` as indented JSON, atomically, NaN written as null."""
    atomic_write_text(path, json.dumps(json_ready(value), indent=2, ensure_ascii=False) + "\n")


def write_sidecar(directory: Path, rows: Sequence[QueryMetadata]) -> None:
    """Write `query_metadata.parquet` and `query_metadata.jsonl`, the same rows in the same order."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    schema = pa.schema([(name, pa.type_for_alias(kind)) for name, kind in SIDECAR_COLUMNS])
    dicts = [r.to_dict() for r in rows]
    buffer = io.BytesIO()
    pq.write_table(pa.Table.from_pylist(dicts, schema=schema), buffer)
    atomic_write_bytes(directory / SIDECAR_PARQUET, buffer.getvalue())
    write_jsonl(directory / SIDECAR_JSONL, dicts)


def write_run_directory(final: Path, record: RunRecord, *, overwrite: bool = False, option: str = "output",
                        requests: Optional[Mapping[str, Sequence[Any]]] = None,
                        render: Optional[Render] = None) -> None:
    """Assemble the run directory beside `final` and move it into place whole.

    With `requests` (task name -> its instances) it also holds each task's requests.jsonl
    (chats with their prompt as `render` gives it). metrics.json is written last, as the mark
    of a whole run.
    """
    with staged_directory(final, overwrite=overwrite, option=option) as stage:
        for name, task in record.tasks.items():
            task_dir = stage / task_dir_name(name)
            write_jsonl(task_dir / "predictions.jsonl", (r.to_dict() for r in task.records))
            if requests is not None:
                write_jsonl(task_dir / REQUESTS_FILE, request_rows(requests[name], render))
        write_sidecar(stage, [row for task in record.tasks.values() for row in task.sidecar])
        write_json(stage / METRICS, record.metrics_json())


# ---- reading -------------------------------------------------------------------------------


def write_run(record: RunRecord, directory: Union[str, "os.PathLike[str]"], *, overwrite: bool = False) -> None:
    """Write `record`'s run directory as `proctor run` does.

    The directory is assembled beside `directory`, then moved into place (atomically);
    `directory` must be new, empty, or (with `overwrite`) an earlier proctor run. `read_run`
    reads it back.
    """
    write_run_directory(Path(directory), record, overwrite=overwrite)


def _parse_json(text: str, path: Path) -> Any:
    try:
        return json.loads(text)
    except (json.JSONDecodeError, RecursionError) as e:
        raise UserError(f"cannot read {path}: {e}") from None


def _parse_jsonl(text: str, path: Path) -> list[Any]:
    return [_parse_json(line, path) for line in text.split("\n") if line.strip()]


def open_run(directory: Union[str, "os.PathLike[str]"], *, allow_edited: bool = False) -> CheckedDirectory:
    """Open a run directory to read its files, each checked against its manifest (see `read_run`)."""
    return CheckedDirectory(directory, allow_edited=allow_edited, what="run directory", needs=METRICS)


def read_metrics(directory: Union[Path, CheckedDirectory]) -> dict[str, Any]:
    """Read a run's metrics.json, its format version checked (UserError otherwise)."""
    files = directory if isinstance(directory, CheckedDirectory) else open_run(directory)
    path = files.path / METRICS
    metrics = _parse_json(files.read_text(METRICS, missing=f"{files.path} is not a finished run directory (no "
                                                             f"{METRICS})"), path)
    version = metrics.get("format_version") if isinstance(metrics, dict) else None
    if version != FORMAT_VERSION:
        found = "no format_version (written before proctor's run format was versioned)" if version is None \
            else f"format_version {version!r}"
        raise UserError(f"{path} has {found}; this proctor reads format_version "
                        f"{FORMAT_VERSION}: rerun the evaluation with this version, or read it with the "
                        f"proctor that wrote it")
    return metrics


def read_run(directory: Union[str, Path], *, allow_edited: bool = False) -> RunRecord:
    """Read a run directory this version of proctor wrote (`write_run`, `proctor run --output`).

    Each of the run's files (metrics.json, the sidecar in both formats, each task's
    predictions.jsonl and requests.jsonl) is checked against the run's manifest first: a file
    changed after proctor wrote it, or a directory without its manifest, is refused unless
    `allow_edited`. Anything else is a UserError too: a missing or unfinished run, a file
    that is not a regular file, an unknown `format_version`, or a file that does not have the
    shape proctor writes.
    """
    return read_run_files(open_run(directory, allow_edited=allow_edited))


def read_run_files(files: CheckedDirectory) -> RunRecord:
    """Read the run in an opened run directory (`open_run`), as `read_run` does."""
    directory = files.path
    metrics = read_metrics(files)
    try:
        sidecar: dict[str, list[QueryMetadata]] = defaultdict(list)
        for row in _parse_jsonl(files.read_text(SIDECAR_JSONL), directory / SIDECAR_JSONL):
            sidecar[row["task"]].append(QueryMetadata(**row))
        files.check(SIDECAR_PARQUET)
        tasks = {}
        for name, entry in metrics["tasks"].items():
            make = RECORD_READERS[entry["kind"]]
            predictions = f"{task_dir_name(name)}/predictions.jsonl"
            rows = _parse_jsonl(files.read_text(predictions), directory / predictions)
            if files.exists(f"{task_dir_name(name)}/{REQUESTS_FILE}"):
                files.check(f"{task_dir_name(name)}/{REQUESTS_FILE}")
            tasks[name] = TaskRecord.from_summary(name, entry, tuple(make(r) for r in rows),
                                                  tuple(sidecar.get(name, ())))
        run = metrics["run_config"]
        record = RunRecord(
            primary_scores={k: SpecScore.from_dict(v) for k, v in metrics["primary_scores"].items()},
            tasks=tasks,
            model=ModelRecord.from_dict(metrics["model_config"]),
            run_config=RunConfig(**{**run, "tasks": tuple(run["tasks"]), "include": tuple(run["include"])}),
            versions=metrics["versions"], git=metrics["git"], command=tuple(metrics["command"]),
            warnings=tuple(metrics["warnings"]), timing=Timing(**metrics["timing"]),
            engine=EngineRecord.from_dict(metrics["engine"]), format_version=metrics["format_version"])
        check_fields(record, "run")
        return record
    except UserError:
        raise
    except (KeyError, TypeError, ValueError, AttributeError) as e:  # edited, or another tool's files
        reason = " ".join(str(e).split())  # a field name of the file's may hold a newline
        raise UserError(f"{directory} is not a run directory as proctor writes it ({type(e).__name__}: {reason}); "
                        f"read an unmodified run directory") from None
