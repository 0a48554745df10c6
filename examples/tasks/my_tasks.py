"""Tasks written in Python: `proctor run --include examples/tasks/my_tasks.py --tasks arith:mc ...`.

Two-digit additions, generated (no data file): `arith:mc` / `arith:rc` rank four candidate
sums like any OLMES multiple-choice task; `arith:gen` asks for the sum and checks it exactly.
"""

from __future__ import annotations

import random
from pathlib import Path
from typing import Optional

from proctor.outputs.records import SampleOutput
from proctor.requests import Generate, GenerateResult
from proctor.tasks.choice import ChoiceTask, Rendered
from proctor.tasks.generation import DocScore, GenerationInstance, GenerationTask
from proctor import task
from proctor.tasks.prompts import make_cloze_prompt, make_mcq_prompt

DESCRIPTION = "The following are addition questions (with answers).\n\n"


def additions(seed: int, n: int) -> list[dict]:
    """n questions "What is a + b?", each with four candidate sums and the gold index."""
    rnd = random.Random(seed)
    rows = []
    for _ in range(n):
        a, b = rnd.randint(10, 49), rnd.randint(10, 49)
        wrong = rnd.sample([s for s in range(a + b - 9, a + b + 10) if s != a + b], 3)
        choices = [a + b, *wrong]
        rnd.shuffle(choices)
        rows.append({"question": f"What is {a} + {b}?", "choices": [str(c) for c in choices],
                     "answer": choices.index(a + b)})
    return rows


@task("arith:mc", num_shots=3)
@task("arith:rc", num_shots=3)
class Arithmetic(ChoiceTask):
    def split_rows(self, data_dir: Optional[Path], split: str) -> list[dict]:
        return additions(seed=0, n=20)

    def fewshot_rows(self, data_dir: Optional[Path]) -> list[dict]:
        return additions(seed=1, n=3)

    def description(self) -> str:
        return DESCRIPTION

    def render(self, row: dict) -> Rendered:
        q, choices = row["question"], tuple(row["choices"])
        text = make_mcq_prompt(q, choices) if self.is_mc else make_cloze_prompt(q)
        return Rendered(text=text, options=choices, gold=row["answer"])


@task("arith:gen")
class ArithmeticAnswer(GenerationTask):
    metric_names = ("exact_match",)

    def docs(self, data_dir: Optional[Path]) -> list[dict]:
        return self.as_docs(additions(seed=0, n=20), self.config.split)

    def prompt_prefix(self, data_dir: Optional[Path]) -> str:
        return DESCRIPTION

    def doc_request(self, prefix: str, doc: dict) -> Generate:
        return Generate(context=prefix + make_cloze_prompt(doc["question"]), max_gen_toks=8, stop=("\n",))

    def doc_target(self, doc: dict) -> str:
        return doc["choices"][doc["answer"]]

    def score(self, instance: GenerationInstance, result: GenerateResult) -> DocScore:
        text = result.samples[0].text.strip()
        correct = text == instance.target
        return DocScore(metrics={"exact_match": float(correct)}, predicted_answer=text,
                        correct_answer=instance.target, is_correct=correct,
                        model_output=tuple(SampleOutput(s.text, s.num_tokens, s.finish_reason)
                                           for s in result.samples))
