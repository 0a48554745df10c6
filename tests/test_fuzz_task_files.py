"""Hypothesis fuzz of the task-file loaders (YAML, TOML, Python modules): every input ends as task
definitions or as one UserError line naming the file, never another exception.

Mutations of a valid task file: every field given a value of the wrong type, huge numbers, deep
nesting, duplicate keys, unknown keys; and arbitrary text in each format.
"""

import json
import os

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from proctor.errors import UserError
from proctor.tasks.custom import FEWSHOT_FIELDS, TASK_FIELDS, read_task_file
from proctor.tasks.plugins import include

#: examples per property: 6 properties x EXAMPLES (50) in CI (the same ones every run);
#: PROCTOR_FUZZ_EXAMPLES=N draws N random ones per property (a deeper local run)
EXAMPLES = int(os.environ.get("PROCTOR_FUZZ_EXAMPLES", min(50, settings().max_examples)))
SETTINGS = settings(max_examples=EXAMPLES, deadline=None, database=None,
                    derandomize="PROCTOR_FUZZ_EXAMPLES" not in os.environ,
                    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large,
                                           HealthCheck.function_scoped_fixture])

VALID = {"name": "fuzzed", "dataset": {"path": "rows.jsonl"}, "question": "q", "choices": "c", "answer": "a",
         "fewshot": {"path": "rows.jsonl", "num_shots": 1}}
ROWS = [{"q": "2 + 2?", "c": ["3", "4"], "a": 1}, {"q": "1 + 1?", "c": ["2", "5"], "a": 0}]

scalars = st.one_of(st.none(), st.booleans(), st.integers(min_value=-2**70, max_value=2**70),
                    st.floats(allow_nan=False), st.text(max_size=12))
values = st.recursive(scalars, lambda inner: st.one_of(st.lists(inner, max_size=3),
                                                       st.dictionaries(st.text(max_size=6), inner, max_size=3)),
                      max_leaves=12)


def nested(depth: int, leaf: object) -> object:
    for i in range(depth):
        leaf = [leaf] if i % 2 else {"k": leaf}
    return leaf


@st.composite
def mutated_tasks(draw) -> dict:
    """A valid task, then a few of its fields (or its few-shot fields) replaced, dropped or added."""
    task = json.loads(json.dumps(VALID))
    for _ in range(draw(st.integers(1, 3))):
        action = draw(st.sampled_from(["replace", "drop", "add", "deep", "huge", "fewshot"]))
        key = draw(st.sampled_from(TASK_FIELDS))
        if action == "replace":
            task[key] = draw(values)
        elif action == "drop":
            task.pop(key, None)
        elif action == "add":
            task[draw(st.text(min_size=1, max_size=8))] = draw(values)
        elif action == "deep":
            task[key] = nested(draw(st.integers(10, 400)), draw(scalars))
        elif action == "huge":
            task[key] = draw(st.sampled_from([10**20, -10**20, 2**63, float("inf"), 1e308]))
        else:
            task["fewshot"] = {draw(st.sampled_from(FEWSHOT_FIELDS)): draw(values), **VALID["fewshot"]}
            task["fewshot"]["num_shots"] = draw(st.one_of(st.integers(-10, 10**25), values))
    return task


def to_yaml(task: dict, duplicate: bool) -> str:
    lines = [f"{json.dumps(k)}: {json.dumps(v)}" for k, v in task.items()]  # JSON is YAML (flow style)
    if duplicate and lines:
        lines.append(lines[0])
    return "\n".join(lines) + "\n"


def to_toml(task: dict) -> str:
    def value(v: object) -> str:
        if isinstance(v, bool):
            return "true" if v else "false"
        if isinstance(v, (int, float)) and v is not None:
            return json.dumps(v) if v == v and abs(v) != float("inf") else "inf"
        if isinstance(v, str):
            return json.dumps(v)
        if isinstance(v, list):
            return "[" + ", ".join(value(x) for x in v if x is not None) + "]"
        if isinstance(v, dict):
            return "{" + ", ".join(f"{json.dumps(k)} = {value(x)}" for k, x in v.items() if x is not None) + "}"
        return '""'
    return "".join(f"{json.dumps(k)} = {value(v)}\n" for k, v in task.items() if v is not None)


def loads_or_refuses(path) -> None:
    """The property: definitions, or one UserError line that starts with the file's path."""
    try:
        read_task_file(path)
    except UserError as e:
        message = str(e)
        assert message.startswith(str(path)) and "\n" not in message, message


@pytest.fixture
def folder(tmp_path_factory):
    folder = tmp_path_factory.mktemp("fuzz")
    (folder / "rows.jsonl").write_text("".join(json.dumps(r) + "\n" for r in ROWS))
    return folder


@SETTINGS
@given(task=mutated_tasks(), duplicate=st.booleans())
def test_mutated_yaml_task_files(folder, task, duplicate):
    path = folder / "task.yaml"
    path.write_text(to_yaml(task, duplicate))
    loads_or_refuses(path)


@SETTINGS
@given(task=mutated_tasks())
def test_mutated_toml_task_files(folder, task):
    path = folder / "task.toml"
    path.write_text(to_toml(task))
    loads_or_refuses(path)


@SETTINGS
@given(text=st.text(alphabet=st.sampled_from(list("ab:[]{}-, \n\t\"'&*!|>#%@`?=.0123456789"))), suffix=st.sampled_from([".yaml", ".toml"]))
def test_arbitrary_text_task_files(folder, text, suffix):
    path = folder / f"task{suffix}"
    path.write_text(text)
    loads_or_refuses(path)


@SETTINGS
@given(data=st.binary(max_size=200))
def test_arbitrary_bytes_task_files(folder, data):
    path = folder / "task.yaml"
    path.write_bytes(data)
    loads_or_refuses(path)


@SETTINGS
@given(depth=st.integers(1, 3000), kind=st.sampled_from("[{"), suffix=st.sampled_from([".yaml", ".toml"]))
def test_nesting_at_any_depth(folder, depth, kind, suffix):
    close = "]" if kind == "[" else "}"
    inner = ("[" * depth + "]" * depth) if kind == "[" else ("{a = " if suffix == ".toml" else "{a: ") * depth + "1" + close * depth
    path = folder / f"task{suffix}"
    path.write_text(("name = " if suffix == ".toml" else "name: ") + inner + "\n")
    loads_or_refuses(path)


@SETTINGS
@given(body=st.sampled_from(["raise SystemExit(0)", "raise SystemExit(3)", "raise KeyboardInterrupt",
                             "raise GeneratorExit", "raise MemoryError", "raise RecursionError",
                             "import os; x = 1/0", "def f(:\n", "raise BaseException('x')"]))
def test_python_task_files_that_misbehave(folder, body):
    path = folder / "mod.py"
    path.write_text(body + "\n")
    with pytest.raises(UserError) as e:
        include([path])
    assert str(e.value).startswith(str(path)) and "\n" not in str(e.value)
