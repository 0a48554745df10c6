"""Tasks of your own: task files (YAML/TOML), `@task` classes, include, entry points, and the
`proctor tasks` listing. No model: requests are compared byte for byte with the built-ins."""

from __future__ import annotations

import csv
import importlib.metadata
import io
import json
import random
import sys
from pathlib import Path

import pytest
from rich.console import Console

from proctor.cli import main
from proctor.data import load_split
from proctor.errors import UserError
from proctor.report import print_task_table
from proctor.requests import Generate, GenerateResult, Generation
from proctor.tasks import catalog, plugins, registry
from proctor.tasks.choice import ChoiceTask, Rendered
from proctor.tasks.plugins import include, load_entry_points, task

REPO = Path(__file__).resolve().parents[1]
EXAMPLES = REPO / "examples" / "tasks"
DESCRIPTION = "The following are multiple choice questions (with answers) about astronomy.\\n\\n"



@pytest.fixture(scope="module")
def astronomy(data_dir):
    """The first 6 MMLU astronomy test rows and the 5 dev rows, hub-shaped."""
    return (load_split("cais/mmlu", "astronomy", "test", data_dir)[:6],
            load_split("cais/mmlu", "astronomy", "dev", data_dir))


def write_jsonl(path: Path, rows: list[dict]) -> Path:
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return path


def write_csv(path: Path, rows: list[dict]) -> Path:
    """MMLU rows as a CSV with a header: question, A..D, answer letter."""
    buf = io.StringIO()
    w = csv.writer(buf)
    w.writerow(["question", "A", "B", "C", "D", "answer"])
    for r in rows:
        w.writerow([r["question"], *r["choices"], "ABCD"[r["answer"]]])
    path.write_text(buf.getvalue())
    return path


def write_parquet(path: Path, rows: list[dict]) -> Path:
    import pyarrow as pa
    import pyarrow.parquet as pq

    pq.write_table(pa.Table.from_pylist(rows), path)
    return path


def astronomy_file(tmp_path: Path, astronomy, layout: str) -> Path:
    """A task file `astro` over the rows in one of the supported layouts."""
    test, dev = astronomy
    if layout == "jsonl":
        write_jsonl(tmp_path / "test.jsonl", test)
        write_jsonl(tmp_path / "dev.jsonl", dev)
        body = ("dataset: {path: test.jsonl}\nquestion: question\nchoices: choices\nanswer: answer\n"
                "fewshot: {path: dev.jsonl, num_shots: 5}\n")
    elif layout == "csv":
        write_csv(tmp_path / "test.csv", test)
        write_csv(tmp_path / "dev.csv", dev)
        body = ("dataset: {path: test.csv}\nquestion: question\nchoices: [A, B, C, D]\nanswer: answer\n"
                "answer_format: letter\nfewshot: {path: dev.csv, num_shots: 5}\n")
    elif layout == "parquet":
        write_parquet(tmp_path / "test.parquet", test)
        write_parquet(tmp_path / "dev.parquet", dev)
        body = ("dataset: {path: test.parquet}\nquestion: question\nchoices: choices\nanswer: answer\n"
                "answer_format: index\nfewshot: {path: dev.parquet, num_shots: 5}\n")
    elif layout == "toml":
        write_jsonl(tmp_path / "test.jsonl", test)
        write_jsonl(tmp_path / "dev.jsonl", dev)
        path = tmp_path / "astro.toml"
        path.write_text(f'name = "astro"\nquestion = "question"\nchoices = "choices"\nanswer = "answer"\n'
                        f'description = "{DESCRIPTION}"\n[dataset]\npath = "test.jsonl"\n'
                        '[fewshot]\npath = "dev.jsonl"\nnum_shots = 5\n')
        return path
    else:  # the hub dataset, read from the data directory's MMLU files
        body = ("dataset: {hub: cais/mmlu, config: astronomy, split: test}\nquestion: question\n"
                "choices: choices\nanswer: answer\nfewshot: {split: dev, num_shots: 5}\n")
    path = tmp_path / "astro.yaml"
    path.write_text(f'name: astro\ndescription: "{DESCRIPTION}"\n{body}')
    return path


def instances(spec: str, data_dir=None, limit=None):
    (t,) = registry.resolve(spec)
    return t.instances(data_dir, limit)


# ---- the must-show: a task file renders exactly as mmlu_astronomy:{mc,rc}::olmes -----------

@pytest.mark.parametrize("layout", ["jsonl", "csv", "parquet", "toml", "hub"])
def test_task_file_renders_like_the_builtin_mmlu(tmp_path, data_dir, astronomy, layout):
    path = astronomy_file(tmp_path, astronomy, layout)
    assert include([path]) == ["astro:mc", "astro:rc"]
    for fmt in ("mc", "rc"):
        mine = instances(f"astro:{fmt}", data_dir, 6)
        ours = instances(f"mmlu_astronomy:{fmt}::olmes", data_dir, 6)
        assert len(mine) == len(ours) == 6
        for a, b in zip(mine, ours):
            assert (a.prompt, a.continuations, a.uncond_context, a.label, a.choices) == \
                   (b.prompt, b.continuations, b.uncond_context, b.label, b.choices)
            assert a.requests == b.requests and a.uncond_requests == b.uncond_requests
            assert a.query_id == f"astro:{fmt}#{b.native_id}" and a.native_id == b.native_id
        assert (mine[0].uncond_context is None) == (fmt == "mc")
    config = registry.task_config("astro:rc")
    assert (config.num_shots, config.split, config.primary_metric, config.benchmark) == (5, "test", "acc_per_char", "astro")
    assert registry.task_config("astro:mc").primary_metric == "acc_raw"


def test_hub_task_file_counts_and_reads_the_data_dir(tmp_path, data_dir, astronomy, monkeypatch):
    monkeypatch.delenv("PROCTOR_DATA_DIR", raising=False)
    include([astronomy_file(tmp_path, astronomy, "hub")])
    assert [(r.items, r.items_source) for r in registry.task_rows("astro:mc", data_dir)] == [(152, "data")]
    assert [(r.items, r.items_source) for r in registry.task_rows("astro:mc")] == [(152, "official")]


def test_seeded_fewshot_sampling(tmp_path, astronomy):
    test, dev = astronomy
    write_jsonl(tmp_path / "t.jsonl", test)
    write_jsonl(tmp_path / "d.jsonl", dev)
    (tmp_path / "s.yaml").write_text("name: s\ndataset: {path: t.jsonl}\nquestion: question\nchoices: choices\n"
                                     "answer: answer\nfewshot: {path: d.jsonl, num_shots: 3, sampling: seeded}\n")
    include([tmp_path / "s.yaml"])
    shots = random.Random(1234).sample(dev, 3)
    prompt = instances("s:rc")[0].prompt
    expected = "".join(f"Question: {r['question']}\nAnswer: {r['choices'][r['answer']]}\n\n" for r in shots)
    assert prompt == expected + f"Question: {test[0]['question']}\nAnswer:"


# ---- the generation form ---------------------------------------------------------------------

def qa_file(tmp_path: Path, extra: str = "") -> Path:
    rows = [{"id": f"q{i}", "question": f"What is {i} + {i}?", "choices": [str(2 * i), str(2 * i + 1)],
             "answer": 0, "short": str(2 * i)} for i in range(1, 5)]
    write_jsonl(tmp_path / "qa.jsonl", rows[1:])
    write_jsonl(tmp_path / "qa_dev.jsonl", rows[:1])
    path = tmp_path / "qa.yaml"
    path.write_text("name: qa\ndataset: {path: qa.jsonl}\nquestion: question\nchoices: choices\nanswer: answer\n"
                    "id: id\ndescription: \"Sums.\\n\\n\"\nfewshot: {path: qa_dev.jsonl, num_shots: 1}\n"
                    "generation: {target: short, stop: [\"\\n\", \"Question:\"], max_gen_toks: 8}\n" + extra)
    return path


def test_generation_form_builds_requests_and_scores_exact_match(tmp_path):
    assert include([qa_file(tmp_path)]) == ["qa:mc", "qa:rc", "qa:gen"]
    insts = instances("qa:gen")
    assert [i.query_id for i in insts] == ["qa:gen#q2", "qa:gen#q3", "qa:gen#q4"]
    assert insts[0].request == Generate(
        context="Sums.\n\nQuestion: What is 1 + 1?\nAnswer: 2\n\nQuestion: What is 2 + 2?\nAnswer:",
        max_gen_toks=8, stop=("\n", "Question:"))
    assert insts[0].target == "4"
    config = registry.task_config("qa:gen")
    assert (config.primary_metric, config.num_shots) == ("exact_match", 1)

    (t,) = registry.resolve("qa:gen")
    right = t.score(insts[0], GenerateResult((Generation(" 4 ", 2, "stop"),)))
    wrong = t.score(insts[0], GenerateResult((Generation(" 42", 2, "stop"),)))
    assert (right.metrics, right.is_correct, right.predicted_answer, right.correct_answer) == \
           ({"exact_match": 1.0}, True, "4", "4")
    assert (wrong.metrics, wrong.is_correct, wrong.predicted_answer) == ({"exact_match": 0.0}, False, "42")
    assert right.model_output[0].text == " 4 "


def test_generation_only_file_and_primary_metric_override(tmp_path):
    write_jsonl(tmp_path / "g.jsonl", [{"q": "Capital of France?", "a": "Paris"}])
    (tmp_path / "g.toml").write_text('[[tasks]]\nname = "g1"\nquestion = "q"\ndataset = {path = "g.jsonl"}\n'
                                     'generation = {target = "a"}\n'
                                     '[[tasks]]\nname = "g2"\nquestion = "q"\nchoices = "c"\nanswer = "a"\n'
                                     'dataset = {path = "g.jsonl"}\nprimary_metric = {rc = "acc_uncond"}\n')
    assert include([tmp_path / "g.toml"]) == ["g1:gen", "g2:mc", "g2:rc"]
    (inst,) = instances("g1:gen")
    assert inst.request == Generate(context="Question: Capital of France?\nAnswer:", max_gen_toks=64, stop=("\n\n",))
    assert registry.task_config("g2:rc").primary_metric == "acc_uncond"


# ---- Python tasks ----------------------------------------------------------------------------

class Tiny(ChoiceTask):
    def split_rows(self, data_dir, split):
        return [{"q": "1 + 1?", "c": ["2", "3"], "a": 0}, {"q": "2 + 2?", "c": ["5", "4"], "a": 1}]

    def fewshot_rows(self, data_dir):
        return [{"q": "0 + 0?", "c": ["0", "1"], "a": 0}]

    def render(self, row):
        from proctor.tasks.prompts import make_cloze_prompt, make_mcq_prompt

        text = make_mcq_prompt(row["q"], row["c"]) if self.is_mc else make_cloze_prompt(row["q"])
        return Rendered(text=text, options=tuple(row["c"]), gold=row["a"])


def test_task_decorator_registers_a_class():
    task("tiny:mc", num_shots=1)(Tiny)
    task("tiny:rc", benchmark="sums", primary_metric="acc_uncond")(Tiny)
    mc, rc = registry.task_config("tiny:mc"), registry.task_config("tiny:rc")
    assert (mc.benchmark, mc.primary_metric, mc.num_shots, mc.split) == ("tiny", "acc_raw", 1, "test")
    assert (rc.benchmark, rc.primary_metric, rc.num_shots) == ("sums", "acc_uncond", 0)
    assert mc.dataset_path == __file__
    first = instances("tiny:mc")[0]
    assert first.prompt == "Question: 0 + 0?\n A. 0\n B. 1\nAnswer: A\n\nQuestion: 1 + 1?\n A. 2\n B. 3\nAnswer:"
    assert instances("tiny:rc")[1].continuations == (" 5", " 4")
    assert "tiny:mc" in registry.all_specs() and registry.leaf_specs("tiny:rc") == ["tiny:rc"]


@pytest.mark.parametrize("spec, cls, kwargs, message", [
    ("x:mc", dict, {}, "decorates a Task subclass"),
    ("x:mc", ChoiceTask, {}, "does not implement fewshot_rows, render"),
    ("x::v", Tiny, {}, "a ChoiceTask spec is <name>:mc or <name>:rc"),
    ("x:mc", Tiny, {"primary_metric": "acc_uncond"}, "primary_metric must be one of"),
    ("x:mc", Tiny, {"num_shots": -1}, "num_shots must be an integer >= 0"),
    ("a:b::", Tiny, {}, "malformed task spec"),
    ("mmlu_astronomy:mc::olmes", Tiny, {}, "is a built-in spec"),
])
def test_task_decorator_refuses(spec, cls, kwargs, message):
    with pytest.raises(UserError, match=message):
        task(spec, **kwargs)(cls)


def test_examples_work():
    names = include([EXAMPLES])
    assert names == ["my_mc:mc", "my_mc:rc", "my_mc:gen", "arith:rc", "arith:mc", "arith:gen"]
    mc = instances("my_mc:mc")
    assert len(mc) == 6 and [i.query_id for i in mc][:2] == ["my_mc:mc#q1", "my_mc:mc#q2"]
    assert mc[0].prompt.startswith("The following are multiple choice questions (with answers) about general "
                                   "knowledge.\n\nQuestion: How many days are in a leap year?\n A. 365\n")
    assert [i.label for i in mc] == [1, 1, 2, 0, 3, 2]
    assert [i.target for i in instances("my_mc:gen")][:3] == ["Carbon dioxide", "6", "Mars"]
    arith = instances("arith:mc")
    assert len(arith) == 20 and arith[0].prompt.count("Answer:") == 4
    (gen,) = registry.resolve("arith:gen")
    first = gen.instances(None, 1)[0]
    assert gen.score(first, GenerateResult((Generation(first.target, 2, "stop"),))).is_correct


# ---- include -------------------------------------------------------------------------------

def test_directory_include_is_sorted_and_idempotent(tmp_path):
    write_jsonl(tmp_path / "rows.jsonl", [{"q": "?", "c": ["a", "b"], "a": 1}])
    for name in ("b_task", "a_task"):
        (tmp_path / f"{name}.yml").write_text(f"name: {name}\ndataset: {{path: rows.jsonl}}\nquestion: q\n"
                                              "choices: c\nanswer: a\n")
    (tmp_path / "_ignored.yaml").write_text("not: [valid")
    (tmp_path / "notes.txt").write_text("not a task")
    expected = ["a_task:mc", "a_task:rc", "b_task:mc", "b_task:rc"]
    assert include([tmp_path]) == expected
    assert include([tmp_path, tmp_path / "a_task.yml"]) == expected  # again: fine, same names
    assert sorted(catalog.added_specs()) == expected

    other = tmp_path / "elsewhere"
    other.mkdir()
    write_jsonl(other / "rows.jsonl", [{"q": "?", "c": ["a", "b"], "a": 1}])
    (other / "dup.yaml").write_text("name: a_task\ndataset: {path: rows.jsonl}\nquestion: q\nchoices: c\nanswer: a\n")
    with pytest.raises(UserError) as e:
        include([other / "dup.yaml"])
    assert str(other / "dup.yaml") in str(e.value) and str(tmp_path / "a_task.yml") in str(e.value)


def test_include_refuses_what_it_cannot_read(tmp_path):
    with pytest.raises(UserError, match="no such file or directory"):
        include([tmp_path / "missing.yaml"])
    (tmp_path / "x.json").write_text("{}")
    with pytest.raises(UserError, match="not a task file"):
        include([tmp_path / "x.json"])
    empty = tmp_path / "empty"
    empty.mkdir()
    with pytest.raises(UserError, match="holds no"):
        include([empty])
    (tmp_path / "broken.py").write_text("def f(:\n")
    with pytest.raises(UserError, match=r"broken.py:1: invalid Python"):
        include([tmp_path / "broken.py"])
    (tmp_path / "raises.py").write_text("raise RuntimeError('no luck')\n")
    with pytest.raises(UserError, match=r"raises.py: importing it failed: RuntimeError: no luck"):
        include([tmp_path / "raises.py"])


def test_python_file_include(tmp_path):
    (tmp_path / "mine.py").write_text("from proctor.tasks.plugins import task\n"
                                      "from test_custom_tasks import Tiny\n"
                                      "@task('mine:mc')\n"
                                      "class Mine(Tiny):\n"
                                      "    pass\n")
    assert include([tmp_path / "mine.py"]) == ["mine:mc"]
    assert include([tmp_path / "mine.py"]) == ["mine:mc"]  # imported once
    assert len(instances("mine:mc")) == 2


# ---- entry points --------------------------------------------------------------------------

def fake_entry_points(monkeypatch, *points: tuple[str, str]) -> None:
    eps = [importlib.metadata.EntryPoint(name, value, plugins.ENTRY_POINT_GROUP) for name, value in points]
    monkeypatch.setattr(importlib.metadata, "entry_points",
                        lambda group=None: eps if group == plugins.ENTRY_POINT_GROUP else [])


def test_entry_points_load_lazily_from_the_registry(tmp_path, monkeypatch):
    pkg = tmp_path / "pkg"
    pkg.mkdir()
    (pkg / "proctor_demo_plugin.py").write_text(
        "from pathlib import Path\n"
        "from proctor.tasks.plugins import task\n"
        "from test_custom_tasks import Tiny\n"
        "@task('plug:mc')\n"
        "class Plug(Tiny):\n"
        "    pass\n"
        "def paths():\n"
        "    return [Path(__file__).parent / 'files']\n")
    files = pkg / "files"
    files.mkdir()
    write_jsonl(files / "rows.jsonl", [{"q": "?", "c": ["a", "b"], "a": 1}])
    (files / "filed.yaml").write_text("name: filed\ndataset: {path: rows.jsonl}\nquestion: q\nchoices: c\nanswer: a\n")
    monkeypatch.syspath_prepend(str(pkg))
    monkeypatch.delitem(sys.modules, "proctor_demo_plugin", raising=False)
    fake_entry_points(monkeypatch, ("demo", "proctor_demo_plugin"), ("demo_files", "proctor_demo_plugin:paths"))

    monkeypatch.setattr(registry, "_entry_points", "todo")
    assert {"plug:mc", "filed:mc", "filed:rc"} <= set(registry.all_specs())
    assert registry.resolve("filed:rc")[0].instances(None)[0].continuations == (" a", " b")
    assert load_entry_points() == ["filed:mc", "filed:rc"]  # again: the module is imported already


@pytest.mark.parametrize("value, message", [
    ("proctor_no_such_plugin_module", "failed: ModuleNotFoundError"),
    ("json:dumps", "failed: TypeError"),
    ("os:getcwd", "returned str, not a list of task file paths"),
    ("os.path:sep", "not a module or a callable"),
])
def test_a_broken_entry_point_is_one_line_naming_it(monkeypatch, capsys, value, message):
    fake_entry_points(monkeypatch, ("broken", value))
    monkeypatch.setattr(registry, "_entry_points", "todo")
    for call in (load_entry_points, registry.all_specs):
        with pytest.raises(UserError) as e:
            call()
        assert f"entry point 'broken' ({value})" in str(e.value) and message in str(e.value)
        assert "\n" not in str(e.value)
    assert main(["tasks"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "entry point 'broken'" in err


# ---- bad task files ------------------------------------------------------------------------

GOOD = {"name": "bad", "dataset": "{path: rows.jsonl}", "question": "q", "choices": "c", "answer": "a"}


def bad_file(tmp_path: Path, text: str, suffix: str = ".yaml") -> Path:
    write_jsonl(tmp_path / "rows.jsonl", [{"q": "?", "c": ["x", "y"], "a": 1}])
    path = tmp_path / f"bad{suffix}"
    path.write_text(text)
    return path


def yaml_of(**changes) -> str:
    fields = {**GOOD, **changes}
    return "".join(f"{k}: {v}\n" for k, v in fields.items() if v is not None)


@pytest.mark.parametrize("text, message", [
    (yaml_of(questoin="q"), "unknown field 'questoin'; did you mean 'question'?"),
    (yaml_of(dataset="{pth: rows.jsonl}"), "unknown field 'dataset.pth'; did you mean 'dataset.path'?"),
    (yaml_of(generation="{target: a, stops: [x]}"), "unknown field 'generation.stops'; did you mean 'generation.stop'?"),
    (yaml_of(question=None), "missing required field 'question'"),
    (yaml_of(dataset=None), "missing required field 'dataset'"),
    (yaml_of(answer=None), "missing required field 'answer'"),
    (yaml_of(generation="{stop: [x]}"), "missing required field 'generation.target'"),
    (yaml_of(fewshot="{path: rows.jsonl, num_shots: five}"), "field 'fewshot.num_shots' must be an integer, found a string"),
    (yaml_of(fewshot="{path: rows.jsonl}"), "missing required field 'fewshot.num_shots'"),
    (yaml_of(fewshot="{path: rows.jsonl, num_shots: 2}"),
     "field 'fewshot.num_shots' is 2, but rows.jsonl holds 1 row; ask for at most 1"),
    (yaml_of(fewshot="{path: rows.jsonl, num_shots: 99999999999999999999}"),
     "field 'fewshot.num_shots' is 99999999999999999999, but rows.jsonl holds 1 row"),
    ("name: bad\nname: again\n", "not valid YAML (line 2, column 1: key 'name' is given twice in one table)"),
    (yaml_of(dataset="{path: rows.jsonl, path: other.jsonl}"), "key 'path' is given twice in one table"),
    ("name: " + "[" * 5000 + "]" * 5000 + "\n", "nests lists or tables more than 16 levels deep"),
    ("name: " + "[" * 100000 + "]" * 100000 + "\n", "nests lists or tables more than 16 levels deep"),
    ("name: " + "{a: " * 40 + "1" + "}" * 40 + "\n", "nests lists or tables more than 16 levels deep"),
    (yaml_of(choices="3"), "field 'choices' must be a string or list of strings, found a number"),
    (yaml_of(choices="[A]"), "field 'choices' must name at least two fields"),
    (yaml_of(dataset="rows.jsonl"), "field 'dataset' must be an object, found a string"),
    (yaml_of(dataset="{path: nowhere.jsonl}"), "field 'dataset.path' names a file that does not exist"),
    (yaml_of(dataset="{path: rows.txt}"), "field 'dataset.path' must be a .jsonl, .csv, .parquet file"),
    (yaml_of(dataset="{path: rows.jsonl, hub: a/b}"), "field 'dataset' needs exactly one of path or hub"),
    (yaml_of(dataset="{hub: a/b}"), "missing required field 'dataset.split'"),
    (yaml_of(fewshot="{split: dev, num_shots: 1}"), "field 'fewshot.split' applies to a dataset.hub dataset"),
    (yaml_of(answer_format="number"), "field 'answer_format' must be index or letter"),
    (yaml_of(primary_metric="{mc: acc_uncond}"), "field 'primary_metric.mc' must be one of acc_raw"),
    (yaml_of(primary_metric="{gen: exact_match}"), "unknown field 'primary_metric.gen'"),
    (yaml_of(name="'a:b'"), "field 'name' must be letters, digits"),
    (yaml_of(name="mmlu_astronomy"), "field 'name' is 'mmlu_astronomy', the name of a built-in task"),
    (yaml_of(name="gsm8k"), "the name of a built-in task"),
    (yaml_of(name="mmlu"), "the name of a built-in task"),   # a suite's
    ("name: bad\ndataset: {path: rows.jsonl\n", "not valid YAML (line 3, column 1"),
    ("- name: bad\n", "the file must be an object, found a list"),
    ("", "the file is empty"),
    ("tasks: []\n", "field 'tasks' must list at least one task"),
    ("tasks: [{name: bad}]\n", "missing required field 'tasks[0].dataset'"),
])
def test_bad_task_file_is_one_line_naming_file_and_field(tmp_path, text, message):
    path = bad_file(tmp_path, text)
    with pytest.raises(UserError) as e:
        include([path])
    assert str(e.value).startswith(f"{path}: ") and message in str(e.value) and "\n" not in str(e.value)
    assert catalog.added_specs() == []


def test_bad_toml_file(tmp_path):
    path = bad_file(tmp_path, 'name = "bad"\nquestion = \n', ".toml")
    with pytest.raises(UserError, match=r"bad.toml: not valid TOML \(.*line 2"):
        include([path])


@pytest.mark.parametrize("text, message", [
    ("a = " + "[" * 3000 + "]" * 3000 + "\n", "nests lists or tables more than 16 levels deep"),
    ("a = " + "[" * 30 + "]" * 30 + "\n", "nests lists or tables more than 16 levels deep"),
    ('name = "a"\nname = "b"\n', "not valid TOML"),  # tomllib refuses a key given twice itself
])
def test_hostile_toml_files_are_one_line(tmp_path, text, message, capsys):
    path = bad_file(tmp_path, text, ".toml")
    assert main(["tasks", "--include", str(path)]) == 2
    (line,) = capsys.readouterr().err.strip().splitlines()
    assert line.startswith(f"proctor: error: {path}: ") and message in line


@pytest.mark.parametrize("code, raised", [
    ("raise SystemExit(0)", "SystemExit(0)"),
    ("import sys; sys.exit()", "SystemExit()"),
    ("raise KeyboardInterrupt", "KeyboardInterrupt()"),
    ("class Escape(BaseException): pass\nraise Escape('out')", "Escape('out')"),
])
def test_a_python_task_file_cannot_end_the_cli(tmp_path, code, raised, capsys):
    path = tmp_path / "evil.py"
    path.write_text(code + "\n")
    assert main(["tasks", "--include", str(path)]) == 2
    (line,) = capsys.readouterr().err.strip().splitlines()
    assert line == (f"proctor: error: {path}: importing it raised {raised}; a task module must only define "
                    "and register tasks")


@pytest.mark.parametrize("rows, extra, spec, message", [
    ([{"q": "?", "a": 1}], "", "bad:mc", ":1: the row has no list of strings 'c' (missing)"),
    ([{"q": "?", "c": ["x", 2], "a": 1}], "", "bad:rc", "has no list of strings 'c' (found a number at index 1)"),
    ([{"q": "?", "c": ["x", "y"], "a": 1}, {"q": "?", "c": ["x", "y"], "a": 7}], "", "bad:mc",
     "rows.jsonl:2: field 'a' is 7, out of range for 2 choices"),
    ([{"q": "?", "c": ["x", "y"], "a": "C"}], "", "bad:mc", "field 'a' is 'C', out of range for 2 choices"),
    ([{"q": "?", "c": ["x", "y"], "a": 1}, {"q": "?", "c": ["x", "y"], "a": "B"}], "", "bad:rc",
     "rows.jsonl:2: field 'a' is 'B', not an index (the first row says index"),
    ([{"q": "?", "c": ["x", "y"], "a": 1}], "answer_format: letter\n", "bad:mc",
     "field 'a' is 1, not a letter (answer_format says letter"),
    ([{"q": "?", "c": ["x", "y"], "a": "maybe"}], "", "bad:mc", "neither a 0-based index nor a letter"),
    ([{"q": "?", "c": [str(i) for i in range(27)], "a": 1}], "", "bad:mc", "has 27 choices; the :mc form letters at most 26"),
    ([{"q": 3, "c": ["x", "y"], "a": 1}], "", "bad:rc", "the row has no string 'q' (found a number)"),
    ([{"q": "?", "A": "x", "a": 0}], "choices: [A, B]\n", "bad:mc", "the row has no string 'B' (missing)"),
    ([], "", "bad:mc", "dataset has no rows"),
])
def test_bad_rows_are_found_when_read(tmp_path, rows, extra, spec, message):
    write_jsonl(tmp_path / "rows.jsonl", rows)
    path = tmp_path / "bad.yaml"
    path.write_text(yaml_of(**({"choices": None} if "choices:" in extra else {})) + extra)
    include([path])  # the schema is fine: rows are read when the task builds its documents
    with pytest.raises(UserError) as e:
        instances(spec)
    assert message in str(e.value) and "\n" not in str(e.value)
    assert str(e.value).startswith(f"{spec}: ")
    if "few-shot" not in message:
        assert str(path) in str(e.value)


# ---- `proctor tasks` -----------------------------------------------------------------------

def test_a_pattern_that_matches_nothing_is_an_error(capsys):
    with pytest.raises(UserError, match="no task spec matches 'xyz-nothing'"):
        registry.task_rows("xyz-nothing")
    with pytest.raises(UserError, match="did you mean 'gsm8k::olmes'"):
        registry.task_rows("gsm8k::olmez")
    assert main(["tasks", "xyz-nothing"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "no task spec matches 'xyz-nothing'" in err


def test_paloma_items_show_a_dash_not_none():
    rows = registry.task_rows("paloma_ptb")
    assert [r.items for r in rows] == [None]
    out = io.StringIO()
    print_task_table(rows, Console(file=out, width=200))
    assert "—" in out.getvalue() and "None" not in out.getvalue()


def test_included_tasks_are_listed(tmp_path, capsys):
    include([qa_file(tmp_path)])
    assert main(["tasks", "qa:*"]) == 0
    out = capsys.readouterr().out
    listed = {line.split("│")[1].strip(): line.split("│")[-2].strip() for line in out.splitlines()
              if line.startswith("│")}
    assert listed == {"qa:mc": "3", "qa:rc": "3", "qa:gen": "3"}


def test_a_declared_cluster_reaches_each_document(tmp_path):
    """`cluster: passage`: the questions of one passage are one cluster (the sidecar's `cluster`)."""
    rows = [{"q": f"Question {i}?", "c": ["yes", "no"], "a": 0, "passage": f"p{i // 2}"} for i in range(6)]
    write_jsonl(tmp_path / "r.jsonl", rows)
    (tmp_path / "c.yaml").write_text("name: passages\ndataset: {path: r.jsonl}\nquestion: q\nchoices: c\n"
                                     "answer: a\ncluster: passage\n")
    include([tmp_path / "c.yaml"])
    assert [i.metadata["cluster"] for i in instances("passages:mc")] == ["p0", "p0", "p1", "p1", "p2", "p2"]
    write_jsonl(tmp_path / "r.jsonl", [{"q": "Q?", "c": ["yes", "no"], "a": 0}])
    with pytest.raises(UserError, match="passage"):
        instances("passages:rc")
