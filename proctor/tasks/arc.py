"""ARC Challenge / Easy (`allenai/ai2_arc`): OLMES MC/RC prompts, 3-5 options.

Numeric answer keys "1".."5" (some NY Regents items) map to A..E as OLMES does; the
gold index is the key's position in A..E. native_id = the ARC question id.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Optional

from proctor.data import load_fewshot, load_split
from proctor.tasks.base import TaskConfig
from proctor.tasks.choice import ChoiceTask, Rendered, lettered_choices

DATASET = "allenai/ai2_arc"
_NUM_TO_LETTER = {"1": "A", "2": "B", "3": "C", "4": "D", "5": "E"}
_CONFIG = {"arc_challenge": "ARC-Challenge", "arc_easy": "ARC-Easy"}


class ARCTask(ChoiceTask):
    """ARC Challenge or Easy as OLMES runs it, MC or RC over 3-5 options."""

    splits = ("test", "validation", "train")

    def split_rows(self, data_dir: Optional[Path], split: str) -> list[dict]:
        """Read one split of the spec's ARC set."""
        return load_split(DATASET, self.config.dataset_name, split, data_dir)

    def fewshot_rows(self, data_dir: Optional[Path]) -> list[dict]:
        """Read the first num_shots examples of the spec's few-shot source."""
        return load_fewshot(self.config.needs("fewshot_source"), self.config.num_shots, data_dir)

    def native_id(self, row: dict, index: int) -> Any:
        """Return the ARC question id."""
        return row["id"]

    def render(self, row: dict) -> Rendered:
        """Lay a row out as MC or RC; the gold is its answer key's position in A..E (keys "1".."5" too)."""
        key = _NUM_TO_LETTER.get(row["answerKey"], row["answerKey"])
        return lettered_choices("ARC", row, row["question"], key, self.is_mc)


def configs() -> dict[str, TaskConfig]:
    """Build each ARC set's :mc::olmes and :rc::olmes configs (their other sizes: `proctor.tasks.olmes_sizes`)."""
    out = {}
    for task, config_name in _CONFIG.items():
        rc_metric = "acc_uncond" if task == "arc_challenge" else "acc_per_char"
        olmes_limit = 1000 if task == "arc_easy" else None
        for fmt, metric in (("mc", "acc_raw"), ("rc", rc_metric)):
            name = f"{task}:{fmt}::olmes"
            out[name] = TaskConfig(name=name, benchmark=task, dataset_path=DATASET,
                                   dataset_name=config_name, split="test", num_shots=5,
                                   primary_metric=metric, sample_limit=olmes_limit,
                                   fewshot_source=f"OLMES:{config_name}")
    return out


TASK_CLASS = ARCTask
