"""Local data directories laid out like shared/data, read into hub-shaped rows.

Each loader returns rows with the same fields `datasets.load_dataset` gives for the
spec's hub id, so tasks never know where their rows came from.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Callable, Optional

from proctor.data import local_code, local_harness
from proctor.data.readers import first_existing, read_csv, read_json, read_jsonl, read_lines
from proctor.errors import UserError

Rows = list[dict]


def _variants(path: Path, *suffixes: str) -> list[Path]:
    return [path] + [path.with_name(path.name + s) for s in suffixes]


# ---- MMLU: mmlu/{dev,val,test}/<subject>_<split>.csv, no header -----------------

_MMLU_DIRS = {"test": "test", "validation": "val", "dev": "dev"}


def mmlu(data_dir: Path, subject: Optional[str], split: str) -> Rows:
    if split not in _MMLU_DIRS:
        raise UserError(f"MMLU has no local split {split!r} (have: {', '.join(_MMLU_DIRS)})")
    d = _MMLU_DIRS[split]
    path = first_existing(_variants(data_dir / "mmlu" / d / f"{subject}_{d}.csv", ".gz"))
    rows = []
    for line, (question, a, b, c, dd, answer) in read_csv(path, 6):
        if answer not in ("A", "B", "C", "D"):
            raise UserError(f"{path}:{line}: answer must be A, B, C or D, found {answer!r}")
        rows.append({"question": question, "subject": subject, "choices": [a, b, c, dd],
                     "answer": "ABCD".index(answer)})
    return rows


# ---- SocialIQA: social_i_qa/socialiqa-train-dev/{dev,train}.jsonl + -labels.lst --

_SIQA_FILES = {"validation": "dev", "train": "train"}


def social_i_qa(data_dir: Path, name: Optional[str], split: str) -> Rows:
    if split not in _SIQA_FILES:
        raise UserError(f"SocialIQA has no split {split!r} (have: validation, train)")
    base = data_dir / "social_i_qa" / "socialiqa-train-dev"
    stem = _SIQA_FILES[split]
    rows_path = first_existing(_variants(base / f"{stem}.jsonl", ".gz"))
    labels_path = first_existing(_variants(base / f"{stem}-labels.lst", ".gz"))
    raw, labels = read_jsonl(rows_path), read_lines(labels_path)
    if len(raw) != len(labels):
        raise UserError(f"{labels_path}: has {len(labels)} labels but {rows_path} has "
                        f"{len(raw)} rows (line {min(len(raw), len(labels)) + 1} has no partner)")
    rows = []
    for i, (row, label) in enumerate(zip(raw, labels)):
        label = label.strip()
        if label not in ("1", "2", "3"):
            raise UserError(f"{labels_path}:{i + 1}: label must be 1, 2 or 3, found {label!r}")
        try:
            rows.append({"context": row["context"], "question": row["question"],
                         "answerA": row["answerA"], "answerB": row["answerB"],
                         "answerC": row["answerC"], "label": label})
        except KeyError as e:
            raise UserError(f"{rows_path}:{i + 1}: missing field {e}") from None
    return rows


# ---- ARC: ai2_arc/ARC-{Challenge,Easy}/ARC-*-{Train,Dev,Test}.jsonl ------------

_ARC_FILES = {"train": "Train", "validation": "Dev", "test": "Test"}


def ai2_arc(data_dir: Path, name: Optional[str], split: str) -> Rows:
    if name not in ("ARC-Challenge", "ARC-Easy") or split not in _ARC_FILES:
        raise UserError(f"ARC has no local config {name!r} / split {split!r}")
    path = first_existing(_variants(data_dir / "ai2_arc" / name / f"{name}-{_ARC_FILES[split]}.jsonl", ".gz"))
    rows = []
    for i, row in enumerate(read_jsonl(path)):
        try:
            q = row["question"]
            rows.append({"id": row["id"], "question": q["stem"],
                         "choices": {"text": [c["text"] for c in q["choices"]],
                                     "label": [c["label"] for c in q["choices"]]},
                         "answerKey": row["answerKey"]})
        except (KeyError, TypeError) as e:
            raise UserError(f"{path}:{i + 1}: not an ARC row (missing {e})") from None
    return rows


# ---- HellaSwag: hellaswag/hellaswag_{val,train}_full.txt.bz2 (klosax text form) --
#
# 6 lines per item: "activity_label: ctx", gold 0-3, four endings; markup already
# removed. The hub rows have ctx_a/ctx_b and OLMES builds `ctx_a + " " +
# ctx_b.capitalize()`. The text form only has ctx = ctx_a + " " + ctx_b, so we split
# it back: ctx_b = the trailing fragment after the last sentence end when it starts in
# lower case (ActivityNet items), else "" (WikiHow items have an empty ctx_b).

_HELLASWAG_FILES = {"validation": "val", "train": "train"}
_TRAILING_FRAGMENT = re.compile(r"^(.*[.!?])\s+([a-z][^.!?]*)$", re.S)


def split_hellaswag_ctx(ctx: str) -> tuple[str, str]:
    m = _TRAILING_FRAGMENT.match(ctx)
    return (m.group(1), m.group(2)) if m else (ctx, "")


def hellaswag(data_dir: Path, name: Optional[str], split: str) -> Rows:
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
    if len(lines) % 6:
        raise UserError(f"{path}: {len(lines)} lines is not a multiple of 6 "
                        "(each item is 'label: context', gold 0-3, four endings)")
    rows = []
    for start in range(0, len(lines), 6):
        head, gold, *endings = lines[start:start + 6]
        label, sep, ctx = head.partition(": ")
        if not sep:
            raise UserError(f"{path}:{start + 1}: expected 'activity_label: context'")
        if gold.strip() not in ("0", "1", "2", "3"):
            raise UserError(f"{path}:{start + 2}: gold label must be 0-3, found {gold!r}")
        ctx_a, ctx_b = split_hellaswag_ctx(ctx)
        rows.append({"activity_label": label, "ctx_a": ctx_a, "ctx_b": ctx_b, "ctx": ctx,
                     "endings": list(endings), "label": gold.strip()})
    return rows


# ---- GSM8K: gsm8k/{test.jsonl,train.jsonl.gz} (original openai/grade-school-math files) --

_GSM8K_SPLITS = ("test", "train")


def gsm8k(data_dir: Path, name: Optional[str], split: str) -> Rows:
    if split not in _GSM8K_SPLITS:
        raise UserError(f"GSM8K has no split {split!r} (have: test, train)")
    path = first_existing(_variants(data_dir / "gsm8k" / f"{split}.jsonl", ".gz"))
    rows = []
    for i, row in enumerate(read_jsonl(path)):
        if not isinstance(row.get("question"), str) or not isinstance(row.get("answer"), str):
            raise UserError(f"{path}:{i + 1}: a GSM8K row needs string fields 'question' and 'answer'")
        rows.append({"question": row["question"], "answer": row["answer"]})
    return rows


# ---- BIG-Bench-Hard: bbh/bbh/<task>.json ({"examples": [{"input", "target"}]}) ----------

def bbh(data_dir: Path, name: Optional[str], split: str) -> Rows:
    if split != "test":
        raise UserError(f"BIG-Bench-Hard has only a test split, not {split!r}")
    path = first_existing(_variants(data_dir / "bbh" / "bbh" / f"{name}.json", ".gz"))
    obj = read_json(path)
    examples = obj.get("examples") if isinstance(obj, dict) else None
    if not isinstance(examples, list):
        raise UserError(f"{path}: expected a JSON object with a list field 'examples'")
    rows = []
    for i, ex in enumerate(examples):
        if not (isinstance(ex, dict) and isinstance(ex.get("input"), str)
                and isinstance(ex.get("target"), str)):
            raise UserError(f"{path}: examples[{i}] needs string fields 'input' and 'target'")
        rows.append({"input": ex["input"], "target": ex["target"]})
    return rows


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
