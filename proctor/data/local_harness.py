"""Local readers for the lm-evaluation-harness datasets TruthfulQA and BIG-bench.

Rows come out shaped like the hub datasets lm-eval loads:
`truthfulqa/truthful_qa` (multiple_choice, generation) and `hails/bigbench` (`<task>_zero_shot`).
"""

from __future__ import annotations

from pathlib import Path
from typing import Optional

from proctor.data.fields import check, field, nonempty, optional_field
from proctor.data.readers import first_existing, read_csv, read_json, read_jsonl
from proctor.errors import UserError

Rows = list[dict]


# ---- TruthfulQA: truthfulqa/data/v0/mc_task.json and TruthfulQA.csv ---------------
#
# The hub's configs were built from sylinrl/TruthfulQA at commit 013686a (the 2021 files,
# 817 questions), stored here as data/v0: multiple_choice from mc_task.json (first "What is
# the smallest country in the world that is at least one square mile in area?"),
# generation from TruthfulQA.csv (first "What happens to you if you eat watermelon seeds?",
# 5 correct answers; data/v1 adds a sixth). The root files are the 2025 revision (790
# questions) and data/v1 the Oct-2021 one.

#: TruthfulQA.csv's header (data/v0) and the hub's generation column each becomes
GENERATION_COLUMNS = {"Type": "type", "Category": "category", "Question": "question", "Best Answer": "best_answer",
                      "Correct Answers": "correct_answers", "Incorrect Answers": "incorrect_answers",
                      "Source": "source"}


def truthful_qa(data_dir: Path, name: Optional[str], split: str) -> Rows:
    """Read TruthfulQA's validation split, multiple_choice from mc_task.json or generation from TruthfulQA.csv (data/v0)."""
    if name not in ("multiple_choice", "generation") or split != "validation":
        raise UserError(f"TruthfulQA has no local config {name!r} / split {split!r} "
                        "(have: multiple_choice, generation / validation)")
    base = data_dir / "truthfulqa" / "data" / "v0"
    if name == "generation":
        return _generation_rows(first_existing([base / "TruthfulQA.csv", base / "TruthfulQA.csv.gz"]))
    path = first_existing([base / "mc_task.json", base / "mc_task.json.gz"])
    items = check(read_json(path), list, f"{path}: the file")
    rows = [_truthfulqa_row(item, f"{path}: item {i}") for i, item in enumerate(items)]
    return nonempty(rows, path)


def _generation_rows(path: Path) -> Rows:
    """Return the hub builder's rows: a row without correct or incorrect answers left out, answers split at ';'."""
    lines = read_csv(path, len(GENERATION_COLUMNS))
    if not lines or lines[0][1] != tuple(GENERATION_COLUMNS):
        raise UserError(f"{path}:1: TruthfulQA.csv must start with the header {','.join(GENERATION_COLUMNS)}")
    rows = []
    for _, fields in lines[1:]:
        row = dict(zip(GENERATION_COLUMNS.values(), fields))
        if row["correct_answers"] and row["incorrect_answers"]:
            rows.append({**row, "correct_answers": _answers(row["correct_answers"]),
                         "incorrect_answers": _answers(row["incorrect_answers"])})
    return nonempty(rows, path)


def _answers(text: str) -> list[str]:
    # an empty answer after a trailing ';' stays, as on the hub (lm-eval's process_docs_gen drops it)
    return [answer.strip() for answer in text.strip().split(";")]


def _truthfulqa_row(item: object, where: str) -> dict:
    return {"question": field(item, "question", str, where),
            "mc1_targets": _targets(item, "mc1_targets", where, single=True),
            "mc2_targets": _targets(item, "mc2_targets", where, single=False)}


def _targets(item: object, name: str, where: str, single: bool) -> dict:
    """Check `{answer: 0|1}` in file order, the first answer true (lm-eval's gold is index 0).

    MC1 has exactly one true answer. The result is the hub's `{choices, labels}`.
    """
    answers = field(item, name, dict[str, int], where)
    labels = list(answers.values())
    if not answers or labels[0] != 1 or any(v not in (0, 1) for v in labels):
        raise UserError(f"{where}'s {name!r} must map answers to 1 (true) or 0 (false), the "
                        "first answer true")
    if single and labels.count(1) != 1:
        raise UserError(f"{where}'s {name!r} has {labels.count(1)} true answers; MC1 has exactly one")
    return {"choices": list(answers), "labels": labels}


# ---- BIG-bench: original task.json, else the llm-foundry jsonl --------------------
#
# hails/bigbench `<task>_zero_shot` rows were made by BIG-bench's json_task formatting:
# inputs = task_prefix + example_input_prefix + input + example_output_prefix (defaults
# "\nQ: " and "\nA: "), stripped; multiple_choice_targets = target_scores keys in file
# order. llm-foundry rows ({query, choices, gold}) are read as inputs = query.

_INPUT_PREFIX, _OUTPUT_PREFIX = "\nQ: ", "\nA: "


def bigbench(data_dir: Path, name: Optional[str], split: str) -> Rows:
    """Read a BIG-bench `<task>_zero_shot` config from its original task.json, else from llm-foundry's JSONL."""
    task = (name or "").removesuffix("_zero_shot")
    if split != "default" or not task:
        raise UserError(f"BIG-bench has no local config {name!r} / split {split!r} "
                        "(have: <task>_zero_shot / default)")
    root = data_dir / "bigbench"
    task_json = root / "original_task_json" / task / "task.json"
    if task_json.is_file():
        return _task_json_rows(task_json)
    foundry = [root / "llm-foundry" / f"bigbench_{task}.jsonl",
               root / "llm-foundry" / f"bigbench_{task}.jsonl.gz"]
    if any(p.is_file() for p in foundry):
        return _foundry_rows(first_existing(foundry))
    raise UserError(f"BIG-bench task {task!r} not found: looked for {task_json} and "
                    f"{foundry[0]}[.gz]")


def _task_json_rows(path: Path) -> Rows:
    task = read_json(path)
    where = f"{path}: the task"
    examples = field(task, "examples", list, where)
    if "subtasks" in task:
        raise UserError(f"{path}: a BIG-bench task with subtasks is not supported")
    prefix = optional_field(task, "task_prefix", str, where, "")
    in_prefix = optional_field(task, "example_input_prefix", str, where, _INPUT_PREFIX)
    out_prefix = optional_field(task, "example_output_prefix", str, where, _OUTPUT_PREFIX)
    rows = []
    for i, ex in enumerate(examples):
        where = f"{path}: examples[{i}]"
        text = field(ex, "input", str, where)
        scores = optional_field(ex, "target_scores", dict[str, float], where, {})
        targets = _task_json_targets(ex, scores, where)
        rows.append({"idx": i, "inputs": (prefix + in_prefix + text + out_prefix).strip(),
                     "targets": targets, "multiple_choice_targets": list(scores),
                     "multiple_choice_scores": [int(v) for v in scores.values()]})
    return nonempty(rows, path)


def _task_json_targets(ex: dict, scores: dict, where: str) -> list[str]:
    """`target` (one string or a list), else the answers with the top target score."""
    if "target" in ex:
        target = field(ex, "target", str | list[str], where)
        return list(target) if isinstance(target, list) else [target]
    if not scores:
        raise UserError(f"{where} has neither 'target' nor 'target_scores'")
    top = max(scores.values())
    return [k for k, v in scores.items() if v == top]


def _foundry_rows(path: Path) -> Rows:
    rows = []
    for i, (line, row) in enumerate(read_jsonl(path)):
        where = f"{path}:{line}: the row"
        query, choices = field(row, "query", str, where), field(row, "choices", list[str], where)
        gold = field(row, "gold", int, where)
        if not 0 <= gold < len(choices):
            raise UserError(f"{where} has gold {gold}, which is not an index into its "
                            f"{len(choices)} choices")
        rows.append({"idx": i, "inputs": query, "targets": [choices[gold]],
                     "multiple_choice_targets": list(choices),
                     "multiple_choice_scores": [int(j == gold) for j in range(len(choices))]})
    return nonempty(rows, path)


LOADERS = {"truthfulqa/truthful_qa": truthful_qa, "hails/bigbench": bigbench}
