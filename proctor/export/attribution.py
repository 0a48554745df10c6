"""Bergson's scores of a proctor export, joined back onto `query_id`.

`bergson score SCORES --dataset TRAIN --query_path QUERIES --score individual`
writes, for every training row, one score per query row of the index at QUERIES (built
by `bergson build QUERIES --dataset EXPORT`). Scores are positional: column i is the
export's row i. `proctor attribution join EXPORT SCORES` checks that they are this export's
(the query index's labels equal the export's row for row, the counts agree, every cell was
written) and writes a long Parquet table, one row per (query row, training row):

    query_id, export_row, target, choice, sample, train_index, score, rank

`rank` is 1 for a query's strongest proponent (by Bergson's `higher_is_better`); `--top K`
keeps each query row's K best. `train_index` is the row of the scored training dataset
(a candidates run's own row map applied). The table joins the run's
`query_metadata.parquet` on `query_id`: the run directory the export was made from is read
as `proctor.read_run` reads it (every file checked against its manifest; `allow_edited`).
"""

from __future__ import annotations

import io
import json
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Optional

import numpy as np

from proctor.errors import UserError
from proctor.export.bergson import MANIFEST, ExportManifest, read_manifest


@dataclass(frozen=True)
class BergsonScores:
    """A Bergson per-sequence score store: scores[train row, query row]."""

    scores: np.ndarray               # [num_items, num_scores] float
    train_index: np.ndarray          # [num_items]: the training row each store row scores
    higher_is_better: bool
    query_path: Optional[Path]       # the query index the scores were made against
    train_dataset: Optional[str]


def _steps_config(directory: Path) -> dict:
    """Return the first step of Bergson's config.yaml in `directory` ({} when there is none)."""
    import yaml

    try:
        config = yaml.safe_load((directory / "config.yaml").read_text(encoding="utf-8"))
        found = next(iter(config["steps"][0].values()))
    except (OSError, UnicodeDecodeError, yaml.YAMLError, KeyError, IndexError, TypeError, AttributeError,
            StopIteration, RecursionError):
        return {}
    return found if isinstance(found, dict) else {}


def _mapping(value: Any) -> dict:
    return value if isinstance(value, dict) else {}


def read_scores(directory: Path) -> BergsonScores:
    """Read the scores in a `bergson score` run directory; UserError for anything else."""
    directory = Path(directory)
    not_scores = f"{directory} is not a Bergson score directory (info.json and scores.bin from `bergson score`)"
    try:
        info = json.loads((directory / "info.json").read_text(encoding="utf-8"))
        num_items, num_scores = int(info["num_items"]), int(info["num_scores"])
        if info.get("attribute_tokens"):
            raise UserError(f"{directory} holds per-token scores (attribute_tokens); join per-sequence scores: "
                            f"rerun `bergson score` without --attribute_tokens")
        if any("bfloat16" in str(f) for f in info["dtype"]["formats"]):
            import ml_dtypes  # noqa: F401  # registers bfloat16 with numpy
        dtype: np.dtype = np.dtype(  # type: ignore[call-overload]
            {k: info["dtype"][k] for k in ("names", "formats", "offsets", "itemsize")})
        missing = [n for i in range(num_scores) for n in (f"score_{i}", f"written_{i}") if n not in (dtype.names or ())]
        if missing:
            raise UserError(f"{directory}/info.json says {num_scores} queries were scored but lists no {missing[0]} "
                            "column; the directory is damaged: rerun `bergson score`")
        path = directory / "scores.bin"
        if path.stat().st_size != num_items * dtype.itemsize:
            raise UserError(f"{path} holds {path.stat().st_size} bytes, not the {num_items} rows of "
                            f"{dtype.itemsize} bytes its info.json says; the file is damaged or unfinished")
        store = np.memmap(path, dtype=dtype, mode="r", shape=(num_items,))
    except UserError:
        raise
    except ImportError:
        raise UserError(f"{directory} stores bfloat16 scores: pip install ml_dtypes (Bergson's own dependency)") from None
    except (OSError, UnicodeDecodeError, ValueError, KeyError, TypeError, RecursionError):
        raise UserError(not_scores) from None
    unwritten = [i for i in range(num_scores) if not np.all(store[f"written_{i}"])]
    if unwritten:
        raise UserError(f"{directory}: the scores of {len(unwritten)} of {num_scores} queries were not all written "
                        f"(e.g. query row {unwritten[0]}); the scoring run did not finish: rerun `bergson score`")
    scores = np.stack([np.asarray(store[f"score_{i}"], dtype=np.float64) for i in range(num_scores)], axis=1)
    train_index = _candidates(directory, num_items)
    config = _steps_config(directory)
    score_cfg, index_cfg = _mapping(config.get("score_cfg")), _mapping(config.get("index_cfg"))
    query_path, dataset = score_cfg.get("query_path"), _mapping(index_cfg.get("data")).get("dataset")
    return BergsonScores(scores, train_index, score_cfg.get("higher_is_better", True) is not False,
                         Path(query_path) if isinstance(query_path, str) and query_path else None,
                         dataset if isinstance(dataset, str) else None)


def _candidates(directory: Path, num_items: int) -> np.ndarray:
    """Return the training row of each store row: a candidates run's map (candidates.npy), else itself."""
    path = directory / "candidates.npy"
    if not path.exists():
        return np.arange(num_items, dtype=np.int64)
    try:
        rows = np.load(path, allow_pickle=False)
    except (OSError, ValueError, EOFError):
        rows = None
    if rows is None or rows.shape != (num_items,) or rows.dtype.kind not in "iu":
        raise UserError(f"{path} is not the {num_items} training rows of a candidates run; the directory is damaged")
    return rows.astype(np.int64)


def check_same_queries(export_dir: Path, export_labels: list, scores: BergsonScores, scores_dir: Path) -> None:
    """Refuse scores that are not of this export's rows (their `labels`), in its order."""
    rows = len(export_labels)
    if scores.scores.shape[1] != rows:
        raise UserError(f"{scores_dir} scores {scores.scores.shape[1]} queries but {export_dir} exports "
                        f"{rows}: these scores are of another query set; score this export's index")
    if scores.query_path is None:
        raise UserError(f"{scores_dir} does not say which query index it scored (no score_cfg.query_path in its "
                        f"config.yaml); score with `bergson score ... --query_path INDEX`")
    from datasets import load_from_disk

    try:
        index_labels = load_from_disk(str(scores.query_path / "data.hf"))["labels"]
    except (OSError, ValueError, KeyError):
        raise UserError(f"cannot read the query index {scores.query_path} that {scores_dir} scored against "
                        f"(its data.hf); it was moved or is not a `bergson build` index") from None
    if len(index_labels) != len(export_labels) or any(a != b for a, b in zip(index_labels, export_labels)):
        raise UserError(f"the query index {scores.query_path} that {scores_dir} scored was not built from "
                        f"{export_dir} (its rows' tokens differ); build it with "
                        f"`bergson build INDEX --dataset {export_dir}` and score again")


def _export_rows(export_dir: Path, manifest: ExportManifest) -> Any:
    """Load the export's dataset, refusing it unless it has as many rows as its manifest says."""
    from datasets import load_from_disk

    try:
        rows = load_from_disk(str(export_dir)).select_columns(["query_id", "target", "choice", "sample", "labels"])
    except (OSError, ValueError, KeyError):
        rows = None
    if rows is None or len(rows) != manifest.rows:
        raise UserError(f"{export_dir} does not hold the {manifest.rows} rows its {MANIFEST} lists; the export is "
                        f"damaged: export the run again")
    return rows


def join_table(export_dir: Path, scores_dir: Path, *, top: Optional[int] = None,
               allow_edited: bool = False) -> tuple[Any, ExportManifest]:
    """Return the joined table (a pyarrow Table with the module docstring's columns) and the export's manifest.

    The export's run directory, where it still is, is read as `proctor.read_run` reads it
    (`allow_edited` as there): the table joins its sidecar.
    """
    import pyarrow as pa

    from proctor.outputs.run_dir import read_run

    export_dir, scores_dir = Path(export_dir), Path(scores_dir)
    if top is not None and top < 1:
        raise UserError(f"--top must be a positive whole number, got {top}")
    manifest = read_manifest(export_dir)
    if os.path.lexists(manifest.run):
        read_run(manifest.run, allow_edited=allow_edited)
    rows = _export_rows(export_dir, manifest)
    scores = read_scores(scores_dir)
    check_same_queries(export_dir, rows["labels"], scores, scores_dir)
    matrix = scores.scores if scores.higher_is_better else -scores.scores  # larger: a stronger proponent
    num_train = matrix.shape[0]
    keep = num_train if top is None else min(top, num_train)
    # per query row, training rows by strength (ties: the lower training row first)
    order = np.argsort(-matrix, axis=0, kind="stable")[:keep].T      # [queries, keep]
    picked = np.take_along_axis(scores.scores.T, order, axis=1)       # [queries, keep]
    export_row = np.repeat(np.arange(manifest.rows), keep)

    def repeated(name: str) -> Any:
        return pa.array(rows[name]).take(pa.array(export_row))

    table = pa.table({
        "query_id": repeated("query_id"), "export_row": pa.array(export_row, pa.int64()),
        "target": repeated("target"), "choice": repeated("choice"), "sample": repeated("sample"),
        "train_index": pa.array(scores.train_index[order].ravel(), pa.int64()),
        "score": pa.array(picked.ravel(), pa.float64()),
        "rank": pa.array(np.tile(np.arange(1, keep + 1), manifest.rows), pa.int64()),
    })
    metadata = {"proctor": json.dumps({"export": str(export_dir.resolve()), "export_rows_sha256": manifest.rows_sha256,
                                       "run": manifest.run, "scores": str(scores_dir.resolve()),
                                       "train_dataset": scores.train_dataset,
                                       "higher_is_better": scores.higher_is_better, "top": top})}
    return table.replace_schema_metadata(metadata), manifest


def join_scores(export_dir: Path, scores_dir: Path, output: Optional[Path] = None, *,
                top: Optional[int] = None, allow_edited: bool = False) -> tuple[Path, int]:
    """Write the joined table; return its path and row count.

    The default path is `attribution.parquet` in the export's run directory, beside its
    sidecar. `allow_edited`: as `join_table`.
    """
    import pyarrow.parquet as pq

    from proctor.outputs.owned import check_output_file, write_owned_file

    table, manifest = join_table(export_dir, scores_dir, top=top, allow_edited=allow_edited)
    out = Path(output) if output is not None else Path(manifest.run) / "attribution.parquet"
    check_output_file(out)
    buffer = io.BytesIO()
    pq.write_table(table, buffer)
    write_owned_file(out, buffer.getvalue(), option="--output")
    return out, table.num_rows
