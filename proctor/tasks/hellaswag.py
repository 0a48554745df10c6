"""HellaSwag (`Rowan/hellaswag`): OLMES RC, query = preprocess(label + ": " + ctx).

Locally only the validation split exists, in the klosax text form without
ctx_a/ctx_b; proctor.data.local splits ctx back (see there), so a few prompts can
differ from OLMES's in capitalisation of the final fragment or markup handling.
native_id = row index within its split (the text form has no `ind`).
"""

from __future__ import annotations

from pathlib import Path
from typing import Optional

from proctor.data import load_fewshot, load_split
from proctor.tasks.base import TaskConfig
from proctor.tasks.choice import ChoiceTask, Rendered
from proctor.tasks.prompts import hellaswag_preprocess

DATASET = "Rowan/hellaswag"
FEWSHOT = "OLMES:hellaswag"


class HellaSwagTask(ChoiceTask):
    splits = ("validation", "train")  # the hub's test split has no labels

    def split_rows(self, data_dir: Optional[Path], split: str) -> list[dict]:
        return load_split(DATASET, None, split, data_dir)

    def fewshot_rows(self, data_dir: Optional[Path]) -> list[dict]:
        return load_fewshot(FEWSHOT, self.config.num_shots, data_dir)

    def render(self, row: dict) -> Rendered:
        ctx = row["ctx_a"] + " " + row["ctx_b"].capitalize()
        text = hellaswag_preprocess(row["activity_label"] + ": " + ctx)
        options = tuple(hellaswag_preprocess(e) for e in row["endings"])
        return Rendered(text=text, options=options, gold=int(row["label"]))


def configs() -> dict[str, TaskConfig]:
    def cfg(name: str, split: str, limit: int) -> TaskConfig:
        return TaskConfig(name=name, benchmark="hellaswag", dataset_path=DATASET,
                          dataset_name=None, split=split, num_shots=5,
                          primary_metric="acc_per_char", sample_limit=limit, fewshot_source=FEWSHOT)

    return {"hellaswag:rc::olmes": cfg("hellaswag:rc::olmes", "validation", 1000),
            "hellaswag:rc::xlarge": cfg("hellaswag:rc::xlarge", "all", 10000)}


TASK_CLASS = HellaSwagTask
