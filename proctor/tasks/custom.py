r"""Data-only task files: tasks over a local data file or a hub dataset, defined in YAML (or TOML).

Their tasks render exactly as the built-in OLMES tasks render. A file holds one task (a mapping
with `name`) or several (`tasks:`, a list of them; in TOML `[[tasks]]`). A task gives the spec
names `<name>:mc` and `<name>:rc` when it has `choices`, and `<name>:gen` when it has `generation`::

    name: my_mc                 # required: letters, digits, _ . - (no ':'); not a built-in task's name
    dataset:                    # required: exactly one of path / hub
      path: questions.jsonl     #   a local .jsonl, .csv (with a header row) or .parquet file,
                                #   relative to the task file
      # hub: cais/mmlu          #   or a Hugging Face dataset (through `datasets`; with --data-dir,
      # config: astronomy       #   a dataset proctor has a local reader for is read from there)
      split: test               # required with hub; with path only a label (default "test")
    question: question          # required: the row field holding the question text
    choices: choices            # a field holding a list of strings, or a list of fields ([A, B, C, D])
    answer: answer              # the field holding the gold choice (choices and answer go together)
    answer_format: index        # optional: index (0-based int, or a string of digits) or letter
                                # ("A", "B", ...); by default the first row decides, every row must agree
    id: id                      # optional: a field holding each row's native id (default: row index)
    description: "The following are multiple choice questions (with answers) about astronomy.\n\n"
    fewshot:                    # optional (default 0-shot)
      path: dev.jsonl           #   rows of the same shape, from a file (relative to the task file),
      # split: dev              #   or from another split of the hub dataset
      num_shots: 5              #   required
      sampling: first           #   first (the first num_shots rows, in order; default) or seeded
                                #   (random.Random(1234).sample(rows, num_shots))
    primary_metric: {rc: acc_uncond}   # optional, per form; defaults mc: acc_raw, rc: acc_per_char
    benchmark: my_mc            # optional: the sidecar `benchmark` column (default: name)
    cluster: passage_id         # optional: a field whose rows share a passage or source; each value's
                                # documents are one cluster in the errors of compare and report
    generation:                 # optional: gives <name>:gen, a greedy cloze answer scored by exact_match
      target: answer_text       #   required: the field holding the gold text (compared after strip())
      stop: ["\n\n"]            #   optional (default ["\n\n"])
      max_gen_toks: 64          #   optional (default 64)

A field name may be dotted (`question.stem`) to read a nested field. Prompts are OLMES's:
MC "Question: q\n A. c0\n B. c1 ...\nAnswer:" scored on " A", " B", ...; RC
"Question: q\nAnswer:" scored on " " + each choice (unconditioned context "Answer:"); gen
"Question: q\nAnswer:" with few-shot answers from the target field. Query ids are
`<spec>#<native_id>`.

The file's schema is checked when it is included; its rows when the task reads them. Every
mistake is one UserError line naming the task file, the field and what is wrong.
"""

from __future__ import annotations

import csv
import difflib
import io
import random
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, ClassVar, Optional, Union

from proctor.data import local, resolve_data_dir
from proctor.data.fields import check, field, json_type
from proctor.data.readers import read_jsonl, read_text
from proctor.errors import UserError
from proctor.outputs.records import SampleOutput
from proctor.requests import Generate, GenerateResult
from proctor.tasks.base import TaskConfig
from proctor.tasks.choice import ChoiceTask, Rendered
from proctor.tasks.generation import DocScore, GenerationInstance, GenerationTask
from proctor.tasks.prompts import LETTERS, choice_prompt, fewshot_prefix, make_cloze_prompt, shot_block

SUFFIXES = (".yaml", ".yml", ".toml")
DATA_SUFFIXES = (".jsonl", ".csv", ".parquet")
CHOICE_METRICS = {"mc": ("acc_raw", "acc_per_token", "acc_per_char", "acc_per_byte"),
                  "rc": ("acc_raw", "acc_per_token", "acc_per_char", "acc_per_byte", "acc_uncond")}
DEFAULT_METRIC = {"mc": "acc_raw", "rc": "acc_per_char", "gen": "exact_match"}
FEWSHOT_SEED = 1234
NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.-]*")

TASK_FIELDS = ("name", "dataset", "question", "choices", "answer", "answer_format", "id",
               "description", "fewshot", "primary_metric", "benchmark", "cluster", "generation")
DATASET_FIELDS = ("path", "hub", "config", "split")
FEWSHOT_FIELDS = ("path", "split", "num_shots", "sampling")
GENERATION_FIELDS = ("target", "stop", "max_gen_toks")


@dataclass(frozen=True)
class Dataset:
    """Where a task's rows come from: a local file or a hub dataset (and its config), and the split."""

    path: Optional[Path]        # a local file (resolved against the task file's folder), or
    hub: Optional[str]          # a hub dataset id
    config: Optional[str]
    split: str


@dataclass(frozen=True)
class FewShot:
    """Where a task's few-shot examples come from, how many are used, and how they are picked."""

    path: Optional[Path]        # a local file, or
    split: Optional[str]        # another split of the hub dataset
    num_shots: int
    sampling: str               # "first" or "seeded"


@dataclass(frozen=True)
class Generation:
    """A task's `generation` field: the field holding the gold text, stop sequences, the token budget."""

    target: str
    stop: tuple[str, ...]
    max_gen_toks: int


@dataclass(frozen=True)
class TaskDef:
    """One task of a task file, its schema checked (its rows are checked when read)."""

    file: Path                  # the task file, as given (messages name it)
    name: str
    dataset: Dataset
    question: str
    choices: Union[str, tuple[str, ...], None]   # a list field, or one field per choice
    answer: Optional[str]
    answer_format: Optional[str]                 # "index", "letter", or None (the first row decides)
    id: Optional[str]
    description: str
    fewshot: Optional[FewShot]
    primary_metric: dict[str, str]               # form -> metric, for every form the task gives
    benchmark: str
    generation: Optional[Generation]
    cluster: Optional[str] = None                # a field naming each row's cluster (a shared passage)

    @property
    def forms(self) -> tuple[str, ...]:
        """The forms the task gives: mc and rc with `choices`, gen with `generation`."""
        return (("mc", "rc") if self.choices is not None else ()) + (("gen",) if self.generation else ())

    def spec(self, form: str) -> str:
        """Return the spec name of one of its forms: `<name>:<form>`."""
        return f"{self.name}:{form}"

    def config(self, form: str) -> TaskConfig:
        """Build the TaskConfig of one of its forms."""
        d, f = self.dataset, self.fewshot
        fewshot_source = None if f is None else str(f.path) if f.path else f"{d.hub}:{f.split}"
        return TaskConfig(name=self.spec(form), benchmark=self.benchmark,
                          dataset_path=str(d.path) if d.path else str(d.hub), dataset_name=d.config,
                          split=d.split, num_shots=f.num_shots if f else 0,
                          primary_metric=self.primary_metric[form], fewshot_source=fewshot_source)


# ---- reading and checking the file ---------------------------------------------------------

class _Table:
    """A mapping of the task file whose keys are checked against the fields it may hold."""

    def __init__(self, file: Path, prefix: str, value: Any, allowed: tuple[str, ...]):
        self.file, self.prefix = file, prefix
        where = f"field {prefix.rstrip('.')!r}" if prefix else "the file"
        self.data: dict = check(value, dict, f"{file}: {where}")
        for key in self.data:
            if key not in allowed:
                close = difflib.get_close_matches(str(key), allowed, n=1, cutoff=0.6)
                hint = f"; did you mean {prefix + close[0]!r}?" if close else f"; known: {', '.join(allowed)}"
                raise UserError(f"{file}: unknown field {prefix + str(key)!r}{hint}")

    def has(self, key: str) -> bool:
        return key in self.data

    def error(self, key: str, what: str) -> UserError:
        return UserError(f"{self.file}: field {self.prefix + key!r} {what}")

    def get(self, key: str, kind: Any, default: Any = None, *, required: bool = False) -> Any:
        if key not in self.data:
            if required:
                raise UserError(f"{self.file}: missing required field {self.prefix + key!r}")
            return default
        value = check(self.data[key], kind, f"{self.file}: field {self.prefix + key!r}")
        if isinstance(value, str) and not value and key != "description":
            raise self.error(key, "must not be empty")
        return value

    def table(self, key: str, allowed: tuple[str, ...]) -> Optional["_Table"]:
        return _Table(self.file, f"{self.prefix}{key}.", self.data[key], allowed) if key in self.data else None


MAX_DEPTH = 16  # nesting levels a task file may use (its schema needs 4)


def _parse(file: Path) -> Any:
    """Read a YAML or TOML task file into plain values: UserError for bad syntax, duplicate keys or deep nesting."""
    text = read_text(file)
    try:
        data = _parse_toml(file, text) if file.suffix == ".toml" else _parse_yaml(file, text)
        too_deep = _too_deep(data)
    except RecursionError:  # the parsers recurse once per level
        too_deep = True
    if too_deep:
        raise UserError(f"{file}: nests lists or tables more than {MAX_DEPTH} levels deep; "
                        "a task file is a few flat tables")
    if data is None:
        raise UserError(f"{file}: the file is empty; a task file needs at least name, dataset and question")
    return data


def _parse_toml(file: Path, text: str) -> Any:
    try:
        import tomllib
    except ImportError:  # Python 3.10
        raise UserError(f"{file}: TOML task files need Python 3.11 or later; use YAML") from None
    try:
        return tomllib.loads(text)  # refuses a key given twice itself
    except tomllib.TOMLDecodeError as e:
        raise UserError(f"{file}: not valid TOML ({e})") from None


def _parse_yaml(file: Path, text: str) -> Any:
    try:
        import yaml
    except ImportError:
        raise UserError(f"{file}: YAML task files need PyYAML (`pip install pyyaml`)") from None
    try:
        return yaml.load(text, Loader=_unique_keys_loader())
    except yaml.YAMLError as e:
        mark = getattr(e, "problem_mark", None)
        at = f"line {mark.line + 1}, column {mark.column + 1}: " if mark else ""
        problem = getattr(e, "problem", None) or str(e).splitlines()[0]
        raise UserError(f"{file}: not valid YAML ({at}{problem})") from None


def _unique_keys_loader() -> type:
    """Return a safe YAML loader that refuses a key given twice in one mapping (plain YAML keeps the last)."""
    import yaml

    class UniqueKeyLoader(yaml.SafeLoader):
        def construct_mapping(self, node: Any, deep: bool = False) -> Any:
            seen: set[Any] = set()
            for key_node, _ in node.value:
                key = self.construct_object(key_node, deep=deep)
                if isinstance(key, (str, int, float, bool)) or key is None:
                    if key in seen:
                        raise yaml.constructor.ConstructorError(
                            None, None, f"key {key!r} is given twice in one table", key_node.start_mark)
                    seen.add(key)
            return super().construct_mapping(node, deep=deep)

    return UniqueKeyLoader


def _too_deep(data: Any) -> bool:
    """Return whether lists/tables in `data` nest deeper than MAX_DEPTH (walked without recursion)."""
    stack = [(data, 0)]
    while stack:
        value, depth = stack.pop()
        if isinstance(value, (dict, list)):
            if depth >= MAX_DEPTH:
                return True
            children = value.values() if isinstance(value, dict) else value
            stack.extend((child, depth + 1) for child in children)
    return False


def read_task_file(file: Path) -> list[TaskDef]:
    """Every task a task file defines, its schema checked (rows are read later)."""
    if not file.is_file():
        raise UserError(f"{file}: task file not found")
    data = _parse(file)
    if isinstance(data, dict) and "tasks" in data:
        top = _Table(file, "", data, ("tasks",))
        entries = top.get("tasks", list)
        if not entries:
            raise top.error("tasks", "must list at least one task")
        defs = [_task(_Table(file, f"tasks[{i}].", e, TASK_FIELDS)) for i, e in enumerate(entries)]
    else:
        defs = [_task(_Table(file, "", data, TASK_FIELDS))]
    seen: set[str] = set()
    for d in defs:
        if d.name in seen:
            raise UserError(f"{file}: two tasks are named {d.name!r}")
        seen.add(d.name)
    return defs


def _task(t: _Table) -> TaskDef:
    name = t.get("name", str, required=True)
    if not NAME.fullmatch(name):
        raise t.error("name", f"must be letters, digits, '_', '.' or '-' (no ':' or spaces), got {_short(name)}")
    dataset = _dataset(t)
    choices = t.get("choices", Union[str, list[str]])
    if isinstance(choices, list):
        if len(choices) < 2 or any(not c for c in choices):
            raise t.error("choices", "must name at least two fields, none empty")
        choices = tuple(choices)
    answer = t.get("answer", str)
    if (choices is None) != (answer is None):
        raise UserError(f"{t.file}: missing required field {t.prefix + ('answer' if answer is None else 'choices')!r} "
                        "(choices and answer go together)")
    answer_format = t.get("answer_format", str)
    if answer_format not in (None, "index", "letter"):
        raise t.error("answer_format", f"must be index or letter, got {answer_format!r}")
    if answer_format and choices is None:
        raise t.error("answer_format", "applies to choices, and the task has none")
    generation = _generation(t)
    if choices is None and generation is None:
        raise UserError(f"{t.file}: missing required field {t.prefix + 'choices'!r}: a task needs choices "
                        "and answer (for :mc and :rc), or generation (for :gen), or both")
    forms = (("mc", "rc") if choices is not None else ()) + (("gen",) if generation else ())
    return TaskDef(
        file=t.file, name=name, dataset=dataset, question=t.get("question", str, required=True),
        choices=choices, answer=answer, answer_format=answer_format, id=t.get("id", str),
        description=t.get("description", str, ""), fewshot=_fewshot(t, dataset),
        primary_metric=_primary_metrics(t, forms), benchmark=t.get("benchmark", str, name),
        generation=generation, cluster=t.get("cluster", str))


def _dataset(t: _Table) -> Dataset:
    if not t.has("dataset"):
        raise UserError(f"{t.file}: missing required field {t.prefix + 'dataset'!r}")
    d = t.table("dataset", DATASET_FIELDS)
    assert d is not None
    path, hub = d.get("path", str), d.get("hub", str)
    if (path is None) == (hub is None):
        raise UserError(f"{t.file}: field {d.prefix.rstrip('.')!r} needs exactly one of path or hub")
    if path is not None:
        if d.has("config"):
            raise d.error("config", "applies to dataset.hub only")
        return Dataset(path=_data_file(d, "path", path), hub=None, config=None,
                       split=d.get("split", str, "test"))
    return Dataset(path=None, hub=hub, config=d.get("config", str),
                   split=d.get("split", str, required=True))


def _data_file(t: _Table, key: str, relative: str) -> Path:
    path = (t.file.parent / relative).resolve()
    if path.suffix not in DATA_SUFFIXES:
        raise t.error(key, f"must be a {', '.join(DATA_SUFFIXES)} file, got {relative!r}")
    if not path.is_file():
        raise t.error(key, f"names a file that does not exist: {path}")
    return path


def _fewshot(t: _Table, dataset: Dataset) -> Optional[FewShot]:
    f = t.table("fewshot", FEWSHOT_FIELDS)
    if f is None:
        return None
    path, split = f.get("path", str), f.get("split", str)
    if (path is None) == (split is None):
        raise UserError(f"{t.file}: field {f.prefix.rstrip('.')!r} needs exactly one of path or split")
    if split is not None and dataset.hub is None:
        raise f.error("split", "applies to a dataset.hub dataset; with dataset.path give fewshot.path")
    if split is not None and split == dataset.split:
        raise f.error("split", f"is the evaluated split {split!r}; few-shot examples must come from another")
    num_shots = f.get("num_shots", int, required=True)
    if num_shots < 0:
        raise f.error("num_shots", f"must be 0 or more, got {num_shots}")
    sampling = f.get("sampling", str, "first")
    if sampling not in ("first", "seeded"):
        raise f.error("sampling", f"must be first or seeded, got {sampling!r}")
    shots_file = _data_file(f, "path", path) if path else None
    if shots_file is not None and num_shots > 0:  # a local source is counted now, not after the model loads
        rows = len(_file_rows(shots_file))
        if num_shots > rows:
            raise f.error("num_shots", f"is {num_shots}, but {path} holds {rows} row{'' if rows == 1 else 's'}; "
                                           f"ask for at most {rows}")
    return FewShot(path=shots_file, split=split, num_shots=num_shots, sampling=sampling)


def _generation(t: _Table) -> Optional[Generation]:
    g = t.table("generation", GENERATION_FIELDS)
    if g is None:
        return None
    stop = g.get("stop", list[str], ["\n\n"])
    if any(not s for s in stop):
        raise g.error("stop", "must not hold an empty string")
    max_gen_toks = g.get("max_gen_toks", int, 64)
    if max_gen_toks < 1:
        raise g.error("max_gen_toks", f"must be 1 or more, got {max_gen_toks}")
    return Generation(target=g.get("target", str, required=True), stop=tuple(stop), max_gen_toks=max_gen_toks)


def _primary_metrics(t: _Table, forms: tuple[str, ...]) -> dict[str, str]:
    given = t.get("primary_metric", dict[str, str], {})
    out = {form: DEFAULT_METRIC[form] for form in forms}
    for form, metric in given.items():
        key = f"primary_metric.{form}"
        if form not in forms:
            raise UserError(f"{t.file}: unknown field {t.prefix + key!r}; this task's forms are "
                            f"{', '.join(forms)}")
        allowed = CHOICE_METRICS.get(form, ("exact_match",))
        if metric not in allowed:
            raise UserError(f"{t.file}: field {t.prefix + key!r} must be one of {', '.join(allowed)}, "
                            f"got {metric!r}")
        out[form] = metric
    return out


# ---- reading rows --------------------------------------------------------------------------

def _file_rows(path: Path) -> list[tuple[str, dict]]:
    """(where, row) of every row of a local data file; `where` names its line (or row)."""
    if path.suffix == ".jsonl":
        return [(f"{path}:{line}", row) for line, row in read_jsonl(path)]
    if path.suffix == ".csv":
        reader = csv.DictReader(io.StringIO(read_text(path), newline=""), strict=True)
        rows = []
        try:
            for row in reader:
                if None in row or None in row.values():
                    raise UserError(f"{path}:{reader.line_num}: expected {len(reader.fieldnames or ())} "
                                    "CSV columns (as in the header row)")
                rows.append((f"{path}:{reader.line_num}", row))
        except csv.Error as e:
            raise UserError(f"{path}:{reader.line_num}: malformed CSV ({e})") from None
        return rows
    try:
        import pyarrow.parquet as pq
    except ImportError:
        raise UserError(f"reading {path} needs pyarrow (`pip install pyarrow`)") from None
    try:
        table = pq.read_table(path)
    except Exception as e:  # not parquet, truncated: pyarrow raises several types
        raise UserError(f"cannot read {path} as parquet ({str(e).splitlines()[0]})") from None
    return [(f"{path} row {i}", row) for i, row in enumerate(table.to_pylist())]


def _hub_rows(hub: str, config: Optional[str], split: str, data_dir: Optional[Path]) -> list[tuple[str, dict]]:
    from proctor.data.hub import load_hub_split

    root = resolve_data_dir(data_dir)
    loader = local.LOADERS.get(hub) if root is not None else None
    rows = loader(root, config, split) if loader and root else load_hub_split(hub, config, split)
    where = f"{hub}" + (f" ({config})" if config else "") + f" split {split!r}"
    return [(f"{where} row {i}", row) for i, row in enumerate(rows)]


class _FromFile:
    """What the task classes of a task file share: the definition, its rows, their checks."""

    source: ClassVar[TaskDef]     # set on the class made for each spec (`task_class`)
    config: TaskConfig

    def raw_rows(self, data_dir: Optional[Path], fewshot: bool) -> list[tuple[str, dict]]:
        d, f = self.source.dataset, self.source.fewshot
        if fewshot:
            assert f is not None
            rows = _file_rows(f.path) if f.path else _hub_rows(str(d.hub), d.config, str(f.split), data_dir)
        else:
            rows = _file_rows(d.path) if d.path else _hub_rows(str(d.hub), d.config, d.split, data_dir)
        if not rows:
            raise UserError(f"{self.source.file}: {'fewshot' if fewshot else 'dataset'} has no rows")
        return rows

    def text(self, row: dict, name: str, where: str) -> str:
        return field(row, name, str, f"{self.source.file}: {where}: the row")

    def row_id(self, row: dict, where: str) -> Any:
        return None if self.source.id is None else field(row, self.source.id, Union[str, int],
                                                         f"{self.source.file}: {where}: the row")

    def row_cluster(self, row: dict, where: str) -> Optional[str]:
        if self.source.cluster is None:
            return None
        return str(field(row, self.source.cluster, Union[str, int], f"{self.source.file}: {where}: the row"))

    def native_id(self, row: dict, index: int) -> Any:
        return index if row["id"] is None else row["id"]

    def row_metadata(self, row: dict) -> dict:
        return {"cluster": row["cluster"]}

    def shot_rows(self, data_dir: Optional[Path], row_of: Callable[[dict, str], dict]) -> list[dict]:
        """Return the few-shot rows in prompt order.

        All of them (the first num_shots are used), or a seeded sample of num_shots.
        """
        f, k = self.source.fewshot, self.config.num_shots
        if f is None:
            raise UserError(f"{self.source.file}: the spec asks for {k} few-shot examples but the task "
                            "has no fewshot field")
        rows = [row_of(row, where) for where, row in self.raw_rows(data_dir, fewshot=True)]
        if f.sampling == "seeded" and k <= len(rows):
            return random.Random(FEWSHOT_SEED).sample(rows, k)
        return rows


class FileChoiceTask(_FromFile, ChoiceTask):
    """`<name>:mc` / `<name>:rc` of a task file."""

    def description(self) -> str:
        """Return the task's `description` field."""
        return self.source.description

    def split_rows(self, data_dir: Optional[Path], split: str) -> list[dict]:
        """Read and check the dataset's rows (a task file has one split: `split` is not consulted)."""
        return [self.choice_row(row, where) for where, row in self.raw_rows(data_dir, fewshot=False)]

    def fewshot_rows(self, data_dir: Optional[Path]) -> list[dict]:
        """Read and check the few-shot rows, in prompt order (`shot_rows`)."""
        return self.shot_rows(data_dir, self.choice_row)

    def item_count(self, data_dir: Optional[Path]) -> Optional[int]:
        """Count the docs when the rows are local (never from the hub); None otherwise."""
        return _item_count(self, data_dir)

    def choice_row(self, row: dict, where: str) -> dict:
        """Check a row and reduce it to its question, choices, gold index, id and cluster."""
        s = self.source
        at = f"{s.file}: {where}: the row"
        if isinstance(s.choices, tuple):
            choices = [field(row, name, str, at) for name in s.choices]
        else:
            choices = field(row, str(s.choices), list[str], at)
            if len(choices) < 2:
                raise UserError(f"{at} has {len(choices)} choices in {s.choices!r}; a question needs at least 2")
        if self.is_mc and len(choices) > len(LETTERS):
            raise UserError(f"{at} has {len(choices)} choices; the :mc form letters at most {len(LETTERS)} "
                            "(use the :rc form)")
        return {"question": self.text(row, s.question, where), "choices": choices,
                "answer": self.gold(row, len(choices), where), "id": self.row_id(row, where),
                "cluster": self.row_cluster(row, where)}

    _answer_format: Optional[str] = None   # inferred from the first row read, when not given

    def gold(self, row: dict, n: int, where: str) -> int:
        """Read a row's gold choice as an index, in the answer format given or inferred from the first row."""
        s = self.source
        value = field(row, str(s.answer), Union[int, str], f"{s.file}: {where}: the row")
        is_index = isinstance(value, int) or (value.isascii() and value.isdigit())
        is_letter = isinstance(value, str) and len(value) == 1 and "A" <= value <= "Z"
        fmt = s.answer_format or self._answer_format or ("index" if is_index else "letter" if is_letter else None)
        at = f"{s.file}: {where}: field {s.answer!r} is {_short(value)}"
        if fmt is None:
            raise UserError(f"{at}, neither a 0-based index nor a letter A-Z")
        if (fmt == "index" and not is_index) or (fmt == "letter" and not is_letter):
            how = "answer_format says" if s.answer_format else "the first row says"
            raise UserError(f"{at}, not {'an index' if fmt == 'index' else 'a letter'} ({how} {fmt}; "
                            "every row must agree)")
        self._answer_format = fmt
        gold = int(value) if fmt == "index" else ord(str(value)) - ord("A")
        if not 0 <= gold < n:
            raise UserError(f"{at}, out of range for {n} choices")
        return gold

    def render(self, row: dict) -> Rendered:
        """Lay a row out as OLMES does: MC with lettered choices, RC as a cloze prompt."""
        q, choices = row["question"], tuple(row["choices"])
        text = choice_prompt(q, choices, self.is_mc)
        return Rendered(text=text, options=choices, gold=row["answer"])


class FileGenerationTask(_FromFile, GenerationTask):
    """`<name>:gen` of a task file: greedy cloze answers, exact match after strip()."""

    metric_names = ("exact_match",)

    def docs(self, data_dir: Optional[Path]) -> list[dict]:
        """Read and check the dataset's rows as docs."""
        rows = [self.gen_row(row, where) for where, row in self.raw_rows(data_dir, fewshot=False)]
        return self.as_docs(rows, self.config.split)

    def item_count(self, data_dir: Optional[Path]) -> Optional[int]:
        """Count the docs when the rows are local (never from the hub); None otherwise."""
        return _item_count(self, data_dir)

    def gen_row(self, row: dict, where: str) -> dict:
        """Check a row and reduce it to its question, target text, id and cluster."""
        assert self.source.generation is not None
        target = field(row, self.source.generation.target, Union[str, int], f"{self.source.file}: {where}: the row")
        return {"question": self.text(row, self.source.question, where), "target": str(target),
                "id": self.row_id(row, where), "cluster": self.row_cluster(row, where)}

    def prompt_prefix(self, data_dir: Optional[Path]) -> str:
        """Return the description, then num_shots few-shot examples as cloze question-answer blocks."""
        k = self.config.num_shots
        if not k:
            return self.source.description
        shots = self.shot_rows(data_dir, self.gen_row)
        if len(shots) < k:
            raise UserError(f"the spec needs {k} few-shot examples but its few-shot source "
                            f"{self.config.fewshot_source} has only {len(shots)} rows")
        return fewshot_prefix(self.source.description,
                              [shot_block(make_cloze_prompt(s["question"]), s["target"]) for s in shots[:k]])

    def doc_request(self, prefix: str, doc: dict) -> Generate:
        """Ask for an answer to the doc's cloze prompt after the prefix, with the task's stop and max_gen_toks."""
        g = self.source.generation
        assert g is not None
        return Generate(context=prefix + make_cloze_prompt(doc["question"]), max_gen_toks=g.max_gen_toks,
                        stop=g.stop)

    def doc_target(self, doc: dict) -> str:
        """Return the doc's gold text."""
        return doc["target"]

    def score(self, instance: GenerationInstance, result: GenerateResult) -> DocScore:
        """Match each sample's stripped text against the stripped target; the first sample is scored."""
        if not result.samples:
            raise ValueError(f"{instance.query_id}: a GenerateResult without samples")
        gold = str(instance.target).strip()
        answers = [s.text.strip() for s in result.samples]
        correct = [a == gold for a in answers]
        return DocScore(metrics={"exact_match": float(correct[0])}, predicted_answer=answers[0],
                        correct_answer=gold, is_correct=correct[0],
                        model_output=tuple(SampleOutput(s.text, s.num_tokens, s.finish_reason,
                                                        {"extracted": a, "correct": ok})
                                           for s, a, ok in zip(result.samples, answers, correct)))


def _item_count(task: Any, data_dir: Optional[Path]) -> Optional[int]:
    """Docs of a spec for `proctor tasks`: counted when the rows are local (never from the hub)."""
    d = task.source.dataset
    if d.hub is not None and (resolve_data_dir(data_dir) is None or d.hub not in local.LOADERS):
        return None
    try:
        return len(task.docs(data_dir))
    except UserError:
        return None


def task_class(defn: TaskDef, form: str) -> type:
    """Return the class a spec of a task file resolves to: the family class, bound to its definition."""
    base = FileGenerationTask if form == "gen" else FileChoiceTask
    return type(f"{base.__name__}[{defn.spec(form)}]", (base,), {"source": defn, "__module__": __name__})


def _short(value: Any) -> str:
    """Render a value for a message: short reprs in full, long ones by type."""
    text = repr(value)
    return text if len(text) <= 60 else json_type(value)
