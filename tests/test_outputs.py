import json

import pyarrow.parquet as pq
import pytest

from proctor.outputs.atomic import atomic_write_text
from proctor.outputs.owned import MANIFEST, staged_directory
from proctor.outputs.records import QueryMetadata
from proctor.outputs.run_dir import task_dir_name, write_json, write_sidecar


def test_staged_directory_replaces_whole_or_leaves_old(tmp_path):
    out = tmp_path / "run"
    with staged_directory(out) as stage:
        atomic_write_text(stage / "a.txt", "first")
    assert (out / "a.txt").read_text() == "first"

    with pytest.raises(RuntimeError):
        with staged_directory(out, overwrite=True) as stage:
            atomic_write_text(stage / "a.txt", "second")
            raise RuntimeError("killed half-way")
    assert (out / "a.txt").read_text() == "first"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["run"]  # no staging left behind

    with staged_directory(out, overwrite=True) as stage:
        atomic_write_text(stage / "b.txt", "new")
    assert sorted(p.name for p in out.iterdir()) == [MANIFEST, "b.txt"]


def test_sidecar_parquet_and_jsonl_agree(tmp_path):
    rows = [
        QueryMetadata("socialiqa:mc::xlarge#3@0", "socialiqa", None, "xReact", True, "A", "A", "socialiqa:mc::xlarge", 0),
        QueryMetadata("mmlu_anatomy:mc::olmes#0", "mmlu_other", "anatomy", None, False, "B", "C", "mmlu_anatomy:mc::olmes", 0),
    ]
    write_sidecar(tmp_path, rows)
    table = pq.read_table(tmp_path / "query_metadata.parquet").to_pylist()
    lines = [json.loads(line) for line in (tmp_path / "query_metadata.jsonl").read_text().splitlines()]
    assert table == lines == [r.to_dict() for r in rows]


def test_json_writes_nan_as_null_and_task_dir_names(tmp_path):
    write_json(tmp_path / "m.json", {"x": float("nan"), "y": [1.5]})
    assert json.loads((tmp_path / "m.json").read_text()) == {"x": None, "y": [1.5]}
    assert task_dir_name("mmlu_anatomy:mc::olmes") == "mmlu_anatomy-mc-olmes"
