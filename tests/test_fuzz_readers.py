"""Property-based fuzzing of every data reader: whatever the bytes, a reader either returns
well-typed rows or raises one UserError (one line); nothing else escapes.

Each case is a small data directory laid out like shared/data, built from the first rows
of real files, with one file (the target) replaced by: arbitrary bytes; JSON (or text)
of the wrong shape; the real file with bytes flipped, inserted or deleted; the real file
with one field's value replaced by a random JSON value. The entry point is the one the
program uses: a task spec's `instances()` (what `proctor.pipeline.plan` builds before any
model loads), or the factual probe's `read_bank` / `read_jsonl` + `validate_generations`,
or the factual source readers, or the corpus reader.

A second property writes arbitrary text (with U+2028, U+0085, form feeds, ...) into a
free-text field of a real file: the file must still load, with the same number of rows.
"""

from __future__ import annotations

import bz2
import csv
import functools
import gzip
import io
import itertools
import json
import os
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from conftest import shared_data_dir
from proctor.data.corpora import c4_documents
from proctor.errors import UserError
from proctor.factual.bank import main_forward_rows, read_bank, write_bank
from proctor.factual.prompts import build_prompt
from proctor.factual.sources import read_pararel, read_source
from proctor.factual.validate import ValidationReport, read_jsonl, validate_generations
from proctor.tasks.base import Instance
from proctor.tasks.generation import GenerationInstance
from proctor.tasks.registry import resolve

#: examples per (reader case, strategy): the file runs EXAMPLES * (4 * len(CASES) + len(TEXT_CASES))
#: = 2,320 examples in CI (about 20 s on 2 cores), the same ones every run; the fast tier
#: (`-m "not slow"`, hypothesis profile `dev`) runs 5 per case;
#: PROCTOR_FUZZ_EXAMPLES=N runs N per case and property, randomly drawn (a deeper local run)
EXAMPLES = int(os.environ.get("PROCTOR_FUZZ_EXAMPLES", min(20, settings().max_examples)))
DATA = shared_data_dir()
SETTINGS = settings(max_examples=EXAMPLES, deadline=None, database=None,
                    derandomize="PROCTOR_FUZZ_EXAMPLES" not in os.environ,
                    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large,
                                           HealthCheck.function_scoped_fixture])


# ---- real files, cut to their first rows --------------------------------------------------

def real_bytes(relative: str) -> bytes:
    raw = (DATA / relative).read_bytes()
    if relative.endswith(".gz"):
        return gzip.decompress(raw)
    if relative.endswith(".bz2"):
        return bz2.decompress(raw)
    return raw


def head_lines(relative: str, n: int) -> bytes:
    return b"".join(real_bytes(relative).splitlines(keepends=True)[:n])


def head_json(relative: str, n: int, key: str = "examples") -> bytes:
    obj = json.loads(real_bytes(relative))
    if isinstance(obj, list):
        return json.dumps(obj[:n], indent=1).encode()
    return json.dumps({**obj, key: obj[key][:n]}, indent=1).encode()


def dumps(value: Any) -> str:
    """JSON with raw non-ASCII text (U+2028 stays one character), lone surrogates escaped."""
    text = json.dumps(value, ensure_ascii=False)
    try:
        text.encode("utf-8")
        return text
    except UnicodeEncodeError:
        return json.dumps(value)


# ---- what a successful read must return ---------------------------------------------------

def check_instances(instances: list) -> int:
    assert instances, "a task read without error must have documents"
    for inst in instances:
        if isinstance(inst, Instance):
            assert isinstance(inst.prompt, str) and inst.choices and inst.continuations
            assert all(isinstance(c, str) for c in (*inst.choices, *inst.continuations))
            assert isinstance(inst.label, int) and 0 <= inst.label < len(inst.choices)
        else:
            assert isinstance(inst, GenerationInstance)
            assert isinstance(inst.prompt, str) and inst.target is not None
    return len(instances)


def run_spec(spec: str) -> Callable[[Path], int]:
    def run(root: Path) -> int:
        (task,) = resolve(spec)
        return check_instances(task.instances(root))
    return run


@functools.cache
def small_bank() -> tuple[dict, ...]:
    from proctor.factual.bank import build_bank

    rows = build_bank(DATA, facts_per_relation=1, languages=("fr",), sources=("rome",)).rows
    facts = list(dict.fromkeys(r["fact_id"] for r in rows))[:3]
    return tuple(r for r in rows if r["fact_id"] in facts)


def bank_file() -> bytes:
    path = Path(pytest_tmp()) / "bank.jsonl"
    write_bank(path, list(small_bank()))
    return path.read_bytes()


def generations_file() -> bytes:
    rows = main_forward_rows(small_bank())
    return "".join(dumps({"query_id": r["query_id"], "fact_id": r["fact_id"],
                          "condition_family": r["condition_family"], "model": "m",
                          "prompt": build_prompt(r), "raw_response": " Paris",
                          "generated_tokens": 2, "finish_reason": "stop"}) + "\n"
                   for r in rows).encode()


def run_bank(root: Path) -> int:
    bank = read_bank(root / "bank.jsonl")
    assert bank.rows and all(isinstance(r["query_id"], str) for r in bank.rows)
    return len(bank.rows)


def run_validate(root: Path) -> int:
    report = validate_generations(list(small_bank()), list(read_jsonl(root / "gens.jsonl")))
    assert isinstance(report, ValidationReport) and all(isinstance(x, str) for x in report.lines())
    return report.rows


def run_factual(source: str) -> Callable[[Path], int]:
    def run(root: Path) -> int:
        files: dict = {}
        pararel = read_pararel(root / "factual", files)
        read = read_source(source, root / "factual", ("fr",), pararel) if source else None
        facts = read.facts if read else [p for ps in pararel.values() for p in ps]
        assert all(isinstance(f.subject, str) and all(isinstance(a, str) for a in f.aliases)
                   for f in (read.facts if read else []))
        return len(facts)
    return run


def run_c4(root: Path) -> int:
    docs = c4_documents(root, 5)
    assert docs and all(isinstance(d.text, str) and isinstance(d.native_id, str) for d in docs)
    return len(docs)


_TMP: list[Path] = []


def pytest_tmp() -> Path:
    return _TMP[0]


# ---- the cases ----------------------------------------------------------------------------

@dataclass(frozen=True)
class Case:
    name: str
    target: str                            # relative path of the fuzzed file
    kind: str                              # "jsonl", "json", "csv", "lines" (its format)
    files: Callable[[], dict[str, bytes]]  # every file of the data directory, target included
    run: Callable[[Path], int]             # the entry point; returns the rows/instances read
    gzipped: bool = False                  # the target is stored gzipped (fuzzed as plain text)


SIQA = "social_i_qa/socialiqa-train-dev/"
ARC = "ai2_arc/ARC-Easy/ARC-Easy-Test.jsonl"
BBH_JSON, BBH_COT = "bbh/bbh/navigate.json", "bbh/cot-prompts/navigate.txt"
DATE_JSON = "bigbench/original_task_json/date_understanding/task.json"
FOUNDRY = "bigbench/llm-foundry/bigbench_novel_concepts.jsonl"
TQA = "truthfulqa/data/v0/mc_task.json"


def mmlu_files() -> dict[str, bytes]:
    return {"mmlu/test/astronomy_test.csv": head_lines("mmlu/test/astronomy_test.csv", 6),
            "mmlu/dev/astronomy_dev.csv": real_bytes("mmlu/dev/astronomy_dev.csv")}


def siqa_files() -> dict[str, bytes]:
    return {SIQA + "dev.jsonl": head_lines(SIQA + "dev.jsonl", 6),
            SIQA + "dev-labels.lst": head_lines(SIQA + "dev-labels.lst", 6),
            "fewshot/OLMES_social_i_qa.json": real_bytes("fewshot/OLMES_social_i_qa.json")}


def arc_files() -> dict[str, bytes]:
    return {ARC: head_lines(ARC, 6), "fewshot/OLMES_ARC-Easy.json": real_bytes("fewshot/OLMES_ARC-Easy.json")}


def hellaswag_files() -> dict[str, bytes]:
    return {"hellaswag/hellaswag_val_full.txt": head_lines("hellaswag/hellaswag_val_full.txt.bz2", 24),
            "fewshot/OLMES_hellaswag.json": real_bytes("fewshot/OLMES_hellaswag.json")}


def gsm8k_files() -> dict[str, bytes]:
    return {"gsm8k/test.jsonl": head_lines("gsm8k/test.jsonl", 4),
            "fewshot/STD_GSM8k.json": real_bytes("fewshot/STD_GSM8k.json")}


def bbh_files() -> dict[str, bytes]:
    return {BBH_JSON: head_json(BBH_JSON, 4), BBH_COT: real_bytes(BBH_COT)}


def factual_files() -> dict[str, bytes]:
    rel = {"pararel": "factual/pararel/patterns.jsonl",
           "eq": "factual/entityquestions/test.jsonl.gz",
           "popqa": "factual/popqa/popqa_random1000_flashrag.jsonl",
           "popqa_csv": "factual/popqa/DisambPopQA_longtail.csv",
           "rome": "factual/rome/known_1000.json",
           "reversal": "factual/reversal_curse/parent_child_pairs.csv"}
    return {rel["pararel"]: real_bytes(rel["pararel"]),
            rel["eq"]: head_lines(rel["eq"], 6),
            rel["popqa"]: head_lines(rel["popqa"], 6),
            rel["popqa_csv"]: head_lines(rel["popqa_csv"], 6),
            rel["rome"]: head_json(rel["rome"], 6),
            rel["reversal"]: head_lines(rel["reversal"], 6)}


CASES = [
    Case("mmlu test csv", "mmlu/test/astronomy_test.csv", "csv", mmlu_files,
         run_spec("mmlu_astronomy:mc::olmes")),
    Case("mmlu dev csv (few-shot)", "mmlu/dev/astronomy_dev.csv", "csv", mmlu_files,
         run_spec("mmlu_astronomy:rc::olmes")),
    Case("socialiqa jsonl", SIQA + "dev.jsonl", "jsonl", siqa_files, run_spec("socialiqa:mc::olmes")),
    Case("socialiqa labels", SIQA + "dev-labels.lst", "lines", siqa_files, run_spec("socialiqa:mc::olmes")),
    Case("socialiqa few-shot list", "fewshot/OLMES_social_i_qa.json", "json", siqa_files,
         run_spec("socialiqa:rc::olmes")),
    Case("arc jsonl", ARC, "jsonl", arc_files, run_spec("arc_easy:mc::olmes")),
    Case("arc few-shot list", "fewshot/OLMES_ARC-Easy.json", "json", arc_files, run_spec("arc_easy:rc::olmes")),
    Case("hellaswag text form", "hellaswag/hellaswag_val_full.txt", "lines", hellaswag_files,
         run_spec("hellaswag:rc::olmes")),
    Case("hellaswag few-shot list", "fewshot/OLMES_hellaswag.json", "json", hellaswag_files,
         run_spec("hellaswag:rc::olmes")),
    Case("gsm8k jsonl", "gsm8k/test.jsonl", "jsonl", gsm8k_files, run_spec("gsm8k::olmes")),
    Case("gsm8k few-shot list", "fewshot/STD_GSM8k.json", "json", gsm8k_files, run_spec("gsm8k::olmes")),
    Case("bbh json", BBH_JSON, "json", bbh_files, run_spec("bbh_navigate:cot::lm_eval")),
    Case("bbh cot-prompts", BBH_COT, "lines", bbh_files, run_spec("bbh_navigate:cot::lm_eval")),
    Case("bigbench task.json", DATE_JSON, "json", lambda: {DATE_JSON: head_json(DATE_JSON, 4)},
         run_spec("bigbench_date_understanding::leaderboard")),
    Case("bigbench foundry jsonl", FOUNDRY, "jsonl", lambda: {FOUNDRY: head_lines(FOUNDRY, 4)},
         run_spec("bigbench_novel_concepts::leaderboard")),
    Case("truthfulqa mc_task.json", TQA, "json", lambda: {TQA: head_json(TQA, 4)},
         run_spec("truthfulqa_mc2::leaderboard")),
    Case("humaneval jsonl", "humaneval/HumanEval.jsonl", "jsonl",
         lambda: {"humaneval/HumanEval.jsonl": head_lines("humaneval/HumanEval.jsonl.gz", 3)},
         run_spec("humaneval::greedy")),
    Case("factual query bank", "bank.jsonl", "jsonl", lambda: {"bank.jsonl": bank_file()}, run_bank),
    Case("factual generations file", "gens.jsonl", "jsonl",
         lambda: {"gens.jsonl": generations_file()}, run_validate),
    Case("factual pararel", "factual/pararel/patterns.jsonl", "jsonl", factual_files, run_factual("")),
    Case("factual entityquestions", "factual/entityquestions/test.jsonl.gz", "jsonl", factual_files,
         run_factual("entityquestions"), gzipped=True),
    Case("factual popqa jsonl", "factual/popqa/popqa_random1000_flashrag.jsonl", "jsonl", factual_files,
         run_factual("popqa")),
    Case("factual popqa csv", "factual/popqa/DisambPopQA_longtail.csv", "csv", factual_files,
         run_factual("popqa")),
    Case("factual rome", "factual/rome/known_1000.json", "json", factual_files, run_factual("rome")),
    Case("factual reversal curse", "factual/reversal_curse/parent_child_pairs.csv", "csv", factual_files,
         run_factual("reversal_curse")),
    Case("c4 jsonl", "c4/derived/part.jsonl", "jsonl",
         lambda: {"c4/derived/part.jsonl": head_lines("c4/derived/c4_validation_2k.jsonl.gz", 4)}, run_c4),
]
IDS = [c.name for c in CASES]


# ---- strategies ---------------------------------------------------------------------------

ODD = "\u2028\u2029\u0085\x1c\x1d\x1e\x0b\x0c\r\t\x00\ufeff\u00e9\u4e2d\U0001F600"
CHARS = st.characters(blacklist_categories=("Cs",))
TEXT = st.text(alphabet=CHARS | st.sampled_from(ODD), max_size=12)
#: JSON strings may also hold lone surrogate escapes ("\ud800"), which are not text
JSON_TEXT = TEXT | st.sampled_from(["\ud800", "a\udfff"])
SCALARS = (st.none() | st.booleans() | st.integers(min_value=-(10 ** 20), max_value=10 ** 20)
           | st.floats() | JSON_TEXT)
JSON_VALUES = st.recursive(SCALARS, lambda kids: st.lists(kids, max_size=3)
                           | st.dictionaries(TEXT, kids, max_size=3), max_leaves=8)


def wrong_shape(kind: str, data: st.DataObject) -> bytes:
    """A file of the target's format holding values of arbitrary (mostly wrong) shape."""
    if kind == "json":
        return dumps(data.draw(JSON_VALUES)).encode()
    if kind == "jsonl":
        return "".join(dumps(v) + "\n" for v in data.draw(st.lists(JSON_VALUES, max_size=4))).encode()
    lines = data.draw(st.lists(TEXT, max_size=8))
    if kind == "csv":
        out = io.StringIO()
        csv.writer(out).writerows([lines[i:i + 6] for i in range(0, len(lines), 3)])
        return out.getvalue().encode()
    return "\n".join(lines).encode()


def mutated(original: bytes, data: st.DataObject) -> bytes:
    """The real file with a few bytes flipped, inserted or deleted."""
    out = bytearray(original)
    for _ in range(data.draw(st.integers(1, 4))):
        op = data.draw(st.sampled_from(("flip", "insert", "delete")))
        at = data.draw(st.integers(0, max(len(out) - 1, 0)))
        if op == "flip" and out:
            out[at] ^= 1 << data.draw(st.integers(0, 7))
        elif op == "insert":
            out[at:at] = data.draw(st.binary(min_size=1, max_size=4)
                                   | st.sampled_from([c.encode() for c in ODD] + [b"\n", b",", b'"', b"#"]))
        elif out:
            del out[at:at + data.draw(st.integers(1, 8))]
    return bytes(out)


def _paths(value: Any, prefix: tuple = ()) -> list[tuple]:
    """Every path to a value inside nested lists and objects (the root excluded)."""
    out = []
    items = value.items() if isinstance(value, dict) else enumerate(value) if isinstance(value, list) else ()
    for key, child in items:
        out.append(prefix + (key,))
        if len(out) < 200:
            out.extend(_paths(child, prefix + (key,)))
    return out


def _replace(value: Any, path: tuple, new: Any) -> Any:
    for key in path[:-1]:
        value = value[key]
    value[path[-1]] = new


def field_replaced(kind: str, original: bytes, data: st.DataObject) -> bytes:
    """The real file with one field's value (a JSON path, a CSV cell or a line) replaced."""
    text = original.decode("utf-8")
    if kind in ("json", "jsonl"):
        lines = text.split("\n") if kind == "jsonl" else [text]
        index = data.draw(st.sampled_from([i for i, line in enumerate(lines) if line.strip()] or [0]))
        obj = json.loads(lines[index]) if lines[index].strip() else {}
        paths = _paths(obj)
        new = data.draw(JSON_VALUES)
        if paths:
            _replace(obj, data.draw(st.sampled_from(paths)), new)
        else:
            obj = new
        lines[index] = dumps(obj)
        return "\n".join(lines).encode()
    if kind == "csv":
        rows = list(csv.reader(io.StringIO(text)))
        if rows:
            r = data.draw(st.integers(0, len(rows) - 1))
            if rows[r]:
                rows[r][data.draw(st.integers(0, len(rows[r]) - 1))] = data.draw(TEXT)
        out = io.StringIO()
        csv.writer(out).writerows(rows)
        return out.getvalue().encode()
    lines = text.split("\n")
    lines[data.draw(st.integers(0, len(lines) - 1))] = data.draw(TEXT)
    return "\n".join(lines).encode()


# ---- running one example ------------------------------------------------------------------

_COUNTER = itertools.count()
_STATS = {"examples": 0, "seconds": 0.0}


def data_dir_with(case: Case, target: bytes) -> Path:
    """A fresh data directory: the case's real files, its target replaced."""
    root = pytest_tmp() / f"ex{next(_COUNTER)}"
    for relative, content in {**case_files(case.name), case.target: target}.items():
        path = root / relative
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(gzip.compress(content) if case.gzipped and relative == case.target else content)
    return root


@functools.cache
def case_files(name: str) -> dict[str, bytes]:
    return next(c for c in CASES if c.name == name).files()


def only_user_errors(case: Case, target: bytes) -> None:
    """The reader returns well-typed rows or raises one single-line UserError."""
    started = time.perf_counter()
    try:
        case.run(data_dir_with(case, target))
    except UserError as e:
        assert str(e) and "\n" not in str(e), repr(str(e))
    finally:
        _STATS["examples"] += 1
        _STATS["seconds"] += time.perf_counter() - started


@pytest.fixture(scope="module", autouse=True)
def tmp_root(tmp_path_factory, request):
    _TMP[:] = [tmp_path_factory.mktemp("fuzz")]
    started = time.perf_counter()
    yield
    line = (f"test_fuzz_readers: {_STATS['examples']} fuzz examples over {len(CASES)} reader cases "
            f"({EXAMPLES} per case and property) in {time.perf_counter() - started:.1f} s")
    reporter = request.config.pluginmanager.get_plugin("terminalreporter")
    capture = request.config.pluginmanager.get_plugin("capturemanager")
    if reporter is not None and capture is not None:
        with capture.global_and_fixture_disabled():
            reporter.write_line("\n" + line)


def test_the_cases_read_their_real_files():
    """Unfuzzed, every case's small real data directory reads without error."""
    for case in CASES:
        assert case.run(data_dir_with(case, case_files(case.name)[case.target])) > 0, case.name


@pytest.mark.parametrize("case", CASES, ids=IDS)
@SETTINGS
@given(raw=st.binary(max_size=600))
def test_arbitrary_bytes(case, raw):
    only_user_errors(case, raw)


@pytest.mark.parametrize("case", CASES, ids=IDS)
@SETTINGS
@given(data=st.data())
def test_wrong_shape(case, data):
    only_user_errors(case, wrong_shape(case.kind, data))


@pytest.mark.parametrize("case", CASES, ids=IDS)
@SETTINGS
@given(data=st.data())
def test_mutated_real_file(case, data):
    only_user_errors(case, mutated(case_files(case.name)[case.target], data))


@pytest.mark.parametrize("case", CASES, ids=IDS)
@SETTINGS
@given(data=st.data())
def test_real_file_with_a_field_replaced(case, data):
    only_user_errors(case, field_replaced(case.kind, case_files(case.name)[case.target], data))


# ---- valid files stay valid ---------------------------------------------------------------

def _jsonl_edit(path: tuple) -> Callable[[bytes, str], bytes]:
    """Set field `path` of the second row of a JSON-lines file to `text`."""
    def edit(original: bytes, text: str) -> bytes:
        lines = original.decode().split("\n")
        obj = json.loads(lines[1])
        _replace(obj, path, text)
        lines[1] = dumps(obj)
        return "\n".join(lines).encode()
    return edit


def _json_edit(path: tuple) -> Callable[[bytes, str], bytes]:
    def edit(original: bytes, text: str) -> bytes:
        obj = json.loads(original)
        _replace(obj, path, text)
        return dumps(obj).encode()
    return edit


def _csv_edit(original: bytes, text: str) -> bytes:
    rows = list(csv.reader(io.StringIO(original.decode())))
    rows[1][0] = text
    out = io.StringIO()
    csv.writer(out).writerows(rows)
    return out.getvalue().encode()


def _line_edit(index: int) -> Callable[[bytes, str], bytes]:
    def edit(original: bytes, text: str) -> bytes:
        lines = original.decode().split("\n")
        lines[index] = text
        return "\n".join(lines).encode()
    return edit


#: (case, how a free-text field of its target is set to a text)
TEXT_CASES = [
    ("mmlu test csv", _csv_edit),
    ("socialiqa jsonl", _jsonl_edit(("context",))),
    ("arc jsonl", _jsonl_edit(("question", "stem"))),
    ("hellaswag text form", _line_edit(8)),          # item 2's first ending
    ("gsm8k jsonl", _jsonl_edit(("question",))),
    ("bbh json", _json_edit(("examples", 1, "input"))),
    ("bigbench task.json", _json_edit(("examples", 1, "input"))),
    ("bigbench foundry jsonl", _jsonl_edit(("query",))),
    ("truthfulqa mc_task.json", _json_edit((1, "question"))),
    ("humaneval jsonl", _jsonl_edit(("prompt",))),
    ("factual generations file", _jsonl_edit(("raw_response",))),
    ("c4 jsonl", _jsonl_edit(("text",))),
]
LINE_TEXT = st.text(alphabet=st.characters(blacklist_categories=("Cs",), blacklist_characters="\n\r")
                    | st.sampled_from(ODD.replace("\r", "")), max_size=30)


@pytest.mark.parametrize("name,edit", TEXT_CASES, ids=[n for n, _ in TEXT_CASES])
@SETTINGS
@given(text=LINE_TEXT)
def test_any_text_in_a_text_field_still_reads(name, edit, text):
    """U+2028, U+0085, form feeds, \\x1c-\\x1e, a BOM inside a field: valid files still read."""
    case = next(c for c in CASES if c.name == name)
    original = case_files(name)[case.target]
    expected = case.run(data_dir_with(case, original))
    assert case.run(data_dir_with(case, edit(original, text))) == expected
    _STATS["examples"] += 1
