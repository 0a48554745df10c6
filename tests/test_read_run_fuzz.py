"""`proctor.read_run` as a hostile user meets it: any value of any field of a run directory
replaced by any JSON value is refused as one UserError line, or reads back as a record
whose every field has its declared type (and `compare` then works on it)."""

from __future__ import annotations

import json
import shutil

import pytest

from proctor.outputs.run_dir import write_run
from hypothesis import HealthCheck, given, settings, strategies as st

import proctor
from proctor.compare import compare_runs
from proctor.outputs.typecheck import check_fields
from run_records import choice_record, generation_record, run_record, task_record

MC, GEN = "mmlu_astronomy:mc::olmes", "gsm8k::olmes"
FILES = ("metrics.json", "mmlu_astronomy-mc-olmes/predictions.jsonl", "gsm8k-olmes/predictions.jsonl",
         "query_metadata.jsonl")
JSON = st.recursive(st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(max_size=8),
                    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=6), inner, max_size=3),
                    max_leaves=8)


@pytest.fixture(scope="module")
def good(tmp_path_factory):
    path = tmp_path_factory.mktemp("runs") / "good"
    write_run(run_record(task_record(MC, [choice_record(MC, i, i % 2, [-1.0, -2.5]) for i in range(4)], "choice"),
                         task_record(GEN, [generation_record(GEN, i, f" {i}", i < 2) for i in range(3)], "generation")),
              path)
    return path


def load(path):
    text = path.read_text()
    return json.loads(text) if path.suffix == ".json" else [json.loads(line) for line in text.splitlines()]


def dump(path, value) -> None:
    """A .json file as one value; a .jsonl file one line per row (a non-list root: one line)."""
    rows = value if path.suffix == ".jsonl" and isinstance(value, list) else [value]
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))


def paths(tree, prefix=()):
    """Every place in a parsed JSON tree, as the keys and indices that lead to it."""
    yield prefix
    if isinstance(tree, dict):
        for k, v in tree.items():
            yield from paths(v, (*prefix, k))
    elif isinstance(tree, list):
        for i, v in enumerate(tree):
            yield from paths(v, (*prefix, i))


def replaced(tree, where, value):
    if not where:
        return value
    head, rest = where[0], where[1:]
    copy = dict(tree) if isinstance(tree, dict) else list(tree)
    copy[head] = replaced(tree[head], rest, value)
    return copy


def test_an_unmodified_run_reads_back(good):
    record = proctor.read_run(good)
    check_fields(record, "run")
    assert [a.identical for a in compare_runs(good, good)] == [4, 3]


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(data=st.data())
def test_any_field_replaced_by_any_value(good, tmp_path_factory, data):
    name = data.draw(st.sampled_from(FILES))
    tree = load(good / name)
    where = data.draw(st.sampled_from(list(paths(tree))))
    value = data.draw(JSON)
    bad = tmp_path_factory.mktemp("bad") / "run"
    shutil.copytree(good, bad)
    dump(bad / name, replaced(tree, where, value))
    try:
        record = proctor.read_run(bad, allow_edited=True)
    except proctor.UserError as e:
        assert "\n" not in str(e)
        return
    check_fields(record, "run")       # what reads back is typed as declared
    try:
        compare_runs(good, bad, allow_edited=True)
    except proctor.UserError as e:
        assert "\n" not in str(e)


def test_a_wrong_value_is_named_by_its_path(good, tmp_path):
    bad = tmp_path / "run"
    shutil.copytree(good, bad)
    name = "mmlu_astronomy-mc-olmes/predictions.jsonl"
    rows = load(bad / name)
    rows[1]["metrics"]["acc_raw"] = "1.0"
    dump(bad / name, rows)
    with pytest.raises(proctor.UserError, match=r"records\[1\]\.metrics\.acc_raw is str '1\.0', not float"):
        proctor.read_run(bad, allow_edited=True)
