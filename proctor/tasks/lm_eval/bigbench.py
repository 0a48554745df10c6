"""BIG-bench multiple choice in lm-eval's format (`bigbench_<task>_multiple_choice`): 0-shot, acc.

lm-eval reads hails/bigbench `<task>_zero_shot`, split "default", drops rows without
multiple-choice targets, and scores doc text = `inputs`, choices =
`multiple_choice_targets`, gold = index of `targets[0]` (template a) or of the first
score 1 (template b, strategyqa). Locally the rows are rebuilt from BIG-bench's
task.json, or read from llm-foundry's {query, choices, gold} conversion
(proctor.data.local_harness).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Optional

from proctor.data import load_split
from proctor.errors import UserError
from proctor.tasks.base import TaskConfig
from proctor.tasks.lm_eval.base import HarnessTask

DATASET = "hails/bigbench"
#: the nine tasks together, macro-averaged (lm-eval has no group for this selection)
SUITE = "bigbench::leaderboard"

# task -> (local source, lm-eval template): "a" gold = targets[0], "b" gold = score 1
TASKS: dict[str, tuple[str, str]] = {
    "date_understanding": ("task.json", "a"),
    "strategyqa": ("task.json", "b"),
    "conceptual_combinations": ("llm-foundry", "a"),
    "logical_deduction": ("llm-foundry", "a"),
    "misconceptions": ("llm-foundry", "a"),
    "movie_recommendation": ("llm-foundry", "a"),
    "novel_concepts": ("llm-foundry", "a"),
    "strange_stories": ("llm-foundry", "a"),
    "understanding_fables": ("llm-foundry", "a"),
}


def spec(task: str) -> str:
    """Return the spec name of a BIG-bench task: `bigbench_<task>::leaderboard`."""
    return f"bigbench_{task}::leaderboard"


class BigBenchLeaderboardTask(HarnessTask):
    """One BIG-bench task as lm-eval's `bigbench_<task>_multiple_choice`: 0-shot, acc."""

    shots_split = "default"   # lm-eval's fallback to the test docs (only with a shots override)

    @property
    def template(self) -> str:
        """The task's lm-eval template: "a" (gold is targets[0]) or "b" (gold is the choice scored 1)."""
        return TASKS[self.config.needs("subject")][1]

    def rows(self, data_dir: Optional[Path], split: str) -> list[dict]:
        """Read one split, without the rows that have no multiple-choice targets (as lm-eval does)."""
        rows = load_split(DATASET, self.config.dataset_name, split, data_dir)
        return [r for r in rows if len(r["multiple_choice_targets"]) > 0]

    def native_id(self, row: dict, index: int) -> Any:
        """Return the row's `idx`."""
        return row["idx"]

    def text(self, row: dict) -> str:
        """Return the row's `inputs`."""
        return row["inputs"]

    def choices(self, row: dict) -> list[str]:
        """Return the row's `multiple_choice_targets`."""
        return list(row["multiple_choice_targets"])

    def gold(self, row: dict) -> int:
        """Return the gold choice's index as the task's template finds it."""
        where = f"BIG-bench {self.config.subject} item {row.get('idx')!r}"
        if self.template == "b":
            scores = list(row["multiple_choice_scores"])
            if 1 not in scores:
                raise UserError(f"{where}: no choice has score 1")
            return scores.index(1)
        targets, options = list(row["targets"]), self.choices(row)
        if not targets or targets[0] not in options:
            raise UserError(f"{where}: its target {targets[:1]} is not one of its choices")
        return options.index(targets[0])


def configs() -> dict[str, TaskConfig]:
    """Build each task's config."""
    return {spec(t): TaskConfig(name=spec(t), benchmark="bigbench", dataset_path=DATASET,
                                dataset_name=f"{t}_zero_shot", split="default", num_shots=0,
                                primary_metric="acc_raw", subject=t,
                                fewshot_source=f"none (local rows from {src})")
            for t, (src, _) in TASKS.items()}


TASK_CLASS = BigBenchLeaderboardTask
