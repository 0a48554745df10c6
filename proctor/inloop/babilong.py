r"""BABILong zero-shot BPB tasks: `babilong_{length}_bpb_0shot`, one per context length.

Lengths (case-sensitive): 0k 1k 2k 4k 8k 16k 32k 64k 128k 256k 512k 1M 10M. A task holds
every QA set of its length (qa1-qa20 at 0k, qa1-qa10 at 1k..1M, qa1-qa5 at 10M), in that
order; lengths are never combined. Each example is one document with one continuation:

    prompt       = input + "\nQuestion: " + question + "\nAnswer:"
    continuation = " " + target        (the gold answer only; metric_type "bpb")

scored through the offline tokenization policy (left truncation to `model_ctx_len`), so
ICLMetric's `bpb_v2` counts the leading space in the UTF-8 bytes and averages BPB over
examples.

Data: the hub dataset RMT-team/babilong (config = length, split = QA set; fields `input`,
`question`, `target`), downloaded and cached by Hugging Face on first use; or a local
directory in that repository's file layout:

    <data_dir>/babilong/data/qa1/0k.json, <data_dir>/babilong/data/qa2/0k.json, ...
    <data_dir>/babilong/data/qa{N}/{length}.json

each file a JSON array of {"input", "question", "target"} objects, or JSON lines of them
(`data_dir` as elsewhere: an explicit directory, else $PROCTOR_DATA_DIR, else the hub).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any, Optional, Union

from proctor.data.readers import split_lines
from proctor.errors import UserError, check_positive_int
from proctor.inloop.icl import ChoiceDoc, ICLDataset

HUB_DATASET = "RMT-team/babilong"
LENGTHS: tuple[str, ...] = ("0k", "1k", "2k", "4k", "8k", "16k", "32k", "64k", "128k",
                            "256k", "512k", "1M", "10M")
FIELDS = ("input", "question", "target")


def check_length(length: str) -> str:
    """Return `length` if it is one of LENGTHS (case-sensitive), else raise a UserError."""
    if length not in LENGTHS:
        raise UserError(f"unknown BABILong length {length!r}; use one of {', '.join(LENGTHS)} "
                        "(case-sensitive)")
    return length


def qa_sets(length: str) -> tuple[str, ...]:
    """Return the QA sets available at a length: qa1-qa20 (0k), qa1-qa5 (10M), else qa1-qa10."""
    check_length(length)
    count = 20 if length == "0k" else 5 if length == "10M" else 10
    return tuple(f"qa{i}" for i in range(1, count + 1))


QA_SETS: dict[str, tuple[str, ...]] = {length: qa_sets(length) for length in LENGTHS}
# task name -> length
TASKS: dict[str, str] = {f"babilong_{length}_bpb_0shot": length for length in LENGTHS}


def prompt_of(row: dict) -> tuple[str, str]:
    """(prompt, continuation) of one BABILong row."""
    return row["input"] + "\nQuestion: " + row["question"] + "\nAnswer:", " " + row["target"]


def local_path(root: Path, length: str, qa: str) -> Path:
    """Return the file of one QA set at one length under a local data directory (the hub's layout)."""
    return root / "babilong" / "data" / qa / f"{length}.json"


def _read_rows(path: Path) -> list[dict]:
    if not path.is_file():
        raise UserError(f"BABILong file not found: {path}; lay out the data directory like the hub "
                        f"dataset {HUB_DATASET} (<data_dir>/babilong/data/qa{{N}}/{{length}}.json), "
                        "or pass no data directory to download it from the hub")
    try:
        text = path.read_text(encoding="utf-8-sig")  # a leading byte-order mark dropped
    except (OSError, UnicodeDecodeError) as e:
        raise UserError(f"cannot read {path}: {e}") from None
    try:
        if text.lstrip().startswith("["):
            rows = json.loads(text)
        else:
            rows = [json.loads(line) for line in split_lines(text) if line.strip()]
    except (json.JSONDecodeError, RecursionError) as e:
        raise UserError(f"{path}: not JSON or JSON lines ({e})") from None
    if not isinstance(rows, list):
        raise UserError(f"{path}: expected a JSON array of rows or JSON lines")
    return rows


def _check_rows(rows: list, where: str) -> list[dict]:
    for i, row in enumerate(rows):
        if not isinstance(row, dict) or any(not isinstance(row.get(f), str) for f in FIELDS):
            raise UserError(f"{where}: row {i} must have string fields {', '.join(FIELDS)}")
    return rows


def load_rows(length: str, qa: str, data_dir: Optional[Union[str, Path]],
              num_samples: Optional[int] = None) -> list[dict]:
    """Rows of one (length, QA set): from `data_dir` when given, else the hub."""
    from proctor.data.sources import resolve_data_dir

    root = resolve_data_dir(data_dir)
    if root is None:
        from proctor.data.hub import load_hub_split

        rows, where = load_hub_split(HUB_DATASET, length, qa), f"{HUB_DATASET} {length} {qa}"
    else:
        path = local_path(root, length, qa)
        rows, where = _read_rows(path), str(path)
    return _check_rows(rows[:num_samples], where)


class Babilong(ICLDataset):
    """All QA sets of one BABILong length as a zero-shot BPB task (see the module doc).

    `num_samples` keeps the first N examples of each QA set (default: all of them).
    `qa_sets` and `sources` record which QA set each document comes from.
    """

    def __init__(self, tokenizer: Any, dataset_name: str = "4k", *, model_ctx_len: int = 2048,
                 data_dir: Optional[Union[str, Path]] = None, num_samples: Optional[int] = None):
        self.dataset_name = check_length(dataset_name)
        if num_samples is not None:
            check_positive_int("num_samples", num_samples)
        self.qa_sets = qa_sets(dataset_name)
        docs, self.sources = [], []
        for qa in self.qa_sets:
            for row in load_rows(dataset_name, qa, data_dir, num_samples):
                prompt, continuation = prompt_of(row)
                docs.append(ChoiceDoc(prompt, (continuation,), 0))
                self.sources.append(qa)
        if not docs:
            raise UserError(f"BABILong {dataset_name}: no examples found")
        super().__init__(docs, tokenizer, model_ctx_len=model_ctx_len, metric_type="bpb",
                         what=f"babilong_{dataset_name}_bpb_0shot")

    def __repr__(self) -> str:
        return (f"Babilong({self.dataset_name!r}, documents={self.num_documents}, "
                f"model_ctx_len={self.model_ctx_len})")
