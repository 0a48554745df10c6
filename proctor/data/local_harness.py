"""Local readers for the lm-evaluation-harness datasets TruthfulQA and BIG-bench.

Rows come out shaped like the hub datasets lm-eval loads:
`truthfulqa/truthful_qa` (multiple_choice) and `hails/bigbench` (`<task>_zero_shot`).
"""

from __future__ import annotations

from pathlib import Path
from typing import Optional

from proctor.data.readers import first_existing, read_json, read_jsonl
from proctor.errors import UserError

Rows = list[dict]


# ---- TruthfulQA: truthfulqa/data/v0/mc_task.json -------------------------------
#
# The hub's multiple_choice config (817 questions, first "What is the smallest country
# in the world that is at least one square mile in area?") is the original 2021
# mc_task.json, stored here as data/v0; the root data/mc_task.json is the 2025 revision
# (790 questions) and data/v1 reorders the questions.

def truthful_qa(data_dir: Path, name: Optional[str], split: str) -> Rows:
    if name != "multiple_choice" or split != "validation":
        raise UserError(f"TruthfulQA has no local config {name!r} / split {split!r} "
                        "(have: multiple_choice / validation)")
    base = data_dir / "truthfulqa" / "data" / "v0"
    path = first_existing([base / "mc_task.json", base / "mc_task.json.gz"])
    items = read_json(path)
    if not isinstance(items, list):
        raise UserError(f"{path}: expected a JSON list of questions")
    rows = []
    for i, item in enumerate(items):
        try:
            rows.append({"question": item["question"],
                         "mc1_targets": _targets(item["mc1_targets"]),
                         "mc2_targets": _targets(item["mc2_targets"])})
        except (KeyError, TypeError, AttributeError) as e:
            raise UserError(f"{path}: item {i} is not a TruthfulQA MC item ({e!r})") from None
    return rows


def _targets(answers: dict) -> dict:
    return {"choices": list(answers), "labels": [int(v) for v in answers.values()]}


# ---- BIG-bench: original task.json, else the llm-foundry jsonl --------------------
#
# hails/bigbench `<task>_zero_shot` rows were made by BIG-bench's json_task formatting:
# inputs = task_prefix + example_input_prefix + input + example_output_prefix (defaults
# "\nQ: " and "\nA: "), stripped; multiple_choice_targets = target_scores keys in file
# order. llm-foundry rows ({query, choices, gold}) are read as inputs = query.

_INPUT_PREFIX, _OUTPUT_PREFIX = "\nQ: ", "\nA: "


def bigbench(data_dir: Path, name: Optional[str], split: str) -> Rows:
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
    if not isinstance(task, dict) or not isinstance(task.get("examples"), list):
        raise UserError(f"{path}: expected a BIG-bench task.json object with a list 'examples'")
    if "subtasks" in task:
        raise UserError(f"{path}: a BIG-bench task with subtasks is not supported")
    prefix = str(task.get("task_prefix", ""))
    in_prefix = str(task.get("example_input_prefix", _INPUT_PREFIX))
    out_prefix = str(task.get("example_output_prefix", _OUTPUT_PREFIX))
    rows = []
    for i, ex in enumerate(task["examples"]):
        if not isinstance(ex, dict) or not isinstance(ex.get("input"), str):
            raise UserError(f"{path}: examples[{i}] has no string 'input'")
        scores = ex.get("target_scores") or {}
        if not isinstance(scores, dict):
            raise UserError(f"{path}: examples[{i}]: 'target_scores' must be an object")
        if "target" in ex:
            target = ex["target"]
            targets = list(target) if isinstance(target, list) else [target]
        elif scores:
            top = max(scores.values())
            targets = [k for k, v in scores.items() if v == top]
        else:
            raise UserError(f"{path}: examples[{i}] has neither 'target' nor 'target_scores'")
        rows.append({"idx": i, "inputs": (prefix + in_prefix + ex["input"] + out_prefix).strip(),
                     "targets": [str(t) for t in targets],
                     "multiple_choice_targets": list(scores),
                     "multiple_choice_scores": [int(v) for v in scores.values()]})
    return rows


def _foundry_rows(path: Path) -> Rows:
    rows = []
    for i, row in enumerate(read_jsonl(path)):
        choices, gold = row.get("choices"), row.get("gold")
        if not (isinstance(row.get("query"), str) and isinstance(choices, list) and choices
                and isinstance(gold, int) and 0 <= gold < len(choices)):
            raise UserError(f"{path}:{i + 1}: expected {{query, choices, gold}} with gold an "
                            "index into choices")
        rows.append({"idx": i, "inputs": row["query"], "targets": [choices[gold]],
                     "multiple_choice_targets": list(choices),
                     "multiple_choice_scores": [int(j == gold) for j in range(len(choices))]})
    return rows


LOADERS = {"truthfulqa/truthful_qa": truthful_qa, "hails/bigbench": bigbench}
