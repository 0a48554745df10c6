r"""ARC-Challenge 25-shot, lm-eval's `arc_challenge` (Open LLM Leaderboard): acc, acc_norm.

Prompt "Question: {question}\nAnswer:", choices = the answer texts, gold = the answer
key's position in the row's own labels (so "1".."4" keys need no mapping). Shots are
drawn from train with lm-eval's seeded sampler; the eval doc is never excluded (the
few-shot split is not the test split). native_id = the ARC question id.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Optional

from proctor.data import load_split
from proctor.errors import UserError
from proctor.tasks.base import TaskConfig
from proctor.tasks.lm_eval.base import HarnessTask

DATASET = "allenai/ai2_arc"
SPEC = "arc_challenge::leaderboard"


class ARCLeaderboardTask(HarnessTask):
    """ARC-Challenge as the Open LLM Leaderboard runs it: 25 shots from train, scored by acc_norm."""

    shots_split = "train"

    def rows(self, data_dir: Optional[Path], split: str) -> list[dict]:
        """Read one split of ARC-Challenge."""
        return load_split(DATASET, self.config.dataset_name, split, data_dir)

    def native_id(self, row: dict, index: int) -> Any:
        """Return the ARC question id."""
        return row["id"]

    def text(self, row: dict) -> str:
        """Return the question as "Question: ..." with "Answer:" on the next line."""
        return f"Question: {row['question']}\nAnswer:"

    def choices(self, row: dict) -> list[str]:
        """Return the answer texts."""
        return list(row["choices"]["text"])

    def gold(self, row: dict) -> int:
        """Return the answer key's position among the row's own labels."""
        labels = list(row["choices"]["label"])
        if row["answerKey"] not in labels:
            raise UserError(f"ARC item {row.get('id')!r}: answer key {row['answerKey']!r} is not "
                            f"one of its labels {labels}")
        return labels.index(row["answerKey"])


def configs() -> dict[str, TaskConfig]:
    """Build the one spec's config."""
    return {SPEC: TaskConfig(name=SPEC, benchmark="arc_challenge", dataset_path=DATASET,
                             dataset_name="ARC-Challenge", split="test", num_shots=25,
                             primary_metric="acc_norm",
                             fewshot_source="train split, lm-eval random sampler (seed 1234)")}


TASK_CLASS = ARCLeaderboardTask
