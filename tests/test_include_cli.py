"""`proctor run --include` with the shipped examples, end to end on a tiny model."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

import proctor
from proctor.cli import main
from tinylm import build_tiny_model

EXAMPLES = Path(__file__).resolve().parents[1] / "examples" / "tasks"


@pytest.fixture(scope="module")
def tiny(tmp_path_factory):
    return build_tiny_model(tmp_path_factory.mktemp("tiny"))


@pytest.mark.parametrize("include, specs", [
    ("my_task.yaml", ["my_mc:mc", "my_mc:rc", "my_mc:gen"]),
    ("my_tasks.py", ["arith:mc", "arith:gen"]),
])
def test_run_includes_a_task_file_or_module(include, specs, tiny, tmp_path, monkeypatch, capsys):
    monkeypatch.setenv("PROCTOR_CACHE_DIR", str(tmp_path / "cache"))
    out = tmp_path / "run"
    assert main(["run", "--model", str(tiny), "--include", str(EXAMPLES / include), "--tasks", *specs,
                 "--limit", "6", "--max-length", "512", "--output", str(out), "--no-progress"]) == 0
    metrics = json.loads((out / "metrics.json").read_text())
    assert list(metrics["primary_scores"]) == specs
    assert metrics["run_config"]["include"] == [str(EXAMPLES / include)]
    run = proctor.read_run(out)
    assert all(len(run.tasks[s].records) == 6 for s in specs)
    assert {r.task for t in run.tasks.values() for r in t.sidecar} == set(specs)


def test_a_broken_task_file_is_one_line_and_exit_2(tmp_path, capsys):
    bad = tmp_path / "bad.yaml"
    bad.write_text("name: x\ndataset: {path: rows.jsonl}\nquestion: q\nchoices: c\nanswr: a\n")
    assert main(["run", "--include", str(bad), "--tasks", "x:mc", "--output", str(tmp_path / "o")]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and str(bad) in err and "answr" in err
    assert not (tmp_path / "o").exists()
